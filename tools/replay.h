// The replay engine of gpumem-replay: runs the rows of one device of an allocation trace through a
// BfcArena over a fake region source (addresses that are never touched) and measures how the arena
// behaves. Two sources, as the shim has: classic (one driver allocation per region) and vmm (one
// reserved address range of twice the limit, memory mapped under it in granules, 2 MiB by default,
// idle granules unmapped). No I/O.
//
// Rules: rows replay in trace order. An "allocate" row allocates its Size from the arena (on its
// Stream); a "free" row frees the block the replay allocated for that Pointer, unfenced (there is no
// device to wait for). A free of a pointer that is not live in the replay is skipped and counted as
// unmatched, unless the replay itself refused that pointer's allocation (then it is skipped
// silently). An "allocate failure" row (a request the traced allocator refused) is counted and not
// replayed. An allocation of 0 bytes is not replayed (the arena serves none; CUDA returns no block).
// An allocation of a pointer that is still live frees the earlier block first (the trace lost a free,
// or rows of several threads were written out of order) and is counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "bfc_arena.h"
#include "driver_latency.h"
#include "platform_calls.h"
#include "region_sources.h"
#include "trace_reader.h"

namespace gpumem::replay {

enum class SourceKind : std::uint8_t { classic, vmm };

// The granule of the replay's vmm source by default: CUDA's recommended granularity on current GPUs.
inline constexpr std::size_t kVmmGranule = std::size_t{2} << 20;
// The vmm source's address range, in limits: as the shim's (unmapped holes cost addresses only).
inline constexpr std::size_t kVmmRangeLimits = 2;

struct ReplayOptions {
  std::size_t limit = 0;  // the arena's limit in bytes (>= 256)
  bool preallocate = true;
  bool garbage_collection = true;  // growth mode only
  SourceKind source = SourceKind::classic;
  std::size_t min_growth_bytes = ArenaOptions{}.min_growth_bytes;
  std::size_t max_internal_fragmentation = ArenaOptions{}.max_internal_fragmentation;  // the split rule
  std::size_t vmm_granule = kVmmGranule;  // vmm: the unit memory is mapped and unmapped in (a power of 2)
  double idle_slack = ArenaOptions{}.idle_slack;  // vmm, growth mode (infinity: idle memory stays mapped)
};

struct ReplayResult {
  std::size_t peak_in_use = 0;      // ArenaStats::peak_bytes_in_use (rounded sizes)
  std::size_t peak_requested = 0;   // peak of the bytes the live blocks asked for
  std::size_t peak_reserved = 0;    // ArenaStats::peak_bytes_reserved
  double utilisation = 0.0;         // peak_requested / peak_reserved (0 when nothing was reserved)
  PlatformCalls calls;              // the driver calls the shim's source would make (platform_calls.h)
  std::uint64_t driver_calls = 0;   // calls.total()
  std::uint64_t region_grows = 0;   // vmm: growth steps (each maps memory at the region's end)
  std::uint64_t region_maps = 0;    // vmm: memory mapped again under unmapped granules (calls)
  std::uint64_t region_unmaps = 0;  // vmm: idle granules unmapped (calls)
  std::uint64_t region_loans = 0;   // vmm: granules backed by idle memory of busy pieces (map calls)
  // Peak bytes of the vmm granules that live chunks overlap: what an arena mapping memory under
  // exactly those granules (unmapping every other one at once) would hold at most.
  std::size_t peak_live_granules = 0;
  std::uint64_t driver_releases = 0;  // regions given back during the replay (garbage collection);
                                      // the arena's teardown is not counted
  std::uint64_t operations = 0;     // arena calls: allocations (refused ones included) and frees
  double ns_per_op = 0.0;           // steady_clock time inside the arena calls / operations
  std::uint64_t allocations = 0;    // allocations the arena served
  std::uint64_t frees = 0;          // frees replayed
  std::uint64_t failed = 0;         // allocations the arena refused in the replay
  std::uint64_t skipped_failures = 0;  // "allocate failure" rows of the trace
  std::uint64_t unmatched_frees = 0;   // frees of pointers not live in the replay
  std::uint64_t zero_size_allocations = 0;  // allocate rows of 0 bytes, not replayed
  std::uint64_t duplicate_allocations = 0;  // allocate rows of a pointer that was still live
  std::optional<std::size_t> first_failed_line;  // trace line of the first refused allocation
};

// The time the driver would spend on `calls` at `latency` per call, in milliseconds.
double modelled_driver_ms(const PlatformCalls& calls, const cudasim::DriverLatency& latency) noexcept;

// The vmm source the replay runs an arena of `limit` over, as the shim's source is set up: a range of
// kVmmRangeLimits times the limit, pieces laid out at first (piece_layout.h), slabs of at least
// `min_growth_bytes` after, lending, the memory held bounded by the limit (as the budget bounds it).
FakeResizableRegionSource vmm_source(std::size_t limit, std::size_t granule, std::size_t min_growth_bytes);

// The rows of `device`, in order.
std::vector<TraceRecord> rows_of_device(std::span<const TraceRecord> records, int device);
// The same in place: `records` keeps the rows of `device` alone (no copy of a large trace).
void keep_rows_of_device(std::vector<TraceRecord>& records, int device);

// Replays `rows` (all of them: filter by device first) into a fresh arena.
ReplayResult replay(std::span<const TraceRecord> rows, const ReplayOptions& options);

// True when every allocation of `rows` is served with these options (stops at the first refusal).
bool replays_without_failure(std::span<const TraceRecord> rows, const ReplayOptions& options);

// The peak of the bytes live at once in the trace itself (every allocate row served, every free of a
// live pointer applied, with the same rules as replay()).
std::size_t trace_peak_requested(std::span<const TraceRecord> rows);

inline constexpr std::size_t kMinLimitStep = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t kMinLimitCap = std::size_t{1} << 40;   // 1 TiB

// The smallest limit, a multiple of 1 MiB, with which `rows` replay without a refused allocation
// (options.limit is ignored; preallocate and garbage_collection are used): a binary search between
// 1 MiB and a limit that works, found by starting at trace_peak_requested() rounded up to 1 MiB and
// doubling, capped at 1 TiB. nullopt when even 1 TiB does not work. The search assumes that a limit
// that works keeps working when raised, which holds for the arena in practice but is not guaranteed
// (a larger limit changes the region sizes in growth mode).
std::optional<std::size_t> find_min_limit(std::span<const TraceRecord> rows, const ReplayOptions& options);

}  // namespace gpumem::replay
