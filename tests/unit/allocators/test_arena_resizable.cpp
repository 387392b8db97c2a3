// The arena over a resizable source (one region that grows at its end, whose idle granules can be
// unmapped and mapped again): growth by the shortfall, coalescing across growth steps, giving idle
// memory back anywhere in the region, the limit bounding what is mapped, preallocation in one piece.
#include <cstring>
#include <random>

#include "arena_test_support.h"
#include "piece_layout.h"

using namespace gpumem;
using namespace gpumem::test;

namespace {

constexpr std::size_t kGranuleBytes = 2 * kMiB;  // CUDA's usual recommended granularity
constexpr std::size_t kGiB = std::size_t{1} << 30;

ArenaOptions growing_by(std::size_t limit, std::size_t min_growth) {
  ArenaOptions options = growing(limit);
  options.min_growth_bytes = min_growth;
  return options;
}

// Blocks of 2, 4 and 2 MiB; the 4 MiB one freed leaves a mapped hole; then 6 MiB, which fits
// nowhere, so the region grows. Returns the first block.
std::uintptr_t hole_then_growth(BfcArena& arena) {
  const std::uintptr_t first = must_allocate(arena, 2 * kMiB);
  const std::uintptr_t hole = must_allocate(arena, 4 * kMiB);
  must_allocate(arena, 2 * kMiB);
  must_free(arena, hole);
  must_allocate(arena, 6 * kMiB);
  return first;
}

// Frees one of the `live` blocks at random, fenced (the next fence) one time in `fenced_one_in`.
void free_at_random(BfcArena& arena, std::vector<std::uintptr_t>& live, std::mt19937_64& rng, FenceId& fence,
                    unsigned fenced_one_in) {
  const std::size_t index = rng() % live.size();
  must_free(arena, live[index], rng() % fenced_one_in == 0 ? Fence{++fence, 0} : Fence{});
  live[index] = live.back();
  live.pop_back();
}


// 4000 random steps at `limit`: allocations of up to 6 MiB (55%), frees (42%, one in 8 fenced) and
// releases (3%), with the limit, the source's own count and (every 16 steps) every invariant
// checked. Returns the allocations served.
std::uint64_t random_use_at_the_limit(BfcArena& arena, const FakeResizableRegionSource& source, std::size_t limit,
                                      std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uintptr_t> live;
  FenceId fence = 0;
  std::uint64_t served = 0;
  for (int step = 0; step < 4000; ++step) {
    const auto roll = rng() % 100;
    if (roll < 55 || live.empty()) {
      std::uintptr_t ptr = 0;
      const Status status = arena.allocate(256 * (1 + rng() % (6 * kMiB / 256)), ptr);
      if (status == Status::ok) {
        live.push_back(ptr);
        ++served;
      }
      if (status == Status::fences_pending) arena.resolve_fences_through(fence);
    } else if (roll < 97) {
      free_at_random(arena, live, rng, fence, 8);
    } else {
      arena.release_free_regions();
    }
    const ArenaStats stats = arena.stats();
    REQUIRE(stats.bytes_reserved <= limit);
    REQUIRE(stats.bytes_reserved + stats.bytes_pooled == source.log().live_bytes);
    if (step % 16 == 0) REQUIRE(arena.validate());
  }
  return served;
}
}  // namespace

TEST_CASE("resizable: growth maps only the shortfall, into the free end", "[resizable][growth]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(64 * kMiB, kGranuleBytes));
  const std::uintptr_t a = must_allocate(arena, kMiB);  // reserves 2 MiB
  CHECK(a == FakeRegionSource::kBase);
  // 1 MiB free at the end; 3 MiB wanted: 2 MiB more mapped, and the block starts in the free end.
  const std::uintptr_t b = must_allocate(arena, 3 * kMiB);
  CHECK(b == a + kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{2 * kMiB, 2 * kMiB});
  CHECK(source.log().grows == 1);
  const ArenaStats stats = arena.stats();
  CHECK(stats.regions == 1);
  CHECK(stats.region_reservations == 1);
  CHECK(stats.region_grows == 1);
  CHECK(stats.bytes_reserved == 4 * kMiB);
  CHECK(arena.find(b)->region.size == 4 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: after a tail in use, the new bytes are a chunk of their own", "[resizable][growth]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(64 * kMiB, kGranuleBytes));
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  const std::uintptr_t b = must_allocate(arena, 2 * kMiB + 1);  // 4 MiB more (granules)
  CHECK(b == a + 2 * kMiB);
  CHECK(arena.stats().bytes_reserved == 6 * kMiB);
  CHECK(arena.validate());
  // Freed, everything coalesces into one chunk across both growth steps.
  must_free(arena, a);
  must_free(arena, b);
  const ArenaStats stats = arena.stats();
  CHECK(stats.largest_free_block == 6 * kMiB);
  CHECK(stats.chunks == 1);
  CHECK(arena.validate());
}

TEST_CASE("resizable: the floor applies to the first region and to new slabs, the shortfall is the last attempt",
          "[resizable][growth][backoff]") {
  // Slabs of at least 8 MiB, as the shim's source takes new memory; the source holds at most 6.
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes, RegionSourceLimits{SIZE_MAX, 6 * kMiB}, 0, false,
                                   8 * kMiB);
  BfcArena arena(source, growing_by(64 * kMiB, 8 * kMiB));
  must_allocate(arena, kMiB);  // 8 MiB refused, then the 2 MiB shortfall
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB, 2 * kMiB});
  // Growth maps the shortfall (3 - 1 free = 2 MiB); its 8 MiB slab does not fit, exactly 2 MiB does.
  must_allocate(arena, 3 * kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB, 2 * kMiB, 2 * kMiB});
  CHECK(arena.stats().region_refusals == 1);
  CHECK(arena.stats().bytes_reserved == 4 * kMiB);
  CHECK(arena.stats().bytes_pooled == 0);
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(3 * kMiB, ptr) == Status::out_of_memory);  // 4 + 4 > 6: refused at every size
  CHECK(arena.validate());
}

TEST_CASE("resizable: release unmaps the idle granules, then gives the whole region back",
          "[resizable][gc]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(64 * kMiB, kGranuleBytes));
  const std::uintptr_t a = must_allocate(arena, kMiB);
  const std::uintptr_t b = must_allocate(arena, 5 * kMiB);  // region 6 MiB
  REQUIRE(arena.stats().bytes_reserved == 6 * kMiB);
  CHECK(arena.release_free_regions() == 0);  // the end is in use
  must_free(arena, b);                       // free from 1 MiB to 6 MiB
  CHECK(arena.release_free_regions() == 4 * kMiB);  // 2..6 MiB: the granules wholly free
  ArenaStats stats = arena.stats();
  CHECK(stats.bytes_reserved == 2 * kMiB);
  CHECK(stats.region_unmaps == 1);
  CHECK(stats.bytes_unmapped == 4 * kMiB);
  CHECK(source.log().live_bytes == 2 * kMiB);
  CHECK(arena.validate());
  CHECK(arena.release_free_regions() == 0);  // 1 MiB free: less than a granule
  must_free(arena, a);
  CHECK(arena.release_free_regions() == 2 * kMiB);  // wholly free: the region goes
  stats = arena.stats();
  CHECK(stats.regions == 0);
  CHECK(stats.bytes_reserved == 0);
  CHECK(source.log().live_regions == 0);
  CHECK(arena.validate());
  CHECK(must_allocate(arena, 3 * kMiB) == FakeRegionSource::kBase);  // reserved again
  CHECK(arena.validate());
}

TEST_CASE("resizable: a fenced end is kept until its fence is resolved", "[resizable][gc][fence]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(64 * kMiB, kGranuleBytes));
  must_allocate(arena, kMiB);
  const std::uintptr_t b = must_allocate(arena, 5 * kMiB);
  must_free(arena, b, Fence{1, 0});
  CHECK(arena.release_free_regions() == 0);
  arena.resolve_fences_through(1);
  CHECK(arena.release_free_regions() == 4 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: a block whose end is given back leaves the block before it as the end",
          "[resizable][gc]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(64 * kMiB, kGranuleBytes));
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  const std::uintptr_t b = must_allocate(arena, 4 * kMiB);
  must_free(arena, b);
  CHECK(arena.release_free_regions() == 4 * kMiB);  // the whole free chunk goes
  CHECK(arena.validate());
  const std::uintptr_t c = must_allocate(arena, 2 * kMiB);  // grows again after `a`
  CHECK(c == a + 2 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: preallocation maps the whole limit as one region, without a head", "[resizable][preallocate]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  ArenaOptions options = preallocated(64 * kMiB + kMiB);  // rounded down to whole granules
  options.preallocation_head_bytes = 2 * kMiB;
  BfcArena arena(source, options);
  must_allocate(arena, kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{64 * kMiB});
  CHECK(arena.stats().regions == 1);
  // The idle granules go back on request, and are mapped again as blocks need them.
  CHECK(arena.release_free_regions() == 62 * kMiB);
  must_allocate(arena, 4 * kMiB);  // at 1 MiB: the granules from 2 to 6 MiB mapped again
  CHECK(arena.stats().bytes_reserved == 6 * kMiB);
  CHECK(arena.stats().region_maps == 1);
  CHECK(arena.validate());
}

TEST_CASE("resizable: a refused preallocation backs off, finally to the shortfall", "[resizable][preallocate]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes, RegionSourceLimits{SIZE_MAX, 50 * kMiB});
  BfcArena arena(source, preallocated(64 * kMiB));
  must_allocate(arena, kMiB);
  const std::vector<std::size_t>& requests = source.log().requests;
  REQUIRE(requests.size() == 3);  // 64, 56 (57.6 in whole granules), 50 (50.4): granted
  CHECK(requests[0] == 64 * kMiB);
  CHECK(requests[1] == 56 * kMiB);
  CHECK(requests[2] == 50 * kMiB);
  CHECK(arena.stats().bytes_reserved == 50 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: host memory stays readable across growth and unmapping", "[resizable][host]") {
  HostResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(64 * kMiB, kGranuleBytes));
  std::vector<std::pair<std::uintptr_t, std::size_t>> blocks;
  for (std::size_t i = 1; i <= 12; ++i) {
    const std::size_t bytes = i * 300 * kKiB;
    const std::uintptr_t ptr = must_allocate(arena, bytes);
    std::memset(reinterpret_cast<void*>(ptr), static_cast<int>(i), bytes);
    blocks.emplace_back(ptr, bytes);
  }
  CHECK(arena.stats().regions == 1);
  // Free the last half: its granules are unmapped; the first half is untouched.
  for (std::size_t i = 6; i < blocks.size(); ++i) must_free(arena, blocks[i].first);
  CHECK(arena.release_free_regions() > 0);
  for (std::size_t i = 0; i < 6; ++i) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(blocks[i].first);
    CHECK(bytes[0] == i + 1);
    CHECK(bytes[blocks[i].second - 1] == i + 1);
  }
  const std::uintptr_t again = must_allocate(arena, 8 * kMiB);
  std::memset(reinterpret_cast<void*>(again), 0x5a, 8 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: random allocations, frees, fences and releases keep every invariant", "[resizable][random]") {
  FakeResizableRegionSource source(256 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(256 * kMiB, kGranuleBytes));
  std::mt19937_64 rng(11);
  std::vector<std::uintptr_t> live;
  FenceId fence = 0;
  std::size_t grows = 0;
  for (int step = 0; step < 4000; ++step) {
    const auto roll = rng() % 100;
    if (roll < 55 || live.empty()) {
      std::uintptr_t ptr = 0;
      const Status status = arena.allocate(1 + rng() % (3 * kMiB), ptr);
      if (status == Status::ok) live.push_back(ptr);
      if (status == Status::fences_pending) arena.resolve_fences_through(fence);
    } else if (roll < 95) {
      free_at_random(arena, live, rng, fence, 4);
    } else {
      arena.release_free_regions();
    }
    if (step % 16 == 0) REQUIRE(arena.validate());
    grows = arena.stats().region_grows;
  }
  const ArenaStats stats = arena.stats();
  CHECK(stats.regions == 1);
  CHECK(grows > 10);
  CHECK(stats.region_unmaps > 0);
  CHECK(stats.region_maps > 0);
  CHECK(stats.bytes_reserved == source.log().live_bytes);
  CHECK(arena.validate());
}

TEST_CASE("resizable: growth unmaps idle granules first, and a block over them has them mapped again",
          "[resizable][unmap]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(32 * kMiB, kGranuleBytes));
  const std::uintptr_t a = hole_then_growth(arena);  // the hole is unmapped, then 6 MiB mapped at the end
  ArenaStats stats = arena.stats();
  CHECK(stats.bytes_reserved == 10 * kMiB);
  CHECK(stats.peak_bytes_reserved == 10 * kMiB);  // 14 without unmapping
  CHECK(stats.bytes_unmapped == 4 * kMiB);
  CHECK(stats.region_unmaps == 1);
  CHECK(source.log().live_bytes == 10 * kMiB);
  CHECK(arena.validate());
  // Best fit is the hole: its memory comes back under the new block.
  CHECK(must_allocate(arena, 3 * kMiB) == a + 2 * kMiB);
  stats = arena.stats();
  CHECK(stats.region_maps == 1);
  CHECK(stats.bytes_unmapped == 0);
  CHECK(stats.bytes_reserved == 14 * kMiB);
  CHECK(source.log().maps == 1);
  CHECK(arena.validate());
}

TEST_CASE("resizable: with idle_slack infinite, growth keeps idle granules mapped", "[resizable][unmap]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  ArenaOptions options = growing_by(32 * kMiB, kGranuleBytes);
  options.idle_slack = std::numeric_limits<double>::infinity();
  BfcArena arena(source, options);
  hole_then_growth(arena);
  CHECK(arena.stats().bytes_reserved == 14 * kMiB);
  CHECK(arena.stats().region_unmaps == 0);
  CHECK(arena.validate());
}

TEST_CASE("resizable: trimming to the soft target spends a credit of driver calls, earned per allocation",
          "[resizable][unmap][trim]") {
  // The hole's unmapping costs one call and two granules to map again: 3 of credit, which starts at
  // the burst.
  const auto trimmed = [](double burst) {
    FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
    ArenaOptions options = growing_by(32 * kMiB, kGranuleBytes);
    options.idle_slack = 0;
    options.trim_burst_calls = burst;
    options.trim_calls_per_allocation = 0;
    BfcArena arena(source, options);
    hole_then_growth(arena);
    REQUIRE(arena.validate());
    return std::pair(arena.stats().region_unmaps, arena.stats().peak_bytes_reserved);
  };
  CHECK(trimmed(3) == std::pair<std::uint64_t, std::size_t>(1, 10 * kMiB));
  CHECK(trimmed(1) == std::pair<std::uint64_t, std::size_t>(1, 10 * kMiB));  // one call's worth: trims, overdrawn
  CHECK(trimmed(0.5) == std::pair<std::uint64_t, std::size_t>(0, 14 * kMiB));  // the region grows instead
  CHECK(trimmed(0) == std::pair<std::uint64_t, std::size_t>(0, 14 * kMiB));
}

TEST_CASE("resizable: a live set that keeps moving costs at most the credit's calls", "[resizable][unmap][trim]") {
  // Blocks of sizes that never repeat, freed at random: a soft target of no slack would have the
  // arena unmap and map again at nearly every step. The credit bounds the unmapping calls.
  const auto churn = [](double burst, double per_allocation) {
    FakeResizableRegionSource source(8 * kGiB, kGranuleBytes);
    ArenaOptions options = growing_by(4 * kGiB, kGranuleBytes);
    options.idle_slack = 0;
    options.trim_burst_calls = burst;
    options.trim_calls_per_allocation = per_allocation;
    BfcArena arena(source, options);
    std::mt19937_64 rng(11);
    std::vector<std::uintptr_t> live;
    FenceId fence = 0;
    for (int step = 0; step < 20000; ++step) {
      if (live.size() < 200) {
        live.push_back(must_allocate(arena, 256 * (1 + rng() % (16 * kMiB / 256))));
      } else {
        free_at_random(arena, live, rng, fence, 1u << 30);
      }
      if (live.size() == 200 && rng() % 2 == 0) free_at_random(arena, live, rng, fence, 1u << 30);
    }
    REQUIRE(arena.validate());
    return std::pair(arena.stats(), source.log().calls.total());
  };
  const auto [unbounded, unbounded_calls] = churn(1e12, 0);
  const auto [bounded, bounded_calls] = churn(64, 0.002);
  const auto [unearned, unearned_calls] = churn(64, 0);
  const auto [earning, earning_calls] = churn(64, 0.05);
  CHECK(unearned.region_unmaps <= 65);
  CHECK(earning.region_unmaps > unearned.region_unmaps);  // credit earned back by allocations
  CHECK(static_cast<double>(earning.region_unmaps) <= 64 + 0.05 * static_cast<double>(earning.num_allocs) + 1);
  // Each unmapping call spends at least one of the credit; the last may overdraw it.
  const double earned = 64 + 0.002 * static_cast<double>(bounded.num_allocs);
  CHECK(static_cast<double>(bounded.region_unmaps) <= earned + 1);
  CHECK(static_cast<double>(unbounded.region_unmaps) > 3 * earned);
  CHECK(bounded_calls < unbounded_calls);
  CHECK(bounded.peak_bytes_reserved >= unbounded.peak_bytes_reserved);
}

TEST_CASE("resizable: the limit bounds the memory mapped, not the addresses", "[resizable][unmap][preallocate]") {
  // A classic arena of 8 MiB with 4 MiB free in two holes of 2 MiB cannot serve 4 MiB; here the holes'
  // memory moves to where the block goes.
  FakeResizableRegionSource source(32 * kMiB, kGranuleBytes);
  BfcArena arena(source, preallocated(8 * kMiB));
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  must_allocate(arena, 2 * kMiB);
  const std::uintptr_t c = must_allocate(arena, 2 * kMiB);
  must_allocate(arena, 2 * kMiB);
  must_free(arena, a);
  must_free(arena, c);
  const std::uintptr_t big = must_allocate(arena, 4 * kMiB);
  CHECK(big == a + 8 * kMiB);
  ArenaStats stats = arena.stats();
  CHECK(stats.bytes_reserved == 8 * kMiB);
  CHECK(stats.bytes_unmapped == 4 * kMiB);
  CHECK(source.log().live_bytes == 8 * kMiB);
  CHECK(arena.validate());
  // 8 MiB live: nothing more fits, though the addresses of a and c are free.
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kMiB, ptr) == Status::out_of_memory);
  CHECK(arena.validate());
  must_free(arena, big);
  CHECK(must_allocate(arena, 2 * kMiB) == a);  // the best fit, mapped again
  CHECK(arena.validate());
}

TEST_CASE("resizable: a refused mapping leaves the chunk free, and a later one succeeds", "[resizable][unmap]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(32 * kMiB, kGranuleBytes));
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  must_allocate(arena, 2 * kMiB);
  must_free(arena, a);
  REQUIRE(arena.release_free_regions() == 2 * kMiB);
  source.set_limits(RegionSourceLimits{SIZE_MAX, 2 * kMiB});  // no more than what is mapped now
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kMiB, ptr) == Status::out_of_memory);
  CHECK(arena.stats().bytes_in_use == 2 * kMiB);
  CHECK(arena.validate());
  source.set_limits(RegionSourceLimits{});
  CHECK(must_allocate(arena, kMiB) == a);
  CHECK(arena.validate());
}

TEST_CASE("resizable: host memory unmapped and mapped again is usable", "[resizable][host][unmap]") {
  HostResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(32 * kMiB, kGranuleBytes));
  const std::uintptr_t a = must_allocate(arena, 4 * kMiB);
  const std::uintptr_t b = must_allocate(arena, 2 * kMiB);
  std::memset(reinterpret_cast<void*>(b), 0x11, 2 * kMiB);
  must_free(arena, a);
  REQUIRE(arena.release_free_regions() == 4 * kMiB);
  const std::uintptr_t again = must_allocate(arena, 4 * kMiB);
  REQUIRE(again == a);
  std::memset(reinterpret_cast<void*>(again), 0x22, 4 * kMiB);
  CHECK(reinterpret_cast<const unsigned char*>(b)[2 * kMiB - 1] == 0x11);
  CHECK(arena.validate());
}

TEST_CASE("resizable: random use at the limit moves memory to where blocks go, within the limit",
          "[resizable][random][unmap]") {
  // Preallocated 64 MiB in a range of 128: requests up to 6 MiB, most frees unfenced.
  FakeResizableRegionSource source(128 * kMiB, kGranuleBytes);
  BfcArena arena(source, preallocated(64 * kMiB));
  std::mt19937_64 rng(23);
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;
  std::size_t live_bytes = 0;
  FenceId fence = 0;
  std::uint64_t served = 0, refused = 0;
  for (int step = 0; step < 4000; ++step) {
    if (rng() % 100 < 55 || live.empty()) {
      const std::size_t bytes = 256 * (1 + rng() % (6 * kMiB / 256));
      std::uintptr_t ptr = 0;
      const Status status = arena.allocate(bytes, ptr);
      if (status == Status::ok) {
        live.emplace_back(ptr, bytes);
        live_bytes += bytes;
        ++served;
      } else if (status == Status::fences_pending) {
        arena.resolve_fences_through(fence);
      } else {
        // Refused only when live blocks and the request need more than 40 of the 64 MiB: what is
        // lost is the unused part of the granules at the blocks' ends, never free memory stranded in
        // holes.
        CHECK(live_bytes + bytes > 40 * kMiB);
        ++refused;
      }
    } else {
      const std::size_t index = rng() % live.size();
      must_free(arena, live[index].first, rng() % 8 == 0 ? Fence{++fence, 0} : Fence{});
      live_bytes -= live[index].second;
      live[index] = live.back();
      live.pop_back();
    }
    const ArenaStats stats = arena.stats();
    REQUIRE(stats.bytes_reserved <= 64 * kMiB);
    REQUIRE(stats.bytes_reserved + stats.bytes_pooled == source.log().live_bytes);
    if (step % 16 == 0) REQUIRE(arena.validate());
  }
  const ArenaStats stats = arena.stats();
  CHECK(stats.region_unmaps > 0);
  CHECK(stats.region_maps > 0);
  CHECK(served > 1000);
  CHECK(refused > 0);  // the limit was reached
  CHECK(arena.validate());
}

TEST_CASE("resizable: idle granules are found after more frees than the arena keeps notes of",
          "[resizable][unmap]") {
  FakeResizableRegionSource source(64 * kMiB, kGranuleBytes);
  BfcArena arena(source, growing_by(32 * kMiB, kGranuleBytes));
  const std::uintptr_t first = must_allocate(arena, 2 * kMiB);
  const std::uintptr_t hole = must_allocate(arena, 4 * kMiB);
  must_allocate(arena, 2 * kMiB);  // pins the hole between two blocks
  must_free(arena, hole);
  // Thousands of frees of a block over whole granules, none of which needs memory mapped: each
  // leaves a free chunk that may hold idle granules, more than the arena notes one by one.
  for (int round = 0; round < 3000; ++round) {
    const std::uintptr_t block = must_allocate(arena, 4 * kMiB);
    REQUIRE(block == first + 2 * kMiB);
    must_free(arena, block);
  }
  CHECK(arena.stats().region_unmaps == 0);
  CHECK(arena.validate());
  must_allocate(arena, 6 * kMiB);  // fits nowhere: the hole's granules go before the region grows
  const ArenaStats stats = arena.stats();
  CHECK(stats.region_unmaps == 1);
  CHECK(stats.bytes_unmapped == 4 * kMiB);
  CHECK(stats.bytes_reserved == 10 * kMiB);
  CHECK(source.log().live_bytes == 10 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: preallocate part of the limit, then grow by steps, keeping idle memory",
          "[resizable][preallocate]") {
  FakeResizableRegionSource source(128 * kMiB, kGranuleBytes);
  ArenaOptions options = preallocated(64 * kMiB);
  options.preallocation_bytes = 8 * kMiB + kMiB;  // whole granules: 8 MiB
  options.min_growth_bytes = 4 * kMiB;
  BfcArena arena(source, options);
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB});
  must_allocate(arena, 6 * kMiB);
  must_free(arena, a);  // an idle granule a growing arena would unmap before mapping more
  must_allocate(arena, 3 * kMiB);  // 3 MiB do not fit the 2 MiB hole: the region grows by a step
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB, 4 * kMiB});
  CHECK(source.log().unmaps == 0);
  CHECK(arena.stats().bytes_reserved == 12 * kMiB);
  CHECK(arena.validate());
}

TEST_CASE("resizable: a source refusing below the arena's limit gets idle granules back first",
          "[resizable][unmap][limit]") {
  // The source holds at most 10 MiB (a budget shared with other paths, or a GPU with other
  // processes): the arena's own limit of 64 MiB does not know it.
  FakeResizableRegionSource source(128 * kMiB, kGranuleBytes, RegionSourceLimits{SIZE_MAX, 10 * kMiB});
  ArenaOptions options = preallocated(64 * kMiB);
  options.preallocation_bytes = 8 * kMiB;
  options.min_growth_bytes = 2 * kMiB;
  BfcArena arena(source, options);
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  const std::uintptr_t b = must_allocate(arena, 2 * kMiB);
  must_free(arena, a);
  // 8 MiB: the free end holds 4, growing by 4 more passes the source's 10; with the idle granules
  // (the first 2 MiB and the end's 4) unmapped it fits: 2 (b) + 8 mapped.
  const std::uintptr_t big = must_allocate(arena, 8 * kMiB);
  CHECK(big == b + 2 * kMiB);
  CHECK(source.log().unmaps > 0);
  CHECK(source.log().live_bytes == 10 * kMiB);
  CHECK(arena.stats().bytes_reserved == 10 * kMiB);
  CHECK(arena.validate());
  // And the hole at the start is mapped again when a block needs it (after b is freed, say).
  must_free(arena, big);
  const std::uintptr_t again = must_allocate(arena, 2 * kMiB);
  CHECK(arena.find(again).has_value());
  CHECK(arena.validate());
}

// Pieces (piece_layout.h): a source that backs its first reservation in pieces of up to a 32nd of
// the limit, and growth and memory mapped again one granule each.

TEST_CASE("resizable pieces: a whole limit up to 192 GiB is mapped in at most 64 pieces", "[resizable][pieces]") {
  // The layout alone, for every limit in 2 MiB steps up to 4 GiB and in 1 GiB steps up to 192 GiB.
  const auto pieces_for = [](std::size_t limit) {
    const std::size_t largest = largest_piece_for(limit, kGranuleBytes);
    std::size_t count = 0;
    for (std::size_t offset = 0; offset < limit; ++count) {
      offset += std::min(limit - offset, piece_bytes_at(offset, kGranuleBytes, largest));
    }
    return count;
  };
  std::size_t most = 0;
  for (std::size_t limit = kGranuleBytes; limit <= 4 * kGiB; limit += kGranuleBytes) most = std::max(most, pieces_for(limit));
  for (std::size_t limit = 4 * kGiB; limit <= 192 * kGiB; limit += kGiB) most = std::max(most, pieces_for(limit));
  CHECK(most <= 64);
  // And as the arena preallocates it: one reservation, 44 pieces, nothing more for the blocks.
  const std::size_t limit = 192 * kGiB;
  FakeResizableRegionSource source(2 * limit, kGranuleBytes, {}, largest_piece_for(limit, kGranuleBytes));
  BfcArena arena(source, preallocated(limit));
  for (int i = 0; i < 100; ++i) must_allocate(arena, kGiB + 4096);
  CHECK(source.log().requests == std::vector<std::size_t>{limit});
  CHECK(source.log().pieces == 44);
  CHECK(arena.stats().bytes_reserved == limit);
  CHECK(arena.validate());
}

TEST_CASE("resizable pieces: an idle piece goes back whole, one partly in use stays", "[resizable][pieces]") {
  // 256 MiB: pieces of 2, 2, 4 MiB, then 8 MiB each (a 32nd of the limit).
  FakeResizableRegionSource source(512 * kMiB, kGranuleBytes, {}, largest_piece_for(256 * kMiB, kGranuleBytes));
  BfcArena arena(source, preallocated(256 * kMiB));
  const std::uintptr_t a = must_allocate(arena, 9 * kMiB);  // [0, 9 MiB)
  const std::uintptr_t b = must_allocate(arena, kMiB);      // [9, 10 MiB): in the piece [8, 16)
  CHECK(source.log().pieces == 3 + 248 / 8);
  must_free(arena, a);
  // Idle: [0, 9) and [10, 256). The pieces wholly in them go: [0, 8) and [16, 256).
  CHECK(arena.release_free_regions() == 248 * kMiB);
  CHECK(arena.stats().bytes_reserved == 8 * kMiB);
  CHECK(source.log().live_bytes == 8 * kMiB);
  CHECK(arena.validate());
  // Mapped again under a block, one granule per piece: 3 MiB at the start takes two granules.
  const std::uintptr_t c = must_allocate(arena, 3 * kMiB);
  CHECK(c == a);
  CHECK(arena.stats().bytes_reserved == 12 * kMiB);
  must_free(arena, b);
  must_free(arena, c);
  arena.release_free_regions();
  CHECK(arena.stats().bytes_reserved == 0);
  CHECK(source.log().live_bytes == 0);
  CHECK(arena.validate());
}

TEST_CASE("resizable pieces: random use at the limit keeps every invariant", "[resizable][pieces][random]") {
  for (const bool preallocate : {true, false}) {
    FakeResizableRegionSource source(128 * kMiB, kGranuleBytes, {}, largest_piece_for(64 * kMiB, kGranuleBytes));
    BfcArena arena(source, preallocate ? preallocated(64 * kMiB) : growing_by(64 * kMiB, 8 * kMiB));
    CHECK(random_use_at_the_limit(arena, source, 64 * kMiB, preallocate ? 31 : 37) > 1000);
    CHECK(arena.stats().region_unmaps > 0);
    CHECK(arena.validate());
  }
}

namespace {

// 64 MiB preallocated in pieces of 2, 2, 4, 8 MiB, then 16 MiB each ([16, 32), [32, 48), [48, 64)),
// filled with blocks of 16, 8, 8, 8, 8 and 16 MiB; the 8 MiB blocks at 24 and 40 MiB freed leave
// 16 MiB idle, but in two pieces that also hold live blocks, and no free chunk of 16 MiB.
struct LentPieces {
  explicit LentPieces(bool lends)
      : source(128 * kMiB, kGranuleBytes, {}, 16 * kMiB, lends), arena(source, preallocated(64 * kMiB)) {
    for (const std::size_t mib : {16, 8, 8, 8, 8, 16}) blocks.push_back(must_allocate(arena, mib * kMiB));
    must_free(arena, blocks[2]);  // [24, 32): the piece [16, 32) still holds [16, 24)
    must_free(arena, blocks[4]);  // [40, 48): the piece [32, 48) still holds [32, 40)
  }
  FakeResizableRegionSource source;
  BfcArena arena;
  std::vector<std::uintptr_t> blocks;
};

}  // namespace

TEST_CASE("loans: idle granules of busy pieces back a block the limit leaves no memory for",
          "[resizable][pieces][loans]") {
  SECTION("a source that cannot lend refuses") {
    LentPieces setup(false);
    std::uintptr_t ptr = 0;
    CHECK(setup.arena.allocate(16 * kMiB, ptr) == Status::out_of_memory);
    CHECK(setup.arena.stats().bytes_lent == 0);
    CHECK(setup.arena.validate());
  }
  SECTION("a lending source serves it at the region's end, within the limit") {
    LentPieces setup(true);
    BfcArena& arena = setup.arena;
    const std::uintptr_t base = setup.blocks[0];
    const std::uintptr_t block = must_allocate(arena, 16 * kMiB);
    CHECK(block == base + 64 * kMiB);  // addresses grown past the preallocation
    ArenaStats stats = arena.stats();
    CHECK(stats.bytes_lent == 16 * kMiB);
    CHECK(stats.region_loans == 8);
    CHECK(stats.bytes_reserved == 64 * kMiB);
    CHECK(stats.bytes_in_use == 64 * kMiB);
    CHECK(setup.source.log().live_bytes == 64 * kMiB);
    CHECK(setup.source.log().loans == 8);
    CHECK(arena.validate());
    // The lent granules are out of use: not handed out, and not the program's to free.
    std::uintptr_t ptr = 0;
    CHECK(arena.allocate(2 * kMiB, ptr) == Status::out_of_memory);
    CHECK(arena.deallocate(base + 24 * kMiB) == Status::not_owned);
    CHECK(arena.validate());
    // Freed and unmapped, the borrowed granules end their loans: the lenders are idle again, and
    // serve blocks without any memory mapped.
    must_free(arena, block);
    CHECK(arena.release_free_regions() == 0);  // the borrowed granules held no memory of their own
    stats = arena.stats();
    CHECK(stats.bytes_lent == 0);
    CHECK(stats.bytes_reserved == 64 * kMiB);
    CHECK(stats.bytes_unmapped == 16 * kMiB);
    CHECK(arena.validate());
    const std::uint64_t maps = stats.region_maps;
    CHECK(must_allocate(arena, 8 * kMiB) == base + 24 * kMiB);
    CHECK(must_allocate(arena, 8 * kMiB) == base + 40 * kMiB);
    CHECK(arena.stats().region_maps == maps);
    CHECK(setup.source.log().live_bytes == 64 * kMiB);
    CHECK(arena.validate());
  }
  SECTION("a lending source lends under the holes of a free chunk too") {
    LentPieces setup(true);
    BfcArena& arena = setup.arena;
    // Free the last 16 MiB block: its piece goes back whole, and 16 MiB of limit with it.
    must_free(arena, setup.blocks[5]);
    CHECK(arena.release_free_regions() == 16 * kMiB);
    // 32 MiB over the free end [40, 64) and 8 MiB grown: [40, 48) is mapped, the limit backs 16 MiB
    // of the rest, and 8 MiB are lent.
    const std::uintptr_t block = must_allocate(arena, 32 * kMiB);
    CHECK(block == setup.blocks[0] + 40 * kMiB);
    const ArenaStats stats = arena.stats();
    CHECK(stats.bytes_reserved == 64 * kMiB);
    CHECK(stats.bytes_lent == 8 * kMiB);
    CHECK(arena.validate());
    must_free(arena, block);
    arena.release_free_regions();
    CHECK(arena.stats().bytes_lent == 0);
    // What stays is the pieces of the live blocks at 0, 16 and 32 MiB, their idle granules included.
    CHECK(arena.stats().bytes_reserved == 48 * kMiB);
    CHECK(setup.source.log().live_bytes == 48 * kMiB);
    CHECK(arena.validate());
  }
}

namespace {

// A growing arena that may hold 128 MiB, whose first step of 64 MiB is laid out as LentPieces' is and
// filled with the same blocks (all live). The tests then lower the source's own limit below the
// arena's (a shared GPU's share shrinking as a member joins), so idle granules of pieces [16, 32)
// and [32, 48) must serve.
struct GrownPieces {
  explicit GrownPieces(bool lends)
      : source(256 * kMiB, kGranuleBytes, {}, 16 * kMiB, lends), arena(source, growing_by(128 * kMiB, 64 * kMiB)) {
    for (const std::size_t mib : {16, 8, 8, 8, 8, 16}) blocks.push_back(must_allocate(arena, mib * kMiB));
  }
  FakeResizableRegionSource source;
  BfcArena arena;
  std::vector<std::uintptr_t> blocks;
};

}  // namespace

TEST_CASE("loans: idle granules of busy pieces back a block the source refuses below the arena's limit",
          "[resizable][pieces][loans]") {
  SECTION("at the region's end") {
    for (const bool lends : {false, true}) {
      GrownPieces setup(lends);
      FakeResizableRegionSource& source = setup.source;
      BfcArena& arena = setup.arena;
      const std::vector<std::uintptr_t>& blocks = setup.blocks;
      REQUIRE(arena.stats().bytes_reserved == 64 * kMiB);
      must_free(arena, blocks[2]);
      must_free(arena, blocks[4]);
      source.set_limits({.capacity_bytes = 64 * kMiB});
      std::uintptr_t block = 0;
      INFO("lends " << lends);
      if (!lends) {
        CHECK(arena.allocate(16 * kMiB, block) == Status::out_of_memory);
        CHECK(arena.validate());
        continue;
      }
      REQUIRE(arena.allocate(16 * kMiB, block) == Status::ok);
      CHECK(block == blocks[0] + 64 * kMiB);
      const ArenaStats stats = arena.stats();
      CHECK(stats.bytes_lent == 16 * kMiB);
      CHECK(stats.bytes_reserved == 64 * kMiB);
      CHECK(source.log().live_bytes == 64 * kMiB);
      // One growth asked for (refused as a whole slab and at its own size, as the shim's source
      // asks again), then every granule lent without asking the source again (4 refusals otherwise).
      CHECK(source.log().refusals == 2);
      CHECK(arena.validate());
      must_free(arena, block);
      arena.release_free_regions();
      CHECK(arena.stats().bytes_lent == 0);
      CHECK(arena.validate());
    }
  }
  SECTION("fenced memory first: no loans while a fenced chunk could serve once resolved") {
    GrownPieces setup(true);
    FakeResizableRegionSource& source = setup.source;
    BfcArena& arena = setup.arena;
    const std::vector<std::uintptr_t>& blocks = setup.blocks;
    must_free(arena, blocks[2]);
    must_free(arena, blocks[4]);
    must_free(arena, blocks[5], Fence{1, 0});  // [48, 64): freed, the device may still use it
    source.set_limits({.capacity_bytes = 64 * kMiB});
    // [24, 32) and [40, 48) could be lent for 16 MiB at the end; but synchronising gives the caller
    // [40, 64) whole, without a loan: fences_pending, nothing lent.
    std::uintptr_t block = 0;
    CHECK(arena.allocate(16 * kMiB, block) == Status::fences_pending);
    CHECK(arena.stats().bytes_lent == 0);
    CHECK(arena.validate());
    arena.resolve_fences_through(1);
    REQUIRE(arena.allocate(16 * kMiB, block) == Status::ok);
    CHECK(block == blocks[0] + 40 * kMiB);
    CHECK(arena.stats().bytes_lent == 0);
    CHECK(source.log().live_bytes == 64 * kMiB);
    CHECK(arena.validate());
  }
  SECTION("under the holes of a free chunk") {
    GrownPieces setup(true);
    FakeResizableRegionSource& source = setup.source;
    BfcArena& arena = setup.arena;
    const std::vector<std::uintptr_t>& blocks = setup.blocks;
    must_free(arena, blocks[2]);  // [24, 32), idle in the piece [16, 32)
    must_free(arena, blocks[4]);  // [40, 48)
    must_free(arena, blocks[5]);  // [48, 64): its piece goes back whole
    CHECK(arena.release_free_regions() == 16 * kMiB);
    source.set_limits({.capacity_bytes = 48 * kMiB});
    // 12 MiB at [40, 52): [40, 48) is mapped; the source refuses [48, 52), which [24, 28) backs.
    const std::uintptr_t block = must_allocate(arena, 12 * kMiB);
    CHECK(block == blocks[0] + 40 * kMiB);
    CHECK(arena.stats().bytes_lent == 4 * kMiB);
    CHECK(arena.stats().bytes_reserved == 48 * kMiB);
    CHECK(source.log().live_bytes == 48 * kMiB);
    CHECK(arena.validate());
    // 8 MiB at [52, 60) would need four granules lent; two are idle ([28, 32)): refused, nothing changed.
    std::uintptr_t ptr = 0;
    CHECK(arena.allocate(8 * kMiB, ptr) == Status::out_of_memory);
    CHECK(arena.stats().bytes_lent == 4 * kMiB);
    CHECK(source.log().live_bytes == 48 * kMiB);
    CHECK(arena.validate());
  }
}

TEST_CASE("loans: random use at the limit keeps every invariant", "[resizable][pieces][loans][random]") {
  for (const bool preallocate : {true, false}) {
    // Pieces up to 16 MiB, so that idle granules are often held by a piece with live blocks.
    FakeResizableRegionSource source(256 * kMiB, kGranuleBytes, {}, 16 * kMiB, true);
    BfcArena arena(source, preallocate ? preallocated(64 * kMiB) : growing_by(64 * kMiB, 8 * kMiB));
    CHECK(random_use_at_the_limit(arena, source, 64 * kMiB, preallocate ? 41 : 43) > 1000);
    // Growth maps a granule per piece after its first step: little is ever held by a busy piece.
    INFO("preallocate " << preallocate);
    CHECK((arena.stats().region_loans > 0) == preallocate);
    CHECK(arena.validate());
  }
}
