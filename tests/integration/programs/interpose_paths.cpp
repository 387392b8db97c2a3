// Allocates and frees device memory through one of the three ways a program reaches the driver:
// the CUDA runtime (built against the shared or the static runtime) or the driver API directly
// (INTERPOSE_DRIVER_API). Prints "allocations=N" and "gpumem_is_active=V" (-1 when the shim's C API
// is absent, i.e. the shim is not loaded), so a test can tell whether the shim's hooks were
// reached.
#include <dlfcn.h>

#include <cstdio>

#ifdef INTERPOSE_DRIVER_API
#include <cuda.h>
#else
#include <cuda_runtime_api.h>
#endif

namespace {

constexpr int kAllocations = 64;
constexpr size_t kBytes = 1 << 20;

int gpumem_is_active_or_absent() {
  using IsActive = int (*)();
  const auto is_active = reinterpret_cast<IsActive>(dlsym(RTLD_DEFAULT, "gpumem_is_active"));
  return is_active != nullptr ? is_active() : -1;
}

#ifdef INTERPOSE_DRIVER_API
bool allocate_and_free() {
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    std::printf("driver set-up failed\n");
    return false;
  }
  CUdeviceptr blocks[kAllocations] = {};
  for (CUdeviceptr& block : blocks) {
    if (cuMemAlloc(&block, kBytes) != CUDA_SUCCESS) return false;
  }
  for (CUdeviceptr block : blocks) {
    if (cuMemFree(block) != CUDA_SUCCESS) return false;
  }
  return cuCtxSynchronize() == CUDA_SUCCESS && cuDevicePrimaryCtxRelease(device) == CUDA_SUCCESS;
}
#else
bool allocate_and_free() {
  void* blocks[kAllocations] = {};
  for (void*& block : blocks) {
    const cudaError_t error = cudaMalloc(&block, kBytes);
    if (error != cudaSuccess) {
      std::printf("cudaMalloc failed: %s\n", cudaGetErrorName(error));
      return false;
    }
  }
  for (void* block : blocks) {
    if (cudaFree(block) != cudaSuccess) return false;
  }
  return cudaDeviceSynchronize() == cudaSuccess;
}
#endif

}  // namespace

int main() {
  std::printf("gpumem_is_active_before=%d\n", gpumem_is_active_or_absent());
  if (!allocate_and_free()) return 1;
  std::printf("allocations=%d\n", kAllocations);
  std::printf("gpumem_is_active=%d\n", gpumem_is_active_or_absent());
  return 0;
}
