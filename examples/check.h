// CHECK(call): every CUDA runtime call in the examples goes through it, so any error ends the
// program with a message naming the call, the file and line, and status 1.
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>

#include "common.h"

namespace examples {

// Whether a CUDA driver (NVIDIA's, or the simulated one) is loaded in this process.
inline bool driver_loaded() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice || status == cudaErrorInitializationError) {
    const char* strict = std::getenv("GPUMEM_STRICT");
    if (driver_loaded() && strict != nullptr && *strict != '\0') {
      // gpumem refused the driver to this process: its own line above says which variable is wrong.
      fail("%s:%d: %s returned %s (%s); GPUMEM_STRICT is set and a gpumem variable is invalid: the gpumem: line "
           "above names it",
           file, line, call, cudaGetErrorName(status), cudaGetErrorString(status));
    }
    if (!driver_loaded()) {
      // The usual first run on a machine without a GPU: say how to run over the simulator instead.
      fail("%s:%d: %s returned %s (%s); no CUDA driver was found: without a GPU, run over the simulated one: "
           "gpumem-run --sim, or LD_LIBRARY_PATH=<build>/cudasim",
           file, line, call, cudaGetErrorName(status), cudaGetErrorString(status));
    }
  }
  if (status != cudaSuccess) {
    fail("%s:%d: %s returned %s (%s)", file, line, call, cudaGetErrorName(status),
         cudaGetErrorString(status));
  }
}

// Device memory as cudaMemGetInfo reports it, for the summaries.
struct MemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

inline MemoryInfo query_memory_info() {
  MemoryInfo info;
  check_cuda(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo", __FILE__, __LINE__);
  return info;
}

inline void print_memory_info(const char* label, const MemoryInfo& info) {
  std::printf("  cudaMemGetInfo %s: free %s of %s\n", label, format_bytes(info.free_bytes).c_str(),
              format_bytes(info.total_bytes).c_str());
}

}  // namespace examples

#define CHECK(call) ::examples::check_cuda((call), #call, __FILE__, __LINE__)
