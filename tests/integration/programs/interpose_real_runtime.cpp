// Built against NVIDIA's own CUDA runtime (shared and static) and run with the toolkit's stub
// driver as libcuda.so.1: every driver call fails with CUDA_ERROR_STUB_LIBRARY. Prints what the
// runtime reports, which must be the same with and without the shim.
//
// With the argument "lookups" it then does what the runtime itself does to find the driver: dlopen
// libcuda.so.1 and dlsym names on that handle, printing `NAME=FILE` (the basename of the object
// dladdr places each answer in).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace {

const char* object_of(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "none";
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash != nullptr ? slash + 1 : info.dli_fname;
}

int lookups() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) return 1;
  for (const char* name : {"cuMemAlloc_v2", "cuGetProcAddress_v2", "cuInit"}) {
    std::printf("%s=%s\n", name, object_of(dlsym(driver, name)));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = -1;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  std::printf("cudaGetDeviceCount: %s\n", cudaGetErrorName(count_error));
  void* block = nullptr;
  const cudaError_t alloc_error = cudaMalloc(&block, 1 << 20);
  std::printf("cudaMalloc: %s\n", cudaGetErrorName(alloc_error));
  if (alloc_error == cudaSuccess) return 1;
  return argc > 1 && std::strcmp(argv[1], "lookups") == 0 ? lookups() : 0;
}
