// Region sizing: preallocation, growth, the 0.9x back-off, garbage collection and the limit.
#include <new>
#include <set>

#include "arena_test_support.h"

using namespace gpumem;
using namespace gpumem::test;

namespace {
std::size_t backed_off(std::size_t bytes) { return static_cast<std::size_t>(static_cast<double>(bytes) * 0.9) / 256 * 256; }
}  // namespace

TEST_CASE("preallocate: one region of exactly the limit", "[sizing]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(10 * kMiB));
  must_allocate(arena, 1);
  must_allocate(arena, 5 * kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{10 * kMiB});
  CHECK(arena.stats().regions == 1);
  CHECK(arena.stats().region_refusals == 0);
}

TEST_CASE("preallocate: a refused limit is retried at 0.9x until it fits", "[sizing][backoff]") {
  FakeRegionSource source(RegionSourceLimits{8 * kMiB, SIZE_MAX});
  BfcArena arena(source, preallocated(10 * kMiB));
  must_allocate(arena, kMiB);
  const std::size_t first = 10 * kMiB, second = backed_off(first), third = backed_off(second),
                    fourth = backed_off(third);
  REQUIRE(fourth <= 8 * kMiB);
  REQUIRE(third > 8 * kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{first, second, third, fourth});
  const ArenaStats stats = arena.stats();
  CHECK(stats.region_refusals == 3);  // how the arena says it backed off
  CHECK(stats.bytes_reserved == fourth);
  CHECK(stats.bytes_limit == 10 * kMiB);
}

TEST_CASE("preallocate: back-off stops below the request", "[sizing][backoff]") {
  FakeRegionSource source(RegionSourceLimits{kMiB, SIZE_MAX});
  BfcArena arena(source, preallocated(10 * kMiB));
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(2 * kMiB, ptr) == Status::out_of_memory);
  for (std::size_t request : source.log().requests) CHECK(request >= 2 * kMiB);
  CHECK(source.log().reservations == 0);
  // A request that fits the source's cap still gets a (backed-off) region.
  must_allocate(arena, kMiB / 2);
  CHECK(arena.stats().bytes_reserved <= kMiB);
  CHECK(arena.stats().bytes_reserved >= kMiB / 2);
}

TEST_CASE("growth: a region for each request that needs one, at least min_growth_bytes", "[sizing][growth]") {
  FakeRegionSource source;
  BfcArena arena(source, growing(1024 * kMiB));  // min_growth_bytes 2 MiB
  must_allocate(arena, kMiB);      // region 2 MiB (the floor)
  must_allocate(arena, kMiB);      // fits in it
  must_allocate(arena, kMiB);      // region 2 MiB
  must_allocate(arena, 5 * kMiB);  // region 5 MiB: the request, not a doubling
  CHECK(source.log().requests == std::vector<std::size_t>{2 * kMiB, 2 * kMiB, 5 * kMiB});
  CHECK(arena.stats().regions == 3);
  CHECK(arena.stats().bytes_reserved == 9 * kMiB);
}

TEST_CASE("growth: the default floor keeps small requests from making many regions", "[sizing][growth]") {
  FakeRegionSource source;
  ArenaOptions options = growing(1024 * kMiB);
  options.min_growth_bytes = ArenaOptions{}.min_growth_bytes;
  BfcArena arena(source, options);
  const std::size_t blocks = ArenaOptions{}.min_growth_bytes / (100 * kKiB);
  for (std::size_t i = 0; i < blocks; ++i) must_allocate(arena, 100 * kKiB);  // up to the floor
  CHECK(arena.stats().regions == 1);
  CHECK(source.log().requests == std::vector<std::size_t>{ArenaOptions{}.min_growth_bytes});
}

TEST_CASE("growth: a region is capped by what the limit leaves", "[sizing][growth][limit]") {
  FakeRegionSource source;
  ArenaOptions options = growing(40 * kMiB);
  options.min_growth_bytes = 16 * kMiB;
  BfcArena arena(source, options);
  must_allocate(arena, 2 * kMiB);    // region 16 MiB
  must_allocate(arena, 15 * kMiB);   // 14 MiB free there: region 16 MiB
  must_allocate(arena, 12 * kMiB);   // fits in the first region, leaving 2 MiB
  const std::uintptr_t last = must_allocate(arena, 5 * kMiB);  // 16 wanted, 8 left under the limit
  CHECK(source.log().requests == std::vector<std::size_t>{16 * kMiB, 16 * kMiB, 8 * kMiB});
  CHECK(chunk_size(arena, last) == 8 * kMiB);  // 8 < 2 * 5: served whole by the split rule
  CHECK(arena.stats().bytes_reserved == 40 * kMiB);
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(7 * kMiB, ptr) == Status::out_of_memory);
  CHECK(source.log().requests.size() == 3);  // nothing asked beyond the limit
}

TEST_CASE("growth: a refused region is retried at exactly the request", "[sizing][growth][backoff]") {
  FakeRegionSource source(RegionSourceLimits{3 * kMiB, SIZE_MAX});
  ArenaOptions options = growing(64 * kMiB);
  options.min_growth_bytes = 8 * kMiB;
  BfcArena arena(source, options);
  must_allocate(arena, kMiB + 1);  // wants 8 MiB: refused; then exactly the rounded request
  const std::size_t rounded = kMiB + 256;
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB, rounded});
  CHECK(arena.stats().region_refusals == 1);
  CHECK(arena.stats().bytes_reserved == rounded);
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(4 * kMiB, ptr) == Status::out_of_memory);  // 8 MiB, then 4 MiB: both refused
  CHECK(source.log().requests.back() == 4 * kMiB);
  CHECK(arena.stats().region_refusals == 3);
}

TEST_CASE("garbage collection releases wholly free regions and retries", "[sizing][gc]") {
  for (const bool gc : {false, true}) {
    DYNAMIC_SECTION("garbage_collection " << gc) {
      FakeRegionSource source;
      BfcArena arena(source, growing(7 * kMiB, gc));
      must_allocate(arena, 2 * kMiB);                   // region 1: 2 MiB
      const std::uintptr_t b = must_allocate(arena, 4 * kMiB);  // region 2: 4 MiB
      must_free(arena, b);
      std::uintptr_t ptr = 0;
      const Status status = arena.allocate(5 * kMiB, ptr);  // 1 MiB left under the limit
      if (gc) {
        CHECK(status == Status::ok);
        CHECK(source.log().releases == 1);
        CHECK(arena.stats().region_releases == 1);
        CHECK(arena.stats().regions == 2);
        CHECK(arena.stats().bytes_reserved == 7 * kMiB);
        CHECK(source.log().requests.back() == 5 * kMiB);
      } else {
        CHECK(status == Status::out_of_memory);
        CHECK(source.log().releases == 0);
        CHECK(arena.stats().regions == 2);
      }
      CHECK(arena.validate());
    }
  }
}

TEST_CASE("release_free_regions gives back only wholly free regions", "[sizing][gc]") {
  FakeRegionSource source;
  BfcArena arena(source, growing(64 * kMiB));
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);  // region 1
  const std::uintptr_t b = must_allocate(arena, 3 * kMiB);  // region 2 (3 MiB)
  must_free(arena, a);
  CHECK(arena.release_free_regions() == 2 * kMiB);
  CHECK_FALSE(arena.owns(a));
  CHECK(arena.owns(b));
  CHECK(arena.release_free_regions() == 0);
  must_free(arena, b);
  CHECK(arena.release_free_regions() == 3 * kMiB);
  CHECK(arena.stats().bytes_reserved == 0);
  CHECK(source.log().live_regions == 0);
  must_allocate(arena, kMiB);  // grows again
  CHECK(arena.validate());
}

TEST_CASE("the limit is enforced in preallocate mode", "[sizing][limit]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kMiB + 1, ptr) == Status::out_of_memory);
  CHECK(arena.allocate(SIZE_MAX, ptr) == Status::out_of_memory);
  must_allocate(arena, kMiB / 2);
  must_allocate(arena, kMiB / 2);
  CHECK(arena.allocate(1, ptr) == Status::out_of_memory);
  CHECK(source.log().requests == std::vector<std::size_t>{kMiB});
  CHECK(arena.available() == 0);
}

TEST_CASE("the destructor gives every region back", "[sizing]") {
  FakeRegionSource source;
  {
    BfcArena arena(source, growing(64 * kMiB));
    must_allocate(arena, kMiB);
    must_allocate(arena, 3 * kMiB);
    CHECK(source.log().live_regions == 2);
  }
  CHECK(source.log().live_regions == 0);
  CHECK(source.log().live_bytes == 0);
}

namespace {

// A source that hands out misaligned or wrongly sized regions, or throws, on request.
class MisbehavingSource final : public RegionSource {
 public:
  enum class Fault { none, misaligned, short_region, throws };
  Fault fault = Fault::none;
  bool refuse_release = false;  // as a driver refusing cuMemFree (during a graph capture, say)
  std::uint64_t reserves = 0, releases = 0;

 private:
  Status do_reserve(std::size_t bytes, Region& out) override {
    if (fault == Fault::throws) throw std::bad_alloc();
    ++reserves;
    const std::uintptr_t base = FakeRegionSource::kBase + reserves * (std::uintptr_t{1} << 40);
    out = Region{fault == Fault::misaligned ? base + 8 : base, fault == Fault::short_region ? bytes / 2 : bytes};
    return Status::ok;
  }
  bool do_release(const Region&) override {
    if (refuse_release) return false;
    ++releases;
    return true;
  }
};

}  // namespace

TEST_CASE("a region that breaks the source's contract is given back and counted", "[sizing][source]") {
  for (const auto fault : {MisbehavingSource::Fault::misaligned, MisbehavingSource::Fault::short_region}) {
    MisbehavingSource source;
    source.fault = fault;
    BfcArena arena(source, growing(64 * kMiB));
    std::uintptr_t ptr = 0;
    CHECK(arena.allocate(kMiB, ptr) == Status::out_of_memory);
    CHECK(source.releases == source.reserves);  // nothing kept, nothing leaked
    ArenaStats stats = arena.stats();
    CHECK(stats.regions == 0);
    CHECK(stats.bytes_reserved == 0);
    CHECK(stats.region_reservations - stats.region_releases == stats.regions);
    CHECK(stats.region_reservations == source.reserves);
    // Once the source behaves, the arena grows normally.
    source.fault = MisbehavingSource::Fault::none;
    must_allocate(arena, kMiB);
    stats = arena.stats();
    CHECK(stats.regions == 1);
    CHECK(stats.region_reservations - stats.region_releases == 1);
    CHECK(arena.validate());
  }
}

TEST_CASE("a region the source will not take back stays in the arena", "[sizing][source][gc]") {
  MisbehavingSource source;
  BfcArena arena(source, growing(7 * kMiB, /*garbage_collection=*/true));
  must_allocate(arena, 2 * kMiB);                           // region 1: 2 MiB
  const std::uintptr_t b = must_allocate(arena, 4 * kMiB);  // region 2: 4 MiB
  must_free(arena, b);
  source.refuse_release = true;
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(5 * kMiB, ptr) == Status::out_of_memory);  // GC could not give region 2 back
  CHECK(arena.release_free_regions() == 0);
  ArenaStats stats = arena.stats();
  CHECK(stats.regions == 2);
  CHECK(stats.bytes_reserved == 6 * kMiB);
  CHECK(stats.region_releases == 0);
  CHECK(arena.owns(b));
  CHECK(arena.validate());
  must_allocate(arena, 4 * kMiB);  // the kept region still serves
  source.refuse_release = false;
}

TEST_CASE("a source that throws is a refusal, not an escaped exception", "[sizing][source]") {
  MisbehavingSource source;
  source.fault = MisbehavingSource::Fault::throws;
  BfcArena arena(source, growing(64 * kMiB));
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kMiB, ptr) == Status::out_of_memory);
  CHECK(arena.stats().regions == 0);
  source.fault = MisbehavingSource::Fault::none;
  must_allocate(arena, kMiB);
  CHECK(arena.validate());
}

namespace {
// Preallocation of `limit` with a head of `head` bytes.
ArenaOptions preallocated_with_head(std::size_t limit, std::size_t head) {
  ArenaOptions options = preallocated(limit);
  options.preallocation_head_bytes = head;
  return options;
}
}  // namespace

TEST_CASE("preallocate with a head: two regions, small blocks in the head, the rest given back whole",
          "[sizing][head]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated_with_head(64 * kMiB, 2 * kMiB));
  // The first allocation reserves the whole limit: the head, then the rest.
  const std::uintptr_t workspace = must_allocate(arena, 256 * 1024);
  CHECK(source.log().requests == std::vector<std::size_t>{2 * kMiB, 62 * kMiB});
  CHECK(arena.stats().bytes_reserved == 64 * kMiB);
  // Best fit keeps small blocks in the head while it has room.
  for (int i = 0; i < 6; ++i) must_allocate(arena, 256 * 1024);
  const auto head = arena.find(workspace);
  REQUIRE(head);
  CHECK(head->region.size == 2 * kMiB);
  // The rest is wholly free: it can go back, with the head's blocks still live.
  CHECK(arena.release_free_regions() == 62 * kMiB);
  CHECK(arena.stats().bytes_reserved == 2 * kMiB);
  // A block larger than the head grows the arena back, up to what the limit leaves.
  must_allocate(arena, 8 * kMiB);
  CHECK(arena.stats().bytes_reserved == 64 * kMiB);
  CHECK(source.log().requests.back() == 62 * kMiB);
}

TEST_CASE("preallocate with a head: a first request larger than the head takes a larger first region",
          "[sizing][head]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated_with_head(64 * kMiB, 2 * kMiB));
  must_allocate(arena, 5 * kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB, 56 * kMiB});
  CHECK(arena.stats().bytes_reserved == 64 * kMiB);
}

TEST_CASE("preallocate with a head as large as the limit: one region", "[sizing][head]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated_with_head(8 * kMiB, 8 * kMiB));
  must_allocate(arena, kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB});
}

TEST_CASE("preallocate part of the limit: that much first, then growth beyond it", "[sizing][preallocate]") {
  FakeRegionSource source;
  ArenaOptions options = preallocated(64 * kMiB);
  options.preallocation_bytes = 10 * kMiB;
  options.min_growth_bytes = 4 * kMiB;
  BfcArena arena(source, options);
  must_allocate(arena, kMiB);
  CHECK(source.log().requests == std::vector<std::size_t>{10 * kMiB});
  must_allocate(arena, 9 * kMiB);  // fills the preallocated region
  must_allocate(arena, 1 * kMiB);  // beyond: a growth region of the floor's size, not the rest of the limit
  must_allocate(arena, 6 * kMiB);  // 3 MiB left there: a region of the request
  CHECK(source.log().requests == std::vector<std::size_t>{10 * kMiB, 4 * kMiB, 6 * kMiB});
  CHECK(arena.stats().bytes_reserved == 20 * kMiB);
}

TEST_CASE("preallocate part of the limit: growth beyond it does not back off", "[sizing][preallocate][backoff]") {
  FakeRegionSource source(RegionSourceLimits{SIZE_MAX, 14 * kMiB});
  ArenaOptions options = preallocated(64 * kMiB);
  options.preallocation_bytes = 10 * kMiB;
  options.min_growth_bytes = 8 * kMiB;
  BfcArena arena(source, options);
  must_allocate(arena, 10 * kMiB);
  must_allocate(arena, 2 * kMiB);  // 8 MiB refused (14 at most), then exactly the request
  CHECK(source.log().requests == std::vector<std::size_t>{10 * kMiB, 8 * kMiB, 2 * kMiB});
}

TEST_CASE("fences before growth: fenced memory is reused before more is taken past the threshold",
          "[sizing][fences]") {
  for (const bool fences_first : {false, true}) {
    FakeRegionSource source;
    ArenaOptions options = growing(64 * kMiB);
    options.min_growth_bytes = 4 * kMiB;
    if (fences_first) options.fences_before_growth_above = 4 * kMiB;
    BfcArena arena(source, options);
    const std::uintptr_t a = must_allocate(arena, 4 * kMiB);
    must_free(arena, a, Fence{1, 0});
    std::uintptr_t b = 0;
    if (fences_first) {
      // 4 held + 4 more passes the threshold, and the fenced 4 MiB would serve: synchronise first.
      CHECK(arena.allocate(4 * kMiB, b) == Status::fences_pending);
      arena.resolve_fences_through(1);
      b = must_allocate(arena, 4 * kMiB);
      CHECK(b == a);
      CHECK(source.log().requests == std::vector<std::size_t>{4 * kMiB});
    } else {
      b = must_allocate(arena, 4 * kMiB);  // the default: a new region
      CHECK(b != a);
      CHECK(source.log().requests == std::vector<std::size_t>{4 * kMiB, 4 * kMiB});
    }
    // Below the threshold, or without enough fenced, growth goes on as usual.
    must_allocate(arena, 8 * kMiB);
    CHECK(arena.validate());
  }
}

TEST_CASE("fences before growth below use: fenced memory is reused while live blocks fill under that share",
          "[sizing][fences]") {
  FakeRegionSource source;
  ArenaOptions options = growing(64 * kMiB);
  options.min_growth_bytes = 4 * kMiB;
  options.fences_before_growth_below_use = 0.5;
  BfcArena arena(source, options);
  const std::uintptr_t a = must_allocate(arena, 4 * kMiB);
  const std::uintptr_t b = must_allocate(arena, kMiB);  // a second 4 MiB region, 3 MiB of it free
  must_free(arena, a, Fence{1, 0});
  // 1 of 8 MiB live, and the fenced 4 MiB would serve: synchronise rather than grow.
  std::uintptr_t c = 0;
  CHECK(arena.allocate(4 * kMiB, c) == Status::fences_pending);
  CHECK(arena.allocate(4 * kMiB, c, 7) == Status::fences_pending);  // stream-ordered requests too
  // A caller that cannot synchronise (a graph capture) grows instead.
  REQUIRE(arena.allocate(4 * kMiB, c, 0, FencedMemory::grow_instead) == Status::ok);
  CHECK(c != a);
  CHECK(source.log().requests == std::vector<std::size_t>{4 * kMiB, 4 * kMiB, 4 * kMiB});
  must_free(arena, b, Fence{2, 0});
  std::uintptr_t d = 0;
  CHECK(arena.allocate(4 * kMiB, d) == Status::fences_pending);  // 4 of 12 MiB live
  arena.resolve_fences_through(2);
  d = must_allocate(arena, 4 * kMiB);
  const std::uintptr_t e = must_allocate(arena, 4 * kMiB);
  CHECK(std::set<std::uintptr_t>{d, e} == std::set<std::uintptr_t>{a, b});  // a's region, and b's whole
  CHECK(source.log().requests.size() == 3);
  // Live blocks fill at least half: growth goes on as usual, fenced memory or not.
  must_free(arena, e, Fence{3, 0});
  must_allocate(arena, 4 * kMiB);  // 8 of 12 MiB live
  CHECK(source.log().requests.size() == 4);
  CHECK(arena.validate());
}

TEST_CASE("fences_before_growth_below_use outside [0, 1] is an invalid option", "[sizing][fences]") {
  for (const double share : {-0.5, 1.5}) {
    FakeRegionSource source;
    ArenaOptions options = growing(64 * kMiB);
    options.fences_before_growth_below_use = share;
    BfcArena arena(source, options);
    std::uintptr_t out = 0;
    CHECK(arena.allocate(kMiB, out) == Status::invalid_argument);
  }
}
