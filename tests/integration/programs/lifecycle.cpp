// Life-cycle scenario, run with and without the shim by test_lifecycle.py: a program that loads the
// CUDA runtime only with dlopen (it links no CUDA library), so dlclose really unloads it. Prints
// key=value lines; exits 0 when every call behaved.
//
//   dlopen_cycle N   N times: dlopen the CUDA runtime, allocate, write, read back and free through
//                    the entry points dlsym gives, cudaDeviceReset, dlclose
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// A failed call ends the program with status 3 and one line (the runtime's error names are not
// linked here).
#define CHECK_RT(call)                                                              \
  do {                                                                              \
    const cudaError_t check_status = (call);                                        \
    if (check_status != cudaSuccess) {                                              \
      std::fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call,          \
                   static_cast<int>(check_status));                                 \
      std::exit(3);                                                                 \
    }                                                                               \
  } while (0)

namespace {

struct Runtime {
  void* handle = nullptr;
  cudaError_t (*malloc)(void**, std::size_t) = nullptr;
  cudaError_t (*free)(void*) = nullptr;
  cudaError_t (*memcpy)(void*, const void*, std::size_t, cudaMemcpyKind) = nullptr;
  cudaError_t (*reset)() = nullptr;
};

template <typename Function>
bool resolve(void* handle, const char* name, Function& out) {
  out = reinterpret_cast<Function>(dlsym(handle, name));
  if (out == nullptr) std::printf("missing=%s\n", name);
  return out != nullptr;
}

int dlopen_cycle(int rounds) {
  int intact = 0;
  for (int round = 0; round < rounds; ++round) {
    Runtime rt;
    rt.handle = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (rt.handle == nullptr) {
      std::printf("dlopen_failed=%s\n", dlerror());
      return 1;
    }
    if (!resolve(rt.handle, "cudaMalloc", rt.malloc) || !resolve(rt.handle, "cudaFree", rt.free) ||
        !resolve(rt.handle, "cudaMemcpy", rt.memcpy) || !resolve(rt.handle, "cudaDeviceReset", rt.reset)) {
      return 1;
    }
    void* block = nullptr;
    CHECK_RT(rt.malloc(&block, 1 << 20));
    const std::uint64_t pattern = 0xC0FFEE00u + static_cast<std::uint64_t>(round);
    std::uint64_t back = 0;
    CHECK_RT(rt.memcpy(block, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
    CHECK_RT(rt.memcpy(&back, block, sizeof back, cudaMemcpyDeviceToHost));
    if (back == pattern) ++intact;
    CHECK_RT(rt.free(block));
    CHECK_RT(rt.reset());
    if (dlclose(rt.handle) != 0) {
      std::printf("dlclose_failed=%s\n", dlerror());
      return 1;
    }
    if (round == 0) {  // whether the driver went with the runtime (without the shim it does)
      void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      std::printf("driver_loaded_after_dlclose=%d\n", driver != nullptr ? 1 : 0);
      if (driver != nullptr) dlclose(driver);
    }
  }
  std::printf("rounds=%d\nintact=%d\n", rounds, intact);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const int count = argc > 2 ? std::atoi(argv[2]) : 3;
  if (scenario == "dlopen_cycle") return dlopen_cycle(count);
  std::fprintf(stderr, "usage: lifecycle dlopen_cycle N\n");
  return 2;
}
