// A program that keeps going when CUDA calls fail, for fault injection (CUDASIM_FAULTS) under the
// shim (test_faults.py).
//
//   fault_tolerant OPERATIONS   OPERATIONS random calls (cudaMalloc, cudaFree, cudaMallocAsync and
//                               cudaFreeAsync on a stream, stream and device synchronisation,
//                               cudaMemGetInfo), each failure counted and cleared; a block whose
//                               free failed stays live (the driver keeps it). Then every live block
//                               is freed, and a clean round allocates, writes, reads back and frees.
//
// Prints failures=N, first_failure=NAME, final_ok=1 when the clean round worked, and the shim's
// bytes in use after it (gpumem_get_stats through dlsym; -1 without the shim). Exits 0 unless the
// clean round failed.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpumem.h"

namespace {

int g_failures = 0;
std::string g_first_failure = "none";

bool ok(cudaError_t status) {
  if (status == cudaSuccess) return true;
  if (g_failures++ == 0) g_first_failure = cudaGetErrorName(status);
  cudaGetLastError();
  return false;
}

struct Block {
  void* ptr;
  bool ordered;
};

bool clean_round() {
  std::vector<void*> blocks(10, nullptr);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (cudaMalloc(&blocks[i], (i + 1) << 16) != cudaSuccess) return false;
    const std::uint64_t pattern = 0xFA17u + i;
    std::uint64_t back = 0;
    if (cudaMemcpy(blocks[i], &pattern, sizeof pattern, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(&back, blocks[i], sizeof back, cudaMemcpyDeviceToHost) != cudaSuccess || back != pattern) {
      return false;
    }
  }
  for (void* block : blocks) {
    if (cudaFree(block) != cudaSuccess) return false;
  }
  return cudaDeviceSynchronize() == cudaSuccess;
}

long long shim_bytes_in_use() {
  using GetStats = int (*)(int, gpumem_stats*);
  auto get_stats = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "gpumem_get_stats"));
  gpumem_stats stats{};
  if (get_stats == nullptr || get_stats(0, &stats) != 0) return -1;
  return static_cast<long long>(stats.bytes_in_use);
}

}  // namespace

int main(int argc, char** argv) {
  const int operations = argc > 1 ? std::atoi(argv[1]) : 200;
  std::mt19937 rng(3);
  cudaStream_t stream = nullptr;
  while (!ok(cudaStreamCreate(&stream))) {
    if (g_failures > 10) return 4;
  }
  std::vector<Block> live;
  for (int i = 0; i < operations; ++i) {
    switch (rng() % 7) {
      case 0:
      case 1: {
        void* ptr = nullptr;
        if (ok(cudaMalloc(&ptr, (1 + rng() % 64) << 12))) live.push_back({ptr, false});
        break;
      }
      case 2: {
        void* ptr = nullptr;
        if (ok(cudaMallocAsync(&ptr, (1 + rng() % 64) << 12, stream))) live.push_back({ptr, true});
        break;
      }
      case 3:
      case 4: {
        if (live.empty()) break;
        const std::size_t victim = rng() % live.size();
        const Block block = live[victim];
        if (ok(block.ordered ? cudaFreeAsync(block.ptr, stream) : cudaFree(block.ptr))) {
          live[victim] = live.back();
          live.pop_back();
        }
        break;
      }
      case 5:
        ok(rng() % 2 == 0 ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize());
        break;
      default: {
        std::size_t free_bytes = 0;
        std::size_t total_bytes = 0;
        ok(cudaMemGetInfo(&free_bytes, &total_bytes));
        break;
      }
    }
  }
  for (const Block& block : live) {
    // A free that failed once is tried once more (an injected fault hits one call).
    if (!ok(block.ordered ? cudaFreeAsync(block.ptr, stream) : cudaFree(block.ptr))) {
      ok(block.ordered ? cudaFreeAsync(block.ptr, stream) : cudaFree(block.ptr));
    }
  }
  while (!ok(cudaDeviceSynchronize()) && g_failures < 1000) {
  }
  const bool final_ok = clean_round();
  std::printf("failures=%d\nfirst_failure=%s\nfinal_ok=%d\nshim_bytes_in_use=%lld\n", g_failures,
              g_first_failure.c_str(), final_ok ? 1 : 0, shim_bytes_in_use());
  return final_ok ? 0 : 1;
}
