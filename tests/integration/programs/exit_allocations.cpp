// Device memory used as a program ends: from an atexit handler and from a static object's destructor
// (both run after main returns, after thread_local objects are gone), through the runtime and the
// driver API. Prints one line from each (after_main_ok=1 when every call in it succeeded), run with
// and without the shim by test_lifecycle.py.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// One block through the runtime: allocated, written, read back, freed. True when all of it worked.
bool runtime_round_trip(std::uint32_t pattern) {
  void* block = nullptr;
  if (cudaMalloc(&block, 1 << 20) != cudaSuccess) return false;
  std::uint32_t back = 0;
  const bool copied = cudaMemcpy(block, &pattern, sizeof pattern, cudaMemcpyHostToDevice) == cudaSuccess &&
                      cudaMemcpy(&back, block, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess;
  return cudaFree(block) == cudaSuccess && copied && back == pattern;
}

// The same through the driver API, in the runtime's (primary) context.
bool driver_round_trip(std::uint32_t pattern) {
  CUdeviceptr block = 0;
  if (cuMemAlloc(&block, 1 << 20) != CUDA_SUCCESS) return false;
  std::uint32_t back = 0;
  const bool copied = cuMemcpyHtoD(block, &pattern, sizeof pattern) == CUDA_SUCCESS &&
                      cuMemcpyDtoH(&back, block, sizeof back) == CUDA_SUCCESS;
  return cuMemFree(block) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS && copied && back == pattern;
}

void at_exit() {
  std::printf("atexit_runtime_ok=%d\n", runtime_round_trip(0xA7E71700u) ? 1 : 0);
  std::printf("atexit_driver_ok=%d\n", driver_round_trip(0xA7E71701u) ? 1 : 0);
  std::fflush(stdout);
}

struct AllocatesWhenDestroyed {
  ~AllocatesWhenDestroyed() {
    std::printf("static_destructor_runtime_ok=%d\n", runtime_round_trip(0x57A71C00u) ? 1 : 0);
    std::printf("static_destructor_driver_ok=%d\n", driver_round_trip(0x57A71C01u) ? 1 : 0);
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string when = argc > 1 ? argv[1] : "both";
  // Constructed here, after the runtime's own statics: destroyed before them, as a program's
  // function-local static would be.
  if (when == "static" || when == "both") static AllocatesWhenDestroyed allocates_when_destroyed;
  if (when == "atexit" || when == "both") std::atexit(at_exit);
  std::printf("main_ok=%d\n", runtime_round_trip(0x3A1A0000u) ? 1 : 0);
  std::fflush(stdout);
  return 0;
}
