// Built against NVIDIA's own CUDA runtime (shared and static) and run with the toolkit's stub
// driver as libcuda.so.1: every driver call fails with CUDA_ERROR_STUB_LIBRARY. Prints what the
// runtime reports, which must be the same with and without the shim.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  int devices = -1;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  std::printf("cudaGetDeviceCount: %s\n", cudaGetErrorName(count_error));
  void* block = nullptr;
  const cudaError_t alloc_error = cudaMalloc(&block, 1 << 20);
  std::printf("cudaMalloc: %s\n", cudaGetErrorName(alloc_error));
  return alloc_error == cudaSuccess ? 1 : 0;
}
