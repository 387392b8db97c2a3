// The real CUDA driver's entry points, as the shim calls them. Resolved lazily, never at load.
//
// Every call the shim makes into CUDA goes through this table, so it never re-enters its own hooks. The
// entry points are listed once, in entry_points.def.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace gpumem::shim {

// Expands to the function-pointer type of an entry point: PFN_<base>_v<version>, _ptsz for PER_THREAD.
// The name is pasted at the first level, before cuda.h's own macros (cuMemAlloc -> cuMemAlloc_v2) could
// rewrite `base`.
#define GPUMEM_PFN_LEGACY(type) type
#define GPUMEM_PFN_PER_THREAD(type) type##_ptsz
// Expands to the cuGetProcAddress flags of an entry's stream column.
#define GPUMEM_STREAM_FLAGS_LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM
#define GPUMEM_STREAM_FLAGS_PER_THREAD CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define GPUMEM_STREAM_FLAGS(stream) GPUMEM_STREAM_FLAGS_##stream

// One field per entry of driver/entry_points.def, named exactly as the driver exports it.
// Invariant: after real_driver() returned with `available` true, every pointer that the driver
// provides is non-null and points into the real driver, never at one of the shim's hooks. A pointer
// the driver lacks stays null; callers check before use.
struct RealDriver {
  bool available = false;  // false: the program never loaded a CUDA driver we could find
#define GPUMEM_DRIVER_ENTRY(symbol, base, version, stream, use) \
  GPUMEM_PFN_##stream(PFN_##base##_v##version) symbol = nullptr;
#include "driver/entry_points.def"
};

// The table, resolved on first use (thread-safe). Cheap after the first call.
const RealDriver& real_driver();

// The driver's name for `result` (cuGetErrorName), or "unknown error": for log lines.
const char* driver_error_name(CUresult result);

}  // namespace gpumem::shim
