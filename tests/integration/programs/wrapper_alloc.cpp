// One device allocation through the driver API, for gpumem-run's end-to-end tests: allocates and
// frees 1 MiB on device 0 and prints what cuMemGetInfo reports meanwhile. Exits 3 on any failure.
#include <cuda.h>

#include <cstdio>

namespace {

bool succeeded(CUresult status, const char* call) {
  if (status == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(status, &name);
  std::fprintf(stderr, "%s -> %s\n", call, name != nullptr ? name : "?");
  return false;
}

}  // namespace

int main() {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUdeviceptr block = 0;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (!succeeded(cuInit(0), "cuInit") || !succeeded(cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !succeeded(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") ||
      !succeeded(cuCtxSetCurrent(context), "cuCtxSetCurrent") ||
      !succeeded(cuMemAlloc(&block, 1 << 20), "cuMemAlloc") ||
      !succeeded(cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo") ||
      !succeeded(cuMemFree(block), "cuMemFree") ||
      !succeeded(cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease")) {
    return 3;
  }
  std::printf("total=%zu free=%zu\n", total_bytes, free_bytes);
  return 0;
}
