// Which loaded object is "the driver" the shim's hooks stand in for, and which one is the shim.
//
// The driver is the object whose entry points the hooks replace: the first object seen defining a
// hooked entry point and cuGetProcAddress_v2 (when the program's runtime looks it up by handle), or
// else the loaded libcuda.so.1. The real-driver table is resolved from that same object, so a hook
// always forwards into the driver it replaced. Handles here are glibc link maps (= dlopen handles).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace gpumem::shim {

// The object (link map) that contains `address`, or null.
void* object_containing(const void* address) noexcept;

// True when `address` lies inside the shim: libgpumem-core.so, or the preloaded libgpumem.so whose
// stubs carry the hooks' names (note_preload_object).
bool is_own_address(const void* address) noexcept;
// Behind the preloaded library: `address` lies in it (api/core_interface.h). Before any hook runs.
void note_preload_object(const void* address) noexcept;

// Records `object` as the driver if none is recorded yet and it defines the driver API. Returns
// true when `object` is (now) the driver; false for our own object, non-driver objects, or a second
// driver.
bool adopt_driver_object(void* object) noexcept;

// The driver's handle: the adopted one, else libcuda.so.1 if loaded; if `load` is set (only from a
// hook, i.e. the program already uses CUDA), dlopen it. Null when there is no driver.
void* driver_handle(bool load) noexcept;

// The driver's own cuGetProcAddress entry points, by exact name on driver_handle(load). Lock-free.
PFN_cuGetProcAddress_v12000 driver_proc_address_v2(bool load) noexcept;
PFN_cuGetProcAddress_v11030 driver_proc_address_v1(bool load) noexcept;

// One real entry point: asked of the driver's cuGetProcAddress_v2 by base name, version and flags;
// by exact versioned name with the real dlsym when that fails (NVIDIA's stub driver). Null when the
// driver answers with another ABI of the family (it is older than `version`). Never one of
// our hooks: null when only the shim provides it.
void* driver_entry_point(const char* versioned_name, const char* base_name, int version,
                         cuuint64_t flags) noexcept;

}  // namespace gpumem::shim
