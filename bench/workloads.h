// The synthetic workloads of the benchmarks (arena_bench, side_by_side_bench), generated before
// timing from fixed seeds, so that no random number is drawn in a timed loop and every allocator
// sees the same requests:
//   random_allocations (RMM's pattern): seed 1, 73% allocate / 27% free a random live block, sizes
//     uniform in [1 B, 4 MiB], an allocation that would pass 4 GiB live becomes a free; N operations.
//   steady_state: L live blocks, sizes log-uniform in [256 B, 64 MiB]; each step frees a random
//     live block and allocates a new one in its place.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace gpumem::bench {

inline constexpr std::size_t kWorkloadMiB = std::size_t{1} << 20;
inline constexpr std::size_t kWorkloadGiB = std::size_t{1} << 30;

// One step of the random_allocations workload: allocate `size` into `slot`, or (size 0) free it.
struct RandomOp {
  std::uint32_t slot;
  std::uint32_t size;
};

struct RandomWorkload {
  std::vector<RandomOp> ops;
  std::size_t slots = 0;  // one per allocation; a slot is never reused
};

inline RandomWorkload make_random_workload(std::size_t operations) {
  constexpr int kAllocatePercent = 73;
  constexpr std::size_t kMaxSize = 4 * kWorkloadMiB;
  constexpr std::size_t kMaxLive = 4 * kWorkloadGiB;
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::size_t> size_distribution(1, kMaxSize);
  std::uniform_int_distribution<int> op_distribution(0, 99);
  RandomWorkload workload;
  std::vector<std::pair<std::uint32_t, std::size_t>> live;  // slot, size
  std::size_t live_bytes = 0;
  for (std::size_t index = 0; index < operations; ++index) {
    const std::size_t size = size_distribution(rng);
    bool allocate = true;
    if (!live.empty()) {
      allocate = op_distribution(rng) < kAllocatePercent && live_bytes + size < kMaxLive;
    }
    if (allocate) {
      const auto slot = static_cast<std::uint32_t>(workload.slots++);
      workload.ops.push_back({slot, static_cast<std::uint32_t>(size)});
      live.emplace_back(slot, size);
      live_bytes += size;
    } else {
      std::uniform_int_distribution<std::size_t> pick(0, live.size() - 1);
      const std::size_t victim = pick(rng);
      workload.ops.push_back({live[victim].first, 0});
      live_bytes -= live[victim].second;
      live[victim] = live.back();
      live.pop_back();
    }
  }
  return workload;
}

// One step of the steady-state workload: free `slot`, then allocate `size` into it.
struct SteadyStep {
  std::uint32_t slot;
  std::uint32_t size;
};

struct SteadyWorkload {
  std::vector<std::uint32_t> initial_sizes;  // one per live slot
  std::vector<SteadyStep> steps;             // replayed cyclically
};

inline constexpr std::size_t kSteadySteps = std::size_t{1} << 18;

inline SteadyWorkload make_steady_workload(std::size_t live_blocks, std::size_t steps = kSteadySteps) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * kWorkloadMiB));
  const auto draw = [&] { return static_cast<std::uint32_t>(std::exp(log_size(rng))); };
  SteadyWorkload workload;
  for (std::size_t index = 0; index < live_blocks; ++index) workload.initial_sizes.push_back(draw());
  std::uniform_int_distribution<std::uint32_t> slot(0, static_cast<std::uint32_t>(live_blocks - 1));
  for (std::size_t index = 0; index < steps; ++index) workload.steps.push_back({slot(rng), draw()});
  return workload;
}

}  // namespace gpumem::bench
