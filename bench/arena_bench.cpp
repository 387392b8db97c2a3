// Throughput of the BFC arena on the two workloads of workloads.h (random_allocations, steady_state),
// each also run on a caching baseline in the same process so results read as ratios.
// side_by_side_bench compares the arena with cub's CachingDeviceAllocator.
// Regions come from FakeRegionSource: addresses only, no memory is touched. dependent_loads gives the
// host's cost of a cache miss in the same run, the unit in which steady_state grows with live blocks.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
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

// The host's price of one memory access that misses the cache, in the same run: a chain of
// dependent loads, each from a random cache line of a buffer of state.range(0) KiB. steady_state's
// step at 100k live blocks is its 1k step plus a few such loads (the freed block's record, and the
// benchmark's own slot), so this is what tells a slower hot path from a slower machine.
void dependent_loads(benchmark::State& state) {
  constexpr std::size_t kLine = 64 / sizeof(std::size_t);
  const std::size_t lines = static_cast<std::size_t>(state.range(0)) * 1024 / 64;
  std::vector<std::size_t> order(lines);
  for (std::size_t line = 0; line < lines; ++line) order[line] = line;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  // One cycle through every line in random order: each load's address is the previous load's value.
  std::vector<std::size_t> next(lines * kLine, 0);
  for (std::size_t k = 0; k < lines; ++k) next[order[k] * kLine] = order[(k + 1) % lines] * kLine;
  std::size_t at = 0;
  for (std::size_t k = 0; k < lines; ++k) at = next[at];  // warm up: in cache where it fits
  for (auto _ : state) {
    at = next[at];
    benchmark::DoNotOptimize(at);
  }
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
// The same at a fixed number of pairs, k x kCountedPairs, for bench/cache_misses.sh: the difference
// between the two is kCountedPairs pairs with the setup cancelled out, so a cache simulator's counts
// of instructions and misses come out per pair.
constexpr benchmark::IterationCount kCountedPairs = 1 << 18;
BENCHMARK_TEMPLATE(steady_state, ArenaUnderTest)->Name("steady_state_counted_1x<ArenaUnderTest>")
    ->Apply(live_counts)->Iterations(kCountedPairs);
BENCHMARK_TEMPLATE(steady_state, ArenaUnderTest)->Name("steady_state_counted_2x<ArenaUnderTest>")
    ->Apply(live_counts)->Iterations(2 * kCountedPairs);
// 256 KiB: the core's own cache; 64 MiB: beyond any; 4 MiB: the size of the records at 100k chunks.
BENCHMARK(dependent_loads)->Arg(256)->Arg(4 * 1024)->Arg(64 * 1024);

BENCHMARK_MAIN();
