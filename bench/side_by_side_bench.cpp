// gpumem's BFC arena and cub's CachingDeviceAllocator (cub/util_allocator.cuh, CUDA Toolkit) on the
// same request sequences: the synthetic workloads of workloads.h and allocation traces in RMM's
// replay-log CSV (bench/traces/*.csv.xz, decompressed).
//
// Neither side has a device. The arena takes its regions from FakeRegionSource (classic) or
// FakeResizableRegionSource (vmm); cub calls the
// stand-in runtime of cudart_stub.h. Both hand out addresses nobody touches, so the time measured is
// the allocators' own; what each asks of the driver is counted instead:
//   driver_calls   arena: regions reserved (classic) or pieces mapped (vmm, piece_layout.h); cub:
//                  cudaMalloc calls
//   peak_held      arena: peak bytes of its regions (mapped, vmm); cub: peak bytes cudaMalloc'd and
//                  not freed
//   peak_requested peak of the bytes the live blocks asked for
//   utilisation    peak_requested / peak_held
// These come from one pass over the workload with a fresh allocator (steady_state: the initial blocks
// and one pass over its steps), which also warms it up. Then Google Benchmark times repeated passes
// (each iteration is one pass; `ops_per_pass` allocations and frees), and what is still live after a
// pass is freed outside the timed region (steady_state keeps its blocks from pass to pass).
//
// Allocators:
//   arena        BfcArena in growth mode as gpumem's shim and gpumem-replay configure it by default
//                (regions of at least 8 MiB, split rule tight, garbage collection on, classic
//                regions); limit 8 GiB for traces (as bench/traces/README.md), 4 TiB for the
//                synthetic workloads (which hold up to 4 GiB, and ~0.5 TB at 100k steady blocks).
//   arena_vmm    the same over a vmm source (GPUMEM_REGION_SOURCE=vmm): one address range of twice
//                the limit, memory mapped in 2 MiB granules, idle granules unmapped before growing.
//   cub_default  CachingDeviceAllocator(): bins 8^3..8^7 (512 B..2 MiB), at most 6 MiB - 1 B cached
//                per device; larger requests are cudaMalloc'd exactly and cudaFree'd when freed.
//   cub_pow2     CachingDeviceAllocator(2, 8, no max bin, no cache limit): power-of-two bins from
//                256 B, every freed block cached (cub's most memory-hungry, fewest-calls setting).
// Every request is made on stream 0.
//
// Options (besides Google Benchmark's --benchmark_*):
//   --random-ops=N     operations of random_allocations (default 100000)
//   --steady-live=N    live blocks of steady_state (default 100000)
//   --steady-steps=N   steps per steady_state pass (default 262144)
//   --trace=NAME=PATH  also replay the CSV trace at PATH as trace_NAME (repeatable)
#include <benchmark/benchmark.h>
#include <cub/util_allocator.cuh>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "bfc_arena.h"
#include "cudart_stub.h"
#include "piece_layout.h"
#include "policy/policy.h"
#include "region_sources.h"
#include "replay.h"
#include "trace_reader.h"
#include "workloads.h"

namespace {

constexpr std::string_view kProgram = "side_by_side_bench";

// One request: allocate `size` bytes into `slot`, or (size 0) free the block in `slot`. A free always
// names a slot allocated earlier in the same pass (or, for steady_state, in the fill or an earlier pass).
struct Op {
  std::uint32_t slot;
  std::size_t size;
};

struct Workload {
  std::string name;
  std::vector<Op> fill;  // once, untimed, before the first pass
  std::vector<Op> pass;  // timed, repeated
  std::size_t slots = 0;
  bool drain_after_pass = true;  // free whatever is live after each pass, untimed
  std::size_t arena_limit = 0;
};

Workload random_workload(std::size_t operations) {
  const gpumem::bench::RandomWorkload random = gpumem::bench::make_random_workload(operations);
  Workload workload;
  workload.name = "random_allocations_" + std::to_string(operations);
  workload.slots = random.slots;
  for (const auto& op : random.ops) workload.pass.push_back({op.slot, op.size});
  workload.arena_limit = std::size_t{1} << 42;
  return workload;
}

Workload steady_workload(std::size_t live_blocks, std::size_t steps) {
  const gpumem::bench::SteadyWorkload steady = gpumem::bench::make_steady_workload(live_blocks, steps);
  Workload workload;
  workload.name = "steady_state_" + std::to_string(live_blocks);
  workload.slots = live_blocks;
  for (std::size_t slot = 0; slot < live_blocks; ++slot) {
    workload.fill.push_back({static_cast<std::uint32_t>(slot), steady.initial_sizes[slot]});
  }
  for (const auto& step : steady.steps) {
    workload.pass.push_back({step.slot, 0});
    workload.pass.push_back({step.slot, step.size});
  }
  workload.drain_after_pass = false;
  workload.arena_limit = std::size_t{1} << 42;
  return workload;
}

// The rows of the trace's first device, with gpumem-replay's rules (tools/replay.h): "allocate
// failure" rows and allocations of 0 bytes are not replayed, a free of a pointer that is not live is
// skipped, an allocation of a pointer still live frees the earlier block first.
Workload trace_workload(const std::string& name, const gpumem::replay::Trace& trace) {
  Workload workload;
  workload.name = "trace_" + name;
  workload.arena_limit = std::size_t{8} << 30;
  if (trace.records.empty()) return workload;
  const int device = trace.records.front().device;
  std::unordered_map<std::uintptr_t, std::uint32_t> live;  // trace pointer -> slot
  for (const gpumem::replay::TraceRecord& row : trace.records) {
    if (row.device != device) continue;
    if (row.action == gpumem::replay::TraceAction::allocate) {
      if (row.size == 0) continue;
      if (const auto found = live.find(row.pointer); found != live.end()) {
        workload.pass.push_back({found->second, 0});
        live.erase(found);
      }
      const auto slot = static_cast<std::uint32_t>(workload.slots++);
      workload.pass.push_back({slot, row.size});
      live.emplace(row.pointer, slot);
    } else if (row.action == gpumem::replay::TraceAction::free) {
      if (const auto found = live.find(row.pointer); found != live.end()) {
        workload.pass.push_back({found->second, 0});
        live.erase(found);
      }
    }
  }
  return workload;
}

// What an allocator asked of the driver during the counting pass.
struct DriverFigures {
  std::uint64_t calls = 0;     // see the file comment
  std::uint64_t releases = 0;  // arena: regions given back; cub: cudaFree calls
  std::size_t peak_held = 0;
};

template <typename Source>
class ArenaOver {
 public:
  explicit ArenaOver(std::size_t limit) : source_(make_source(limit)), arena_(source_, options(limit)) {}
  bool allocate(std::size_t bytes, std::uintptr_t& out) { return arena_.allocate(bytes, out) == gpumem::Status::ok; }
  void deallocate(std::uintptr_t ptr) { arena_.deallocate(ptr); }
  void start_counting() {}
  DriverFigures stop_counting() const {
    const gpumem::ArenaStats stats = arena_.stats();
    // Every driver call the shim's source would make, as gpumem-replay counts them; what the source
    // held at most (a resizable one keeps unmapped memory for the next mapping).
    if constexpr (std::is_same_v<Source, gpumem::FakeResizableRegionSource>) {
      return {source_.log().calls.total(), stats.region_releases, source_.peak_held_bytes()};
    } else {
      return {source_.log().calls.total(), stats.region_releases, stats.peak_bytes_reserved};
    }
  }

 private:
  static Source make_source(std::size_t limit) {
    if constexpr (std::is_same_v<Source, gpumem::FakeResizableRegionSource>) {
      return gpumem::replay::vmm_source(limit, gpumem::replay::kVmmGranule, gpumem::ArenaOptions{}.min_growth_bytes);
    } else {
      static_cast<void>(limit);
      return Source();
    }
  }
  static gpumem::ArenaOptions options(std::size_t limit) {
    gpumem::ArenaOptions options;  // min_growth_bytes: the default, 8 MiB
    options.limit = limit;
    options.preallocate = false;
    options.garbage_collection = true;
    options.max_internal_fragmentation = gpumem::kTightSplitBytes;
    options.block_alignment = gpumem::kDeviceBlockAlignment;
    return options;
  }
  Source source_;
  gpumem::BfcArena arena_;
};
using Arena = ArenaOver<gpumem::FakeRegionSource>;
using ArenaVmm = ArenaOver<gpumem::FakeResizableRegionSource>;

class CubAllocator {
 public:
  explicit CubAllocator(std::unique_ptr<cub::CachingDeviceAllocator> cub) : cub_(std::move(cub)) {}
  bool allocate(std::size_t bytes, std::uintptr_t& out) {
    void* ptr = nullptr;
    const cudaError_t error = cub_->DeviceAllocate(&ptr, bytes);
    out = reinterpret_cast<std::uintptr_t>(ptr);
    return error == cudaSuccess;
  }
  void deallocate(std::uintptr_t ptr) { cub_->DeviceFree(reinterpret_cast<void*>(ptr)); }
  void start_counting() { gpumem::bench::stub_runtime_reset(/*track_bytes=*/true); }
  DriverFigures stop_counting() const {
    const gpumem::bench::StubRuntimeCounters counters = gpumem::bench::stub_runtime_counters();
    gpumem::bench::stub_runtime_track_bytes(false);
    return {counters.mallocs, counters.frees, counters.peak_held_bytes};
  }

 private:
  std::unique_ptr<cub::CachingDeviceAllocator> cub_;
};

struct CubDefault : CubAllocator {
  explicit CubDefault(std::size_t) : CubAllocator(std::make_unique<cub::CachingDeviceAllocator>()) {}
};

struct CubPowerOfTwo : CubAllocator {
  explicit CubPowerOfTwo(std::size_t)
      : CubAllocator(std::make_unique<cub::CachingDeviceAllocator>(
            2u, 8u, cub::CachingDeviceAllocator::INVALID_BIN, cub::CachingDeviceAllocator::INVALID_SIZE)) {}
};

template <typename Allocator>
void run_workload(benchmark::State& state, const Workload& workload) {
  std::vector<std::uintptr_t> slots(workload.slots, 0);
  std::vector<std::size_t> sizes(workload.slots, 0);
  Allocator allocator(workload.arena_limit);
  std::size_t failures = 0;

  // Counting pass: fill and one pass, keeping the live requested bytes.
  allocator.start_counting();
  std::size_t live_requested = 0;
  std::size_t peak_requested = 0;
  const auto counted = [&](const std::vector<Op>& ops) {
    for (const Op& op : ops) {
      std::uintptr_t& slot = slots[op.slot];
      if (op.size != 0) {
        if (allocator.allocate(op.size, slot)) {
          sizes[op.slot] = op.size;
          live_requested += op.size;
          peak_requested = std::max(peak_requested, live_requested);
        } else {
          slot = 0;
          ++failures;
        }
      } else if (slot != 0) {
        allocator.deallocate(slot);
        live_requested -= sizes[op.slot];
        slot = 0;
      }
    }
  };
  counted(workload.fill);
  counted(workload.pass);
  const DriverFigures figures = allocator.stop_counting();

  const auto drain = [&] {
    for (std::uintptr_t& slot : slots) {
      if (slot != 0) allocator.deallocate(slot);
      slot = 0;
    }
  };
  if (workload.drain_after_pass) drain();
  for (auto _ : state) {
    for (const Op& op : workload.pass) {
      std::uintptr_t& slot = slots[op.slot];
      if (op.size != 0) {
        if (!allocator.allocate(op.size, slot)) {
          slot = 0;
          ++failures;
        }
      } else if (slot != 0) {
        allocator.deallocate(slot);
        slot = 0;
      }
    }
    if (workload.drain_after_pass) {
      state.PauseTiming();
      drain();
      state.ResumeTiming();
    }
  }
  drain();

  state.counters["ops_per_pass"] = static_cast<double>(workload.pass.size());
  state.counters["driver_calls"] = static_cast<double>(figures.calls);
  state.counters["driver_releases"] = static_cast<double>(figures.releases);
  state.counters["peak_requested"] = static_cast<double>(peak_requested);
  state.counters["peak_held"] = static_cast<double>(figures.peak_held);
  state.counters["utilisation"] =
      figures.peak_held == 0 ? 0.0 : static_cast<double>(peak_requested) / static_cast<double>(figures.peak_held);
  state.counters["failures"] = static_cast<double>(failures);
  if (failures != 0) state.SkipWithError("allocations failed: the workload did not run as designed");
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram.data(), message.c_str());
  std::exit(2);
}

std::size_t positive_count(std::string_view option, std::string_view text) {
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value == 0 || value > 0xFFFFFFFFu / 2) {
    usage_error(std::string(option) + ": expected a positive whole number below 2^31, got \"" + std::string(text) +
                "\"");
  }
  return value;
}

Workload load_trace(std::string_view argument) {
  const std::size_t equals = argument.find('=');
  if (equals == std::string_view::npos || equals == 0 || equals + 1 == argument.size()) {
    usage_error("--trace: expected NAME=PATH, got \"" + std::string(argument) + "\"");
  }
  const std::string name(argument.substr(0, equals));
  if (!std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; })) {
    usage_error("--trace: NAME may hold letters, digits and _ only, got \"" + name + "\"");
  }
  const std::string path(argument.substr(equals + 1));
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) usage_error("--trace: \"" + path + "\" is not a readable file");
  std::ifstream file(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.good() && !file.eof()) usage_error("--trace: cannot read \"" + path + "\"");
  const gpumem::replay::TraceParseResult parsed = gpumem::replay::parse_trace(text);
  if (!parsed.trace) {
    std::fprintf(stderr, "%s: --trace: %s: %s\n", kProgram.data(), path.c_str(), parsed.error.c_str());
    std::exit(1);
  }
  Workload workload = trace_workload(name, *parsed.trace);
  if (workload.pass.empty()) usage_error("--trace: \"" + path + "\" holds no allocation to replay");
  return workload;
}

void register_workload(const Workload& workload) {
  const auto add = [&](const char* allocator, void (*function)(benchmark::State&, const Workload&)) {
    benchmark::RegisterBenchmark((workload.name + "/" + allocator).c_str(), function, workload)
        ->Unit(benchmark::kMillisecond);
  };
  add("arena", &run_workload<Arena>);
  add("arena_vmm", &run_workload<ArenaVmm>);
  add("cub_default", &run_workload<CubDefault>);
  add("cub_pow2", &run_workload<CubPowerOfTwo>);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* options out of argv
  std::size_t random_ops = 100'000;
  std::size_t steady_live = 100'000;
  std::size_t steady_steps = gpumem::bench::kSteadySteps;
  std::vector<Workload> traces;
  for (int index = 1; index < argc; ++index) {
    const std::string_view argument = argv[index];
    const auto value_of = [&](std::string_view option) -> std::optional<std::string_view> {
      if (argument.size() > option.size() && argument.substr(0, option.size()) == option &&
          argument[option.size()] == '=') {
        return argument.substr(option.size() + 1);
      }
      return std::nullopt;
    };
    if (const auto value = value_of("--random-ops")) {
      random_ops = positive_count("--random-ops", *value);
    } else if (const auto value = value_of("--steady-live")) {
      steady_live = positive_count("--steady-live", *value);
    } else if (const auto value = value_of("--steady-steps")) {
      steady_steps = positive_count("--steady-steps", *value);
    } else if (const auto value = value_of("--trace")) {
      traces.push_back(load_trace(*value));
    } else {
      usage_error("unknown argument \"" + std::string(argument) +
                  "\" (expected --random-ops=N, --steady-live=N, --steady-steps=N, --trace=NAME=PATH or "
                  "--benchmark_* options)");
    }
  }
  std::set<std::string> names;
  for (const Workload& trace : traces) {
    if (!names.insert(trace.name).second) usage_error("--trace: NAME \"" + trace.name.substr(6) + "\" given twice");
  }
  register_workload(random_workload(random_ops));
  register_workload(steady_workload(steady_live, steady_steps));
  for (const Workload& trace : traces) register_workload(trace);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
