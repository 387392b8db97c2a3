// Load and soak over the CUDA runtime, run under the shim by test_stress.py.
//
//   ops THREADS OPERATIONS   THREADS threads share OPERATIONS mixed operations: cudaMalloc /
//                            cudaMallocAsync on one of the thread's two streams, a block's first and
//                            last 64 bytes written with its own pattern, checked again just before
//                            it is freed (cudaFree, or cudaFreeAsync on its stream); up to 64 live
//                            blocks a thread
//   soak THREADS SECONDS     the same mix for SECONDS, printing the shim's peak reserved bytes
//                            after the first quarter of the run and, with its peak in use, at its
//                            end (gpumem_get_stats through dlsym; -1 without the shim)
//
// Prints key=value lines (operations, corrupt blocks); exits 0 when every call succeeded and no
// block lost its contents.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpumem.h"
#include "runtime_check.h"

namespace {

constexpr std::size_t kEdge = 64;         // bytes written and checked at each end of a block
constexpr std::size_t kMaxLive = 64;      // live blocks a thread keeps
constexpr std::size_t kMaxBytes = 256 << 10;

struct Block {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  cudaStream_t stream = nullptr;  // null: synchronous allocation
  std::uint64_t tag = 0;
};

// The pattern of a block: every byte depends on its tag and position, so a block handed to two
// owners at once, or moved, fails the check.
void fill(std::array<unsigned char, kEdge>& out, std::uint64_t tag, std::size_t offset) {
  for (std::size_t i = 0; i < kEdge; ++i) out[i] = static_cast<unsigned char>((tag * 131 + offset + i) * 7);
}

std::atomic<long long> g_operations{0};
std::atomic<long long> g_corrupt{0};

void write_edges(const Block& block) {
  std::array<unsigned char, kEdge> head{};
  std::array<unsigned char, kEdge> tail{};
  fill(head, block.tag, 0);
  fill(tail, block.tag, block.bytes - kEdge);
  auto* base = static_cast<unsigned char*>(block.ptr);
  if (block.stream == nullptr) {
    CHECK_CUDA(cudaMemcpy(base, head.data(), kEdge, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(base + block.bytes - kEdge, tail.data(), kEdge, cudaMemcpyHostToDevice));
  } else {
    CHECK_CUDA(cudaMemcpyAsync(base, head.data(), kEdge, cudaMemcpyHostToDevice, block.stream));
    CHECK_CUDA(cudaMemcpyAsync(base + block.bytes - kEdge, tail.data(), kEdge, cudaMemcpyHostToDevice,
                               block.stream));
    CHECK_CUDA(cudaStreamSynchronize(block.stream));  // the host arrays go out of scope
  }
}

bool edges_intact(const Block& block) {
  std::array<unsigned char, kEdge> want{};
  std::array<unsigned char, kEdge> got{};
  auto* base = static_cast<unsigned char*>(block.ptr);
  fill(want, block.tag, 0);
  CHECK_CUDA(cudaMemcpy(got.data(), base, kEdge, cudaMemcpyDeviceToHost));
  if (got != want) return false;
  fill(want, block.tag, block.bytes - kEdge);
  CHECK_CUDA(cudaMemcpy(got.data(), base + block.bytes - kEdge, kEdge, cudaMemcpyDeviceToHost));
  return got == want;
}

void release(Block& block) {
  if (!edges_intact(block)) g_corrupt.fetch_add(1);
  if (block.stream == nullptr) {
    CHECK_CUDA(cudaFree(block.ptr));
  } else {
    CHECK_CUDA(cudaFreeAsync(block.ptr, block.stream));
  }
}

// Runs operations until `budget` (shared) is spent or `deadline` passes.
void worker(unsigned seed, std::atomic<long long>& budget, std::chrono::steady_clock::time_point deadline) {
  std::mt19937_64 rng(seed);
  std::array<cudaStream_t, 2> streams{};
  for (cudaStream_t& stream : streams) CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<Block> live;
  live.reserve(kMaxLive);
  std::uint64_t next_tag = static_cast<std::uint64_t>(seed) << 32;
  while (budget.fetch_sub(1) > 0 && std::chrono::steady_clock::now() < deadline) {
    g_operations.fetch_add(1, std::memory_order_relaxed);
    const bool allocate = live.empty() || (live.size() < kMaxLive && rng() % 2 == 0);
    if (allocate) {
      Block block;
      block.bytes = std::max<std::size_t>(2 * kEdge, (rng() % kMaxBytes) & ~std::size_t{7});
      block.tag = ++next_tag;
      const unsigned kind = rng() % 3;
      if (kind == 0) {
        CHECK_CUDA(cudaMalloc(&block.ptr, block.bytes));
      } else {
        block.stream = streams[kind - 1];
        CHECK_CUDA(cudaMallocAsync(&block.ptr, block.bytes, block.stream));
      }
      write_edges(block);
      live.push_back(block);
    } else {
      const std::size_t victim = rng() % live.size();
      release(live[victim]);
      live[victim] = live.back();
      live.pop_back();
    }
  }
  for (Block& block : live) release(block);
  for (cudaStream_t stream : streams) {
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaStreamDestroy(stream));
  }
}

// The shim's figures for device 0 (all -1 without the shim).
gpumem_stats shim_stats() {
  using GetStats = int (*)(int, gpumem_stats*);
  auto get_stats = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "gpumem_get_stats"));
  gpumem_stats stats{};
  if (get_stats == nullptr || get_stats(0, &stats) != 0) std::memset(&stats, 0xff, sizeof stats);
  return stats;
}

int run(int threads, long long operations, double seconds) {
  CHECK_CUDA(cudaFree(nullptr));  // the context, before the threads race for it
  std::atomic<long long> budget{operations};
  const auto start = std::chrono::steady_clock::now();
  const bool timed = seconds > 0;
  const auto deadline = timed ? start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            std::chrono::duration<double>(seconds))
                              : std::chrono::steady_clock::time_point::max();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, 1000u + static_cast<unsigned>(t), std::ref(budget), deadline);
  if (timed) {
    std::this_thread::sleep_until(start + (deadline - start) / 4);
    std::printf("peak_reserved_early=%lld\n", static_cast<long long>(shim_stats().peak_bytes_reserved));
  }
  for (std::thread& thread : pool) thread.join();
  CHECK_CUDA(cudaDeviceSynchronize());
  const gpumem_stats stats = shim_stats();
  std::printf("peak_reserved_end=%lld\npeak_in_use_end=%lld\noperations=%lld\ncorrupt=%lld\n",
              static_cast<long long>(stats.peak_bytes_reserved), static_cast<long long>(stats.peak_bytes_in_use),
              g_operations.load(), g_corrupt.load());
  return g_corrupt.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "ops" && argc > 3) return run(std::atoi(argv[2]), std::atoll(argv[3]), 0);
  if (scenario == "soak" && argc > 3) return run(std::atoi(argv[2]), 1LL << 62, std::atof(argv[3]));
  std::fprintf(stderr, "usage: stress ops THREADS OPERATIONS | soak THREADS SECONDS\n");
  return 2;
}
