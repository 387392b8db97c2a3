// The replay engine: a trace through the BFC arena over a fake region source.
#include "replay.h"

#include <type_traits>

#include "policy/policy.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "bfc_arena.h"
#include "piece_layout.h"
#include "region_sources.h"

namespace gpumem::replay {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxBytes = std::numeric_limits<std::size_t>::max();

ArenaOptions arena_options(const ReplayOptions& options) {
  ArenaOptions arena;  // every other option as the shim's arena has it
  arena.limit = options.limit;
  arena.preallocate = options.preallocate;
  arena.preallocation_head_bytes = gpumem::preallocation_head_bytes(options.limit);
  arena.garbage_collection = options.garbage_collection;
  arena.min_growth_bytes = options.min_growth_bytes;
  arena.max_internal_fragmentation = options.max_internal_fragmentation;
  arena.idle_slack = options.idle_slack;
  arena.block_alignment = gpumem::kDeviceBlockAlignment;
  return arena;
}

struct LiveBlock {
  std::uintptr_t address = 0;  // in the replay's arena
  std::size_t requested = 0;
};

// Applies the replay rules of replay.h to `rows`; the arena calls are delegated to `Arena`-like
// callbacks so that trace_peak_requested() shares the bookkeeping. `allocate` returns the address,
// or nullopt when refused; `deallocate` frees an address.
class Replayer {
 public:
  template <typename Allocate, typename Deallocate>
  void run(std::span<const TraceRecord> rows, Allocate&& allocate, Deallocate&& deallocate,
           bool stop_at_failure) {
    live_.reserve(std::min<std::size_t>(rows.size(), std::size_t{1} << 20));
    for (const TraceRecord& row : rows) {
      switch (row.action) {
        case TraceAction::allocate_failure:
          ++result.skipped_failures;
          break;
        case TraceAction::allocate: {
          if (row.size == 0) {
            ++result.zero_size_allocations;
            not_replayed_.insert(row.pointer);
            break;
          }
          if (const auto it = live_.find(row.pointer); it != live_.end()) {
            ++result.duplicate_allocations;
            release(it, deallocate);
          }
          not_replayed_.erase(row.pointer);
          const std::optional<std::uintptr_t> address = allocate(row);
          if (!address) {
            ++result.failed;
            if (!result.first_failed_line) result.first_failed_line = row.line;
            not_replayed_.insert(row.pointer);
            if (stop_at_failure) return;
            break;
          }
          ++result.allocations;
          live_.emplace(row.pointer, LiveBlock{*address, row.size});
          // Saturating: only a trace of absurd sizes could overflow (the arena never holds that much).
          live_requested_ = row.size > kMaxBytes - live_requested_ ? kMaxBytes : live_requested_ + row.size;
          result.peak_requested = std::max(result.peak_requested, live_requested_);
          break;
        }
        case TraceAction::free: {
          const auto it = live_.find(row.pointer);
          if (it != live_.end()) {
            release(it, deallocate);
          } else if (not_replayed_.erase(row.pointer) == 0) {
            ++result.unmatched_frees;
          }
          break;
        }
      }
    }
  }

  ReplayResult result;

 private:
  template <typename Deallocate>
  void release(std::unordered_map<std::uintptr_t, LiveBlock>::iterator it, Deallocate& deallocate) {
    deallocate(it->second.address);
    ++result.frees;
    live_requested_ -= std::min(live_requested_, it->second.requested);
    live_.erase(it);
  }

  std::unordered_map<std::uintptr_t, LiveBlock> live_;
  std::unordered_set<std::uintptr_t> not_replayed_;  // pointers whose allocation the replay did not make
  std::size_t live_requested_ = 0;
};

// How many live chunks overlap each kVmmGranule granule, and the peak of the granules overlapped.
class GranuleCount {
 public:
  explicit GranuleCount(std::size_t granule_bytes) : granule_bytes_(granule_bytes) {}
  void add(std::uintptr_t base, std::size_t size) {
    for (std::uintptr_t granule = base / granule_bytes_; granule <= (base + size - 1) / granule_bytes_; ++granule) {
      if (chunks_[granule]++ == 0) ++overlapped_;
    }
    peak_ = std::max(peak_, overlapped_);
  }
  void remove(std::uintptr_t base, std::size_t size) {
    for (std::uintptr_t granule = base / granule_bytes_; granule <= (base + size - 1) / granule_bytes_; ++granule) {
      const auto it = chunks_.find(granule);
      if (--it->second == 0) {
        chunks_.erase(it);
        --overlapped_;
      }
    }
  }
  std::size_t peak_bytes() const { return peak_ * granule_bytes_; }

 private:
  std::size_t granule_bytes_;
  std::unordered_map<std::uintptr_t, std::uint32_t> chunks_;  // granule number -> live chunks on it
  std::size_t overlapped_ = 0;
  std::size_t peak_ = 0;
};

// Replays over `source` (declared by the caller before the arena, which gives its regions back when
// destroyed).
template <typename Source>
ReplayResult run_over(Source& source, std::span<const TraceRecord> rows, const ReplayOptions& options,
                      bool stop_at_failure) {
  BfcArena arena(source, arena_options(options));
  Replayer replayer;
  Clock::duration arena_time{};
  std::uint64_t operations = 0;

  GranuleCount granules(options.vmm_granule);
  const auto allocate = [&](const TraceRecord& row) -> std::optional<std::uintptr_t> {
    std::uintptr_t address = 0;
    const Clock::time_point start = Clock::now();
    const Status status = arena.allocate(row.size, address, row.stream);
    arena_time += Clock::now() - start;
    ++operations;
    if (status != Status::ok) return std::nullopt;
    granules.add(address, arena.find(address)->size);
    return address;
  };
  const auto deallocate = [&](std::uintptr_t address) {
    granules.remove(address, arena.find(address)->size);
    const Clock::time_point start = Clock::now();
    const Status status = arena.deallocate(address);
    arena_time += Clock::now() - start;
    ++operations;
    static_cast<void>(status);  // the replay frees only what it allocated: always ok
  };
  replayer.run(rows, allocate, deallocate, stop_at_failure);

  ReplayResult result = replayer.result;
  const ArenaStats stats = arena.stats();
  result.peak_in_use = stats.peak_bytes_in_use;
  result.peak_live_granules = granules.peak_bytes();
  // What the arena held at most: its regions, or (vmm) the memory its source held, mapped or idle.
  result.peak_reserved = stats.peak_bytes_reserved;
  if constexpr (std::is_base_of_v<ResizableRegionSource, Source>) result.peak_reserved = source.peak_held_bytes();
  result.utilisation = result.peak_reserved == 0
                           ? 0.0
                           : static_cast<double>(result.peak_requested) / static_cast<double>(result.peak_reserved);
  const RegionSourceLog& log = source.log();
  result.calls = log.calls;
  result.driver_calls = log.calls.total();
  result.region_grows = log.grows;
  result.region_maps = stats.region_maps;
  result.region_unmaps = stats.region_unmaps;
  result.region_loans = stats.region_loans;
  result.driver_releases = log.releases;  // before the arena's teardown
  result.operations = operations;
  result.ns_per_op =
      operations == 0
          ? 0.0
          : static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(arena_time).count()) /
                static_cast<double>(operations);
  return result;
}

ReplayResult run_arena(std::span<const TraceRecord> rows, const ReplayOptions& options, bool stop_at_failure) {
  if (options.source == SourceKind::vmm) {
    // Pieces as the shim's VMM source maps them (piece_layout.h), lending idle granules as it does.
    FakeResizableRegionSource source = vmm_source(options.limit, options.vmm_granule, options.min_growth_bytes);
    return run_over(source, rows, options, stop_at_failure);
  }
  FakeRegionSource source;
  return run_over(source, rows, options, stop_at_failure);
}

}  // namespace

double modelled_driver_ms(const PlatformCalls& calls, const cudasim::DriverLatency& latency) noexcept {
  using cudasim::TimedCall;
  const double us = static_cast<double>(calls.allocs) * latency.of(TimedCall::mem_alloc) +
                    static_cast<double>(calls.frees) * latency.of(TimedCall::mem_free) +
                    static_cast<double>(calls.range_reserves) * latency.of(TimedCall::address_reserve) +
                    static_cast<double>(calls.range_frees) * latency.of(TimedCall::address_free) +
                    static_cast<double>(calls.creates) * latency.of(TimedCall::mem_create) +
                    static_cast<double>(calls.maps) * latency.of(TimedCall::mem_map) +
                    static_cast<double>(calls.access_sets) * latency.of(TimedCall::mem_set_access) +
                    static_cast<double>(calls.unmaps) * latency.of(TimedCall::mem_unmap) +
                    static_cast<double>(calls.releases) * latency.of(TimedCall::mem_release) +
                    static_cast<double>(calls.retains) * latency.of(TimedCall::retain_allocation_handle);
  return us / 1000.0;
}

FakeResizableRegionSource vmm_source(std::size_t limit, std::size_t granule, std::size_t min_growth_bytes) {
  return FakeResizableRegionSource(kVmmRangeLimits * limit, granule, RegionSourceLimits{SIZE_MAX, limit},
                                   largest_piece_for(limit, granule), true, min_growth_bytes);
}

std::vector<TraceRecord> rows_of_device(std::span<const TraceRecord> records, int device) {
  std::vector<TraceRecord> rows;
  for (const TraceRecord& record : records) {
    if (record.device == device) rows.push_back(record);
  }
  return rows;
}

void keep_rows_of_device(std::vector<TraceRecord>& records, int device) {
  std::erase_if(records, [device](const TraceRecord& record) { return record.device != device; });
}

ReplayResult replay(std::span<const TraceRecord> rows, const ReplayOptions& options) {
  return run_arena(rows, options, false);
}

bool replays_without_failure(std::span<const TraceRecord> rows, const ReplayOptions& options) {
  return run_arena(rows, options, true).failed == 0;
}

std::size_t trace_peak_requested(std::span<const TraceRecord> rows) {
  Replayer replayer;
  replayer.run(
      rows, [](const TraceRecord& row) -> std::optional<std::uintptr_t> { return row.pointer; },
      [](std::uintptr_t) {}, false);
  return replayer.result.peak_requested;
}

std::optional<std::size_t> find_min_limit(std::span<const TraceRecord> rows, const ReplayOptions& options) {
  ReplayOptions probe = options;
  const auto works = [&](std::size_t steps) {
    probe.limit = steps * kMinLimitStep;
    return replays_without_failure(rows, probe);
  };
  constexpr std::size_t kMaxSteps = kMinLimitCap / kMinLimitStep;
  // An upper bound that works: the trace's own peak rounded up to 1 MiB, doubled until it works.
  std::size_t high = std::max<std::size_t>(1, (trace_peak_requested(rows) + kMinLimitStep - 1) / kMinLimitStep);
  high = std::min(high, kMaxSteps);
  while (!works(high)) {
    if (high == kMaxSteps) return std::nullopt;
    high = std::min(high * 2, kMaxSteps);
  }
  // Invariant: `high` works, `low` does not (0 MiB serves nothing).
  std::size_t low = 0;
  while (high - low > 1) {
    const std::size_t middle = low + (high - low) / 2;
    if (works(middle)) {
      high = middle;
    } else {
      low = middle;
    }
  }
  return high * kMinLimitStep;
}

}  // namespace gpumem::replay
