// multithread: several host threads allocate, fill, verify and free device memory at the same time
// on the same device (and so the same context), each with its own deterministic churn. The
// checksum combines the threads' results in thread order, so it does not depend on scheduling.
//
//   multithread [SCALE]   each of 4 threads runs SCALE x 1500 steps (default 1)
#include <thread>
#include <vector>

#include "churn.h"
#include "runtime_memory.h"

namespace {

constexpr int kThreads = 4;

}  // namespace

int main(int argc, char** argv) {
  examples::ChurnConfig config;
  config.steps = 1500 * examples::parse_argument(argc, argv, 1, "SCALE");
  config.slots = 16;
  config.max_size = 128 * 1024;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // the context exists before the threads race to use it

  std::vector<examples::ChurnResult> results(kThreads);
  std::vector<std::thread> threads;
  examples::Stopwatch total;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&results, config, t] {
      CHECK(cudaSetDevice(0));
      examples::ChurnConfig own = config;
      own.seed = 100 + static_cast<std::uint64_t>(t);
      examples::RuntimeMemory memory;
      results[static_cast<std::size_t>(t)] = examples::run_churn(memory, own);
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::printf("multithread: %d threads, each %lu steps over %zu slots, block sizes %s to %s\n", kThreads,
              config.steps, config.slots, examples::format_bytes(config.min_size).c_str(),
              examples::format_bytes(config.max_size).c_str());
  examples::Checksum checksum;
  for (int t = 0; t < kThreads; ++t) {
    const examples::ChurnResult& result = results[static_cast<std::size_t>(t)];
    std::printf("  thread %d: %lu allocations, %lu frees, %s verified, %.3f ms in cudaMalloc/cudaFree\n", t,
                result.allocations, result.frees, examples::format_bytes(result.bytes_verified).c_str(),
                result.allocation_ms);
    checksum.add_value(result.checksum.value());
  }
  std::printf("  total time: %.3f ms\n", total.elapsed_ms());
  checksum.print();
  return 0;
}
