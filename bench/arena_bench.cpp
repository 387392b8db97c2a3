// Throughput of the BFC arena on the two workloads of workloads.h (random_allocations, steady_state),
// each also run on a caching baseline in the same process so results read as ratios.
// side_by_side_bench compares the arena with cub's CachingDeviceAllocator.
// Regions come from FakeRegionSource: addresses only, no memory is touched.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "bfc_arena.h"
#include "region_sources.h"
#include "workloads.h"

namespace {

using gpumem::bench::RandomOp;
using gpumem::bench::RandomWorkload;
using gpumem::bench::SteadyStep;
using gpumem::bench::SteadyWorkload;
using gpumem::bench::make_random_workload;
using gpumem::bench::make_steady_workload;

// The arena as the benchmarks drive it: preallocated over fake addresses, far above any live total.
class ArenaUnderTest {
 public:
  ArenaUnderTest() : arena_(source_, options()) {}
  bool allocate(std::size_t bytes, std::uintptr_t& out) { return arena_.allocate(bytes, out) == gpumem::Status::ok; }
  void deallocate(std::uintptr_t ptr) { arena_.deallocate(ptr); }
  // Host records kept: one per chunk (in use, free or fenced).
  std::size_t records() const { return arena_.stats().chunks; }

 private:
  static gpumem::ArenaOptions options() {
    gpumem::ArenaOptions options;
    options.limit = std::size_t{1} << 42;
    options.preallocate = true;
    return options;
  }
  gpumem::FakeRegionSource source_;
  gpumem::BfcArena arena_;
};

// Baseline: a caching allocator in the style of cub's (power-of-two bins, freed blocks cached per bin
// and reused whole, never split nor coalesced; a hash map from pointer to bin).
class PowerOfTwoCache {
 public:
  bool allocate(std::size_t bytes, std::uintptr_t& out) {
    const int bin = std::bit_width(std::max<std::size_t>(bytes, 256) - 1);
    auto& cached = cache_[static_cast<std::size_t>(bin)];
    if (!cached.empty()) {
      out = cached.back();
      cached.pop_back();
    } else {
      out = next_;
      next_ += std::size_t{1} << bin;
    }
    live_.emplace(out, bin);
    return true;
  }
  void deallocate(std::uintptr_t ptr) {
    const auto found = live_.find(ptr);
    cache_[static_cast<std::size_t>(found->second)].push_back(ptr);
    live_.erase(found);
  }
  // Host records kept: one per live block plus one per cached block.
  std::size_t records() const {
    std::size_t cached = 0;
    for (const auto& bin : cache_) cached += bin.size();
    return live_.size() + cached;
  }

 private:
  std::vector<std::uintptr_t> cache_[64];
  std::unordered_map<std::uintptr_t, int> live_;
  std::uintptr_t next_ = std::uintptr_t{1} << 60;
};

// A failed allocation means the workload did not run as designed: the figure would be meaningless.
void report_failures(benchmark::State& state, std::size_t failures) {
  state.counters["failures"] = static_cast<double>(failures);
  if (failures != 0) state.SkipWithError("allocations failed: the workload did not fit");
}

template <typename Allocator>
void random_allocations(benchmark::State& state) {
  const RandomWorkload workload = make_random_workload(static_cast<std::size_t>(state.range(0)));
  std::vector<std::uintptr_t> slots(workload.slots, 0);
  Allocator allocator;
  std::size_t failures = 0;
  const auto run = [&] {
    for (const RandomOp& op : workload.ops) {
      std::uintptr_t& slot = slots[op.slot];
      if (op.size != 0) {
        if (!allocator.allocate(op.size, slot)) ++failures;
      } else if (slot != 0) {
        allocator.deallocate(slot);
        slot = 0;
      }
    }
  };
  const auto free_remaining = [&] {
    for (std::uintptr_t& slot : slots) {
      if (slot != 0) allocator.deallocate(slot);
      slot = 0;
    }
  };
  run();  // warm up: regions reserved, record pools grown
  free_remaining();
  for (auto _ : state) {
    run();
    state.PauseTiming();
    free_remaining();
    state.ResumeTiming();
  }
  state.counters["time/op"] = benchmark::Counter(static_cast<double>(workload.ops.size()),
                                                 benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
  report_failures(state, failures);
}

template <typename Allocator>
void steady_state(benchmark::State& state) {
  const SteadyWorkload workload = make_steady_workload(static_cast<std::size_t>(state.range(0)));
  std::vector<std::uintptr_t> slots(workload.initial_sizes.size(), 0);
  Allocator allocator;
  std::size_t failures = 0;
  for (std::size_t index = 0; index < slots.size(); ++index) {
    if (!allocator.allocate(workload.initial_sizes[index], slots[index])) ++failures;
  }
  // One untimed pass over the steps: the arena reaches its steady chunk population.
  for (const SteadyStep& step : workload.steps) {
    allocator.deallocate(slots[step.slot]);
    if (!allocator.allocate(step.size, slots[step.slot])) ++failures;
  }
  std::size_t next = 0;
  for (auto _ : state) {
    const SteadyStep& step = workload.steps[next];
    next = next + 1 == workload.steps.size() ? 0 : next + 1;
    allocator.deallocate(slots[step.slot]);
    if (!allocator.allocate(step.size, slots[step.slot])) ++failures;
  }
  state.counters["records"] = static_cast<double>(allocator.records());
  report_failures(state, failures);
}

void random_sizes(benchmark::internal::Benchmark* benchmark) {
  benchmark->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);
}
void live_counts(benchmark::internal::Benchmark* benchmark) {
  benchmark->Arg(1'000)->Arg(10'000)->Arg(100'000);
}

}  // namespace

BENCHMARK_TEMPLATE(random_allocations, ArenaUnderTest)->Apply(random_sizes);
BENCHMARK_TEMPLATE(random_allocations, PowerOfTwoCache)->Apply(random_sizes);
BENCHMARK_TEMPLATE(steady_state, ArenaUnderTest)->Apply(live_counts);
BENCHMARK_TEMPLATE(steady_state, PowerOfTwoCache)->Apply(live_counts);

BENCHMARK_MAIN();
