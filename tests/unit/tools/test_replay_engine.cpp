// gpumem-replay's engine: peaks computed by hand on small traces in preallocate and growth mode,
// garbage collection, the rules for unmatched frees, refusal rows and odd rows, and the minimum
// limit search on traces whose answer follows from the arena's rules.
#include <catch2/catch.hpp>

#include <vector>

#include "bfc_arena.h"
#include "replay.h"

using namespace gpumem::replay;
using gpumem::kMiB;

namespace {

// Rows numbered as lines of a file with a header.
class TraceBuilder {
 public:
  TraceBuilder& allocate(std::uintptr_t pointer, std::size_t size, int device = 0) {
    return add(TraceAction::allocate, pointer, size, device);
  }
  TraceBuilder& free(std::uintptr_t pointer, int device = 0) { return add(TraceAction::free, pointer, 0, device); }
  TraceBuilder& refused(std::size_t size, int device = 0) {
    return add(TraceAction::allocate_failure, 0, size, device);
  }
  const std::vector<TraceRecord>& rows() const { return rows_; }

 private:
  TraceBuilder& add(TraceAction action, std::uintptr_t pointer, std::size_t size, int device) {
    TraceRecord row;
    row.line = rows_.size() + 2;
    row.thread = 1;
    row.time = static_cast<double>(rows_.size());
    row.action = action;
    row.pointer = pointer;
    row.size = size;
    row.device = device;
    rows_.push_back(row);
    return *this;
  }
  std::vector<TraceRecord> rows_;
};

// Classic regions, XLA's split rule, and growth regions of at least 2 MiB: small traces see several.
ReplayOptions classic(std::size_t limit, bool preallocate, bool garbage_collection) {
  ReplayOptions options;
  options.limit = limit;
  options.preallocate = preallocate;
  options.garbage_collection = garbage_collection;
  options.source = SourceKind::classic;
  options.min_growth_bytes = 2 * kMiB;
  options.max_internal_fragmentation = std::size_t{128} << 20;
  return options;
}
ReplayOptions preallocate(std::size_t limit) { return classic(limit, true, true); }
ReplayOptions growth(std::size_t limit, bool garbage_collection = true) {
  return classic(limit, false, garbage_collection);
}

}  // namespace

TEST_CASE("preallocate: peaks of a small trace", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0xa000, 1000)   // 1024 in use
      .allocate(0xb000, 3000)    // 1024 + 3072 = 4096 in use, 4000 requested: the peaks
      .free(0xa000)              // 3072
      .allocate(0xc000, 500)     // 3584: best fit is A's old 1024-byte chunk, split
      .free(0xb000)
      .free(0xc000);
  const ReplayResult result = replay(trace.rows(), preallocate(8 * kMiB));
  CHECK(result.peak_in_use == 4096);
  CHECK(result.peak_requested == 4000);
  CHECK(result.peak_reserved == 8 * kMiB);  // the whole limit, at the first allocation
  CHECK(result.utilisation == Approx(4000.0 / (8.0 * kMiB)));
  CHECK(result.driver_calls == 1);
  CHECK(result.driver_releases == 0);
  CHECK(result.operations == 6);
  CHECK(result.allocations == 3);
  CHECK(result.frees == 3);
  CHECK(result.failed == 0);
  CHECK_FALSE(result.first_failed_line);
  CHECK(result.skipped_failures == 0);
  CHECK(result.unmatched_frees == 0);
  CHECK(result.ns_per_op > 0.0);
}

TEST_CASE("growth: a region of the request's size (at least the floor) as the trace needs them", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0xa000, 1000)      // first region: 2 MiB (the floor)
      .allocate(0xb000, 3 * kMiB)   // does not fit the 2 MiB region's rest: a 3 MiB region
      .free(0xa000)
      .free(0xb000)
      .allocate(0xc000, kMiB);      // fits what is free: no driver call
  const ReplayResult result = replay(trace.rows(), growth(8 * kMiB));
  CHECK(result.peak_in_use == 3 * kMiB + 1024);
  CHECK(result.peak_requested == 3 * kMiB + 1000);
  CHECK(result.peak_reserved == 5 * kMiB);
  CHECK(result.utilisation == Approx((3.0 * kMiB + 1000.0) / (5.0 * kMiB)));
  CHECK(result.driver_calls == 2);
  CHECK(result.driver_releases == 0);
  CHECK(result.operations == 5);
  CHECK(result.failed == 0);

  // The same trace preallocated reserves the whole limit once, and B splits its 8 MiB - 1 KiB chunk.
  const ReplayResult preallocated = replay(trace.rows(), preallocate(8 * kMiB));
  CHECK(preallocated.peak_in_use == 3 * kMiB + 1024);
  CHECK(preallocated.peak_reserved == 8 * kMiB);
  CHECK(preallocated.driver_calls == 1);
}

TEST_CASE("growth: garbage collection gives a free region back to make room", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0xa000, kMiB)      // region 1: 2 MiB (the floor)
      .free(0xa000)                 // region 1 wholly free
      .allocate(0xb000, 5 * kMiB);  // 4 MiB left under the 6 MiB limit: too little without region 1
  const ReplayResult collected = replay(trace.rows(), growth(6 * kMiB, true));
  CHECK(collected.failed == 0);
  CHECK(collected.driver_calls == 3);  // two cuMemAlloc, the cuMemFree of region 1
  CHECK((collected.calls.allocs == 2 && collected.calls.frees == 1));
  CHECK(collected.driver_releases == 1);
  CHECK(collected.peak_reserved == 5 * kMiB);  // the second region is the request's size
  CHECK(collected.peak_in_use == 5 * kMiB);

  const ReplayResult kept = replay(trace.rows(), growth(6 * kMiB, false));
  CHECK(kept.failed == 1);
  CHECK(kept.first_failed_line == std::size_t{4});
  CHECK(kept.driver_calls == 1);
  CHECK(kept.driver_releases == 0);
  CHECK(kept.operations == 3);  // a refused allocation is still an arena call
  CHECK(kept.peak_reserved == 2 * kMiB);
}

TEST_CASE("frees of pointers not live in the replay are skipped and counted", "[replay]") {
  TraceBuilder trace;
  trace.free(0x1000)                // never allocated
      .allocate(0x2000, 256)
      .free(0x2000)
      .free(0x2000);                // freed twice
  const ReplayResult result = replay(trace.rows(), preallocate(kMiB));
  CHECK(result.unmatched_frees == 2);
  CHECK(result.operations == 2);
  CHECK(result.frees == 1);
  CHECK(result.peak_in_use == 512);  // the block, rounded to the shim's 512-byte alignment
}

TEST_CASE("refusal rows are counted and not replayed", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0x1000, 512).refused(64 * kMiB).refused(1).free(0x1000);
  const ReplayResult result = replay(trace.rows(), preallocate(kMiB));
  CHECK(result.skipped_failures == 2);
  CHECK(result.operations == 2);
  CHECK(result.failed == 0);
  CHECK(result.peak_requested == 512);
}

TEST_CASE("an allocation the replay refuses is counted, and its free skipped silently", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0x1000, 512 * 1024)
      .allocate(0x2000, 768 * 1024)  // 512 KiB + 768 KiB > 1 MiB
      .free(0x2000)
      .free(0x1000);
  const ReplayResult result = replay(trace.rows(), preallocate(kMiB));
  CHECK(result.failed == 1);
  CHECK(result.first_failed_line == std::size_t{3});
  CHECK(result.unmatched_frees == 0);
  CHECK(result.operations == 3);  // two allocations (one refused), one free
  CHECK(result.peak_requested == 512 * 1024);
  CHECK(replays_without_failure(trace.rows(), preallocate(2 * kMiB)));
  CHECK_FALSE(replays_without_failure(trace.rows(), preallocate(kMiB)));
}

TEST_CASE("zero-byte and duplicate allocations", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0x1000, 0)      // not replayed; its free is not unmatched
      .free(0x1000)
      .allocate(0x2000, 1024)
      .allocate(0x2000, 2048)    // still live: the earlier block is freed first
      .free(0x2000);
  const ReplayResult result = replay(trace.rows(), preallocate(kMiB));
  CHECK(result.zero_size_allocations == 1);
  CHECK(result.duplicate_allocations == 1);
  CHECK(result.unmatched_frees == 0);
  CHECK(result.operations == 4);  // two allocations and two frees
  CHECK(result.peak_requested == 2048);
  CHECK(result.peak_in_use == 2048);
}

TEST_CASE("rows_of_device keeps one device's rows in order", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0x1, 256, 0).allocate(0x2, 512, 1).free(0x1, 0).free(0x2, 1);
  const std::vector<TraceRecord> device1 = rows_of_device(trace.rows(), 1);
  REQUIRE(device1.size() == 2);
  CHECK(device1[0].pointer == 0x2);
  CHECK(device1[1].action == TraceAction::free);
  CHECK(rows_of_device(trace.rows(), 7).empty());
  CHECK(replay(device1, preallocate(kMiB)).peak_requested == 512);
}

TEST_CASE("the trace's own peak", "[replay]") {
  TraceBuilder trace;
  trace.allocate(0x1, 100).allocate(0x2, 200).free(0x1).allocate(0x3, 300).free(0x9).refused(5000);
  CHECK(trace_peak_requested(trace.rows()) == 500);
  CHECK(trace_peak_requested({}) == 0);
}

TEST_CASE("min limit: exact fit, and fragmentation that needs one more MiB", "[replay][min_limit]") {
  SECTION("two 1.5 MiB blocks fit exactly in 3 MiB") {
    TraceBuilder trace;
    trace.allocate(0x1, 3 * kMiB / 2).allocate(0x2, 3 * kMiB / 2).free(0x1).free(0x2);
    CHECK(find_min_limit(trace.rows(), preallocate(0)) == 3 * kMiB);
    // Growth at 3 MiB: the first region is 2 MiB (A and 0.5 MiB free), and the 1 MiB the limit
    // leaves cannot hold B; at 4 MiB the second region is 2 MiB.
    CHECK_FALSE(replays_without_failure(trace.rows(), growth(3 * kMiB)));
    CHECK(find_min_limit(trace.rows(), growth(0)) == 4 * kMiB);
  }
  SECTION("a 2 MiB block after freeing two 1 MiB blocks that are not adjacent") {
    // A [0,1) B [1,2) C [2,3) MiB. Freeing A and C leaves two separate 1 MiB holes at a 3 MiB
    // limit; at 4 MiB, C's hole merges with the unused [3,4) and D fits. The search starts at the
    // peak requested (3 MiB), which fails, doubles to 6 MiB and bisects down to 4 MiB.
    TraceBuilder trace;
    trace.allocate(0xa, kMiB).allocate(0xb, kMiB).allocate(0xc, kMiB).free(0xa).free(0xc).allocate(0xd, 2 * kMiB);
    CHECK(find_min_limit(trace.rows(), preallocate(0)) == 4 * kMiB);
    CHECK_FALSE(replays_without_failure(trace.rows(), preallocate(3 * kMiB)));
    // Growth: a 2 MiB region holds A and B; at 4 MiB, C's region (the 2 MiB left) is wholly free
    // again when D comes; at 3 MiB it is only 1 MiB.
    CHECK(find_min_limit(trace.rows(), growth(0)) == 4 * kMiB);
  }
  SECTION("a tiny trace needs the smallest step") {
    TraceBuilder trace;
    trace.allocate(0x1, 1).free(0x1);
    CHECK(find_min_limit(trace.rows(), preallocate(0)) == kMiB);
    CHECK(find_min_limit({}, preallocate(0)) == kMiB);
  }
  SECTION("no limit up to 1 TiB works") {
    TraceBuilder trace;
    trace.allocate(0x1, kMinLimitCap + 1);
    CHECK_FALSE(find_min_limit(trace.rows(), growth(0)));
  }
  SECTION("the split rule decides: a block is split off a chunk at least twice its size") {
    // A (5 MiB + 256 rounded) takes the whole preallocated region unless the region is at least
    // 10 MiB + 512 bytes, so B fits only from 11 MiB, far above the 6 MiB peak requested.
    TraceBuilder trace;
    trace.allocate(0x1, 5 * kMiB + 1).allocate(0x2, 256).free(0x1);
    const auto limit = find_min_limit(trace.rows(), preallocate(0));
    REQUIRE(limit);
    CHECK(*limit == 11 * kMiB);
    CHECK(replays_without_failure(trace.rows(), preallocate(*limit)));
    CHECK_FALSE(replays_without_failure(trace.rows(), preallocate(*limit - kMiB)));
  }
}

TEST_CASE("vmm source: one region grown by the shortfall, chunks coalescing across growth steps", "[replay][vmm]") {
  TraceBuilder trace;
  trace.allocate(0xa000, kMiB)      // reserves 2 MiB (one granule)
      .allocate(0xb000, 3 * kMiB)   // 1 MiB free at the end: 2 MiB more mapped, B starts at 1 MiB
      .free(0xa000)
      .free(0xb000)                 // all 4 MiB free in one chunk
      .allocate(0xc000, 4 * kMiB);  // fits without growing
  ReplayOptions options = growth(64 * kMiB);
  options.source = SourceKind::vmm;
  const ReplayResult result = replay(trace.rows(), options);
  CHECK(result.failed == 0);
  CHECK(result.peak_reserved == 4 * kMiB);
  CHECK(result.region_grows == 1);
  // The range reserved once; each step's memory created, mapped and opened to the device.
  CHECK(result.driver_calls == 7);
  CHECK((result.calls.range_reserves == 1 && result.calls.creates == 2 && result.calls.maps == 2 &&
         result.calls.access_sets == 2));
  CHECK(result.utilisation == Approx(1.0));
  // Classic regions do not coalesce: C needs a third region.
  const ReplayResult classic_result = replay(trace.rows(), growth(64 * kMiB));
  CHECK(classic_result.peak_reserved == 9 * kMiB);
  CHECK(classic_result.driver_calls == 3);
  CHECK(classic_result.region_grows == 0);
}

TEST_CASE("vmm source: the minimum limit of a preallocated range is the live peak in whole granules",
          "[replay][vmm][min_limit]") {
  TraceBuilder trace;
  trace.allocate(0xa, kMiB).allocate(0xb, kMiB).allocate(0xc, kMiB).free(0xa).free(0xc).allocate(0xd, 2 * kMiB);
  ReplayOptions options = preallocate(0);
  options.source = SourceKind::vmm;
  options.max_internal_fragmentation = gpumem::kTightSplitBytes;
  // A, B, C: 3 MiB; the 4 MiB range leaves C's hole merged with [3,4) for D.
  CHECK(find_min_limit(trace.rows(), options) == 4 * kMiB);
}

TEST_CASE("live granules: the granules live blocks overlap, holes left out", "[replay][vmm]") {
  TraceBuilder trace;
  trace.allocate(0xa, 2 * kMiB)      // granule 0
      .allocate(0xb, 6 * kMiB)       // granules 1-3
      .allocate(0xc, 2 * kMiB)       // granule 4
      .free(0xb)                     // a 6 MiB hole
      .allocate(0xd, 8 * kMiB);      // does not fit the hole: granules 5-8
  ReplayOptions options = growth(64 * kMiB);
  options.source = SourceKind::vmm;
  options.max_internal_fragmentation = gpumem::kTightSplitBytes;
  options.idle_slack = 0.0;
  const ReplayResult result = replay(trace.rows(), options);
  CHECK(result.peak_live_granules == 12 * kMiB);  // A, C, D: the hole's granules are not counted
  // The arena holds at most its live peak and one growth step (2 MiB here): D's growth would take it
  // past that, so the hole is unmapped (one call) and its memory serves D, which needs 2 MiB more.
  CHECK(result.peak_reserved == 12 * kMiB);
  CHECK(result.region_unmaps == 1);
  CHECK(result.calls.creates == 4);  // the first region, B's and C's slabs, one for the rest of D
  options.idle_slack = std::numeric_limits<double>::infinity();
  CHECK(replay(trace.rows(), options).peak_reserved == 18 * kMiB);
  options.idle_slack = ReplayOptions{}.idle_slack;
  // A block straddling a granule boundary counts both granules.
  TraceBuilder straddling;
  straddling.allocate(0xa, kMiB).allocate(0xb, 2 * kMiB);  // [0, 1) and [1, 3) MiB: granules 0 and 1
  CHECK(replay(straddling.rows(), options).peak_live_granules == 4 * kMiB);
}
