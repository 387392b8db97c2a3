// Allocation, best fit, the split rule, coalescing, bad frees and the stats of a BfcArena.
#include <cstring>
#include <limits>
#include <vector>

#include "arena_test_support.h"

using namespace gpumem;
using namespace gpumem::test;

TEST_CASE("allocations are rounded to 256 bytes and aligned to 256", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(16 * kMiB));
  for (std::size_t bytes : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{257},
                            std::size_t{1000}, std::size_t{4097}}) {
    const std::uintptr_t ptr = must_allocate(arena, bytes);
    INFO("bytes " << bytes);
    CHECK(ptr % 256 == 0);
    const auto info = arena.find(ptr);
    REQUIRE(info);
    CHECK(info->size == (bytes + 255) / 256 * 256);
    CHECK(info->requested == bytes);
    CHECK(info->in_use);
  }
  CHECK(arena.validate());
}

TEST_CASE("a block alignment of 512 puts every block at a multiple of 512", "[arena]") {
  // Sizes that round to odd multiples of 256 would leave every other block 256 bytes off.
  FakeRegionSource source;
  ArenaOptions options = preallocated(16 * kMiB);
  options.block_alignment = 512;
  BfcArena arena(source, options);
  std::vector<std::uintptr_t> blocks;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{256}, std::size_t{257}, std::size_t{768}, std::size_t{1000},
                            std::size_t{1280}, std::size_t{4097}}) {
    for (int copy = 0; copy < 3; ++copy) {
      const std::uintptr_t ptr = must_allocate(arena, bytes);
      INFO("bytes " << bytes);
      CHECK(ptr % 512 == 0);
      const auto info = arena.find(ptr);
      REQUIRE(info);
      CHECK(info->size == (bytes + 511) / 512 * 512);
      CHECK(info->requested == bytes);
      blocks.push_back(ptr);
    }
  }
  // Freed every other one and allocated again, into the holes: still aligned.
  for (std::size_t i = 0; i < blocks.size(); i += 2) REQUIRE(arena.deallocate(blocks[i]) == Status::ok);
  for (std::size_t bytes : {std::size_t{256}, std::size_t{300}, std::size_t{768}}) {
    CHECK(must_allocate(arena, bytes) % 512 == 0);
  }
  CHECK(arena.validate());
}

TEST_CASE("a block alignment that is no power of two of at least 256 is invalid", "[arena]") {
  for (std::size_t alignment : {std::size_t{0}, std::size_t{128}, std::size_t{384}, std::size_t{768}}) {
    FakeRegionSource source;
    ArenaOptions options = preallocated(kMiB);
    options.block_alignment = alignment;
    BfcArena arena(source, options);
    std::uintptr_t ptr = 0;
    INFO("alignment " << alignment);
    CHECK(arena.allocate(256, ptr) == Status::invalid_argument);
    CHECK(source.log().requests.empty());
  }
}

TEST_CASE("zero-byte requests are refused explicitly", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  std::uintptr_t ptr = 12345;
  CHECK(arena.allocate(0, ptr) == Status::zero_size);
  CHECK(ptr == 12345);
  CHECK(arena.stats().num_allocs == 0);
  CHECK(source.log().reservations == 0);  // nothing reserved for a refused request
}

TEST_CASE("invalid options make every allocation fail cleanly", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, ArenaOptions{});  // limit 0
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(256, ptr) == Status::invalid_argument);
  CHECK(source.log().requests.empty());
}

TEST_CASE("the region is reserved at the first allocation, not before", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(8 * kMiB));
  CHECK(source.log().reservations == 0);
  CHECK(arena.available() == 8 * kMiB);
  must_allocate(arena, 1);
  CHECK(source.log().requests == std::vector<std::size_t>{8 * kMiB});
  CHECK(arena.stats().bytes_reserved == 8 * kMiB);
}

TEST_CASE("try_stats gives the stats of an idle arena without waiting", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(8 * kMiB));
  must_allocate(arena, 1000);
  ArenaStats tried;
  REQUIRE(arena.try_stats(tried));
  const ArenaStats stats = arena.stats();
  CHECK(tried.bytes_in_use == stats.bytes_in_use);
  CHECK(tried.bytes_reserved == stats.bytes_reserved);
  CHECK(tried.peak_bytes_reserved == stats.peak_bytes_reserved);
  CHECK(tried.num_allocs == 1);
  CHECK(tried.largest_free_block == stats.largest_free_block);
}

TEST_CASE("best fit, then lowest address", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(64 * kMiB));
  // Free chunks of 2K, 3K, 2K, 2K (separated by live guards), freed out of address order.
  const std::uintptr_t a = allocate_guarded(arena, 2 * kKiB);
  const std::uintptr_t b = allocate_guarded(arena, 3 * kKiB);
  const std::uintptr_t c = allocate_guarded(arena, 2 * kKiB);
  const std::uintptr_t d = allocate_guarded(arena, 2 * kKiB);
  for (std::uintptr_t ptr : {d, b, c, a}) must_free(arena, ptr);

  CHECK(must_allocate(arena, 2 * kKiB) == a);  // smallest fitting size, lowest address
  CHECK(must_allocate(arena, 2 * kKiB - 100) == c);
  CHECK(must_allocate(arena, 2 * kKiB + 1) == b);  // only 3K (and the tail) fit
  CHECK(must_allocate(arena, 1800) == d);
  CHECK(arena.validate());
}

TEST_CASE("a bigger chunk at a lower address loses to a smaller fitting one", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(64 * kMiB));
  const std::uintptr_t big = allocate_guarded(arena, 64 * kKiB);
  const std::uintptr_t small = allocate_guarded(arena, 8 * kKiB);
  must_free(arena, big);
  must_free(arena, small);
  CHECK(must_allocate(arena, 5 * kKiB) == small);
}

namespace {

// Makes a free chunk of exactly `chunk` bytes (a live guard after it, a large free tail beyond) and
// returns the size of the chunk handed out for `request` bytes.
std::size_t served_size(std::size_t chunk, std::size_t request, std::size_t max_fragmentation) {
  FakeRegionSource source;
  ArenaOptions options = preallocated(4 * chunk + 64 * kMiB);
  options.max_internal_fragmentation = max_fragmentation;
  BfcArena arena(source, options);
  const std::uintptr_t hole = allocate_guarded(arena, chunk);
  must_free(arena, hole);
  const std::uintptr_t ptr = must_allocate(arena, request);
  REQUIRE(ptr == hole);
  REQUIRE(arena.validate());
  return chunk_size(arena, ptr);
}

}  // namespace

TEST_CASE("split rule: chunk >= 2 * rounded", "[arena][split]") {
  const std::size_t request = 4 * kKiB;
  CHECK(served_size(2 * request, request, 128 * kMiB) == request);                // exactly twice: split
  CHECK(served_size(2 * request - 256, request, 128 * kMiB) == 2 * request - 256);  // just under: whole
  CHECK(served_size(2 * request + 256, request, 128 * kMiB) == request);
  CHECK(served_size(request, request, 128 * kMiB) == request);  // exact fit
  // Rounding: 4K - 100 rounds to 4K, so an 8K chunk is still split.
  CHECK(served_size(2 * request, request - 100, 128 * kMiB) == request);
}

TEST_CASE("split rule: remainder >= max_internal_fragmentation", "[arena][split]") {
  const std::size_t request = 10 * kKiB;
  const std::size_t threshold = 4 * kKiB;  // far below 2 * request, so only this rule can split
  CHECK(served_size(request + threshold, request, threshold) == request);
  CHECK(served_size(request + threshold - 256, request, threshold) == request + threshold - 256);
  CHECK(served_size(request + threshold + 256, request, threshold) == request);
}

TEST_CASE("split rule: the 128 MiB default", "[arena][split]") {
  const std::size_t request = 172 * kMiB;  // chunk 300 MiB < 2 * request
  CHECK(served_size(300 * kMiB, request, 128 * kMiB) == request);                 // remainder 128 MiB
  CHECK(served_size(300 * kMiB, request + 256, 128 * kMiB) == 300 * kMiB);        // 128 MiB - 256
}

// Found by fuzz_arena: the first rule's 2 * rounded overflowed for a request that rounds to 2^63
// bytes, so a chunk less than twice its size was split all the same.
TEST_CASE("split rule: a request of 2^63 bytes does not overflow the doubling", "[arena][split]") {
  FakeRegionSource source;
  ArenaOptions options = preallocated(std::size_t{3} << 62);  // one region of 1.5 x 2^63 bytes
  options.max_internal_fragmentation = std::numeric_limits<std::size_t>::max();  // only the first rule splits
  BfcArena arena(source, options);
  const std::uintptr_t ptr = must_allocate(arena, (std::size_t{1} << 63) - 1);  // rounds to 2^63
  CHECK(chunk_size(arena, ptr) == std::size_t{3} << 62);  // the whole chunk, not half of it
  CHECK(arena.validate());
}

TEST_CASE("coalescing with the right, the left and both neighbours", "[arena][coalesce]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(16 * kMiB));
  const std::uintptr_t a = must_allocate(arena, 1 * kKiB);
  const std::uintptr_t b = must_allocate(arena, 2 * kKiB);
  const std::uintptr_t c = must_allocate(arena, 4 * kKiB);
  const std::uintptr_t guard = must_allocate(arena, 256);
  REQUIRE(b == a + kKiB);
  REQUIRE(c == b + 2 * kKiB);
  const std::size_t chunks = arena.stats().chunks;  // a, b, c, guard, free tail

  SECTION("right") {
    must_free(arena, b);
    must_free(arena, a);  // a absorbs its free right neighbour b
    CHECK(chunk_size(arena, a) == 3 * kKiB);
    CHECK(chunk_size(arena, b) == 0);
    CHECK(arena.stats().chunks == chunks - 1);
  }
  SECTION("left") {
    must_free(arena, a);
    must_free(arena, b);  // b merges into its free left neighbour a
    CHECK(chunk_size(arena, a) == 3 * kKiB);
    CHECK(arena.stats().chunks == chunks - 1);
  }
  SECTION("both") {
    must_free(arena, a);
    must_free(arena, c);
    CHECK(arena.stats().chunks == chunks);
    must_free(arena, b);  // joins a and c
    CHECK(chunk_size(arena, a) == 7 * kKiB);
    CHECK(arena.stats().chunks == chunks - 2);
    CHECK(must_allocate(arena, 7 * kKiB) == a);
  }
  SECTION("with the free tail, back to one chunk") {
    must_free(arena, a);
    must_free(arena, b);
    must_free(arena, c);
    must_free(arena, guard);
    CHECK(arena.stats().chunks == 1);
    CHECK(arena.stats().largest_free_block == 16 * kMiB);
  }
  CHECK(arena.validate());
}

TEST_CASE("coalescing never crosses a region boundary", "[arena][coalesce]") {
  FakeRegionSource source;  // hands out adjacent regions
  ArenaOptions options = growing(64 * kMiB);
  BfcArena arena(source, options);
  const std::uintptr_t first = must_allocate(arena, 2 * kMiB);   // fills region 1 (2 MiB)
  const std::uintptr_t second = must_allocate(arena, 4 * kMiB);  // fills region 2 (4 MiB)
  REQUIRE(second == first + 2 * kMiB);  // adjacent addresses, different regions
  must_free(arena, first);
  must_free(arena, second);
  CHECK(chunk_size(arena, first) == 2 * kMiB);
  CHECK(chunk_size(arena, second) == 4 * kMiB);
  CHECK(arena.stats().largest_free_block == 4 * kMiB);
  CHECK(arena.find(first)->region.base == first);
  CHECK(arena.find(second)->region.base == second);
  CHECK(arena.validate());
}

TEST_CASE("bad frees return a distinct error and leave the arena untouched", "[arena][bad_free]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(16 * kMiB));
  const std::uintptr_t a = must_allocate(arena, 4 * kKiB);
  const std::uintptr_t b = must_allocate(arena, 4 * kKiB);
  must_allocate(arena, 4 * kKiB);
  must_free(arena, b);
  const ArenaStats before = arena.stats();

  CHECK(arena.deallocate(b) == Status::double_free);
  CHECK(arena.deallocate(b, Fence{7, 0}) == Status::double_free);
  CHECK(arena.deallocate(a + 256) == Status::not_owned);    // inside a live chunk
  CHECK(arena.deallocate(b + 1) == Status::not_owned);      // not even granule-aligned
  CHECK(arena.deallocate(b + 256) == Status::double_free);  // free memory: a block once freed may have
                                                            // merged into a neighbour
  CHECK(arena.deallocate(0) == Status::not_owned);
  CHECK(arena.deallocate(FakeRegionSource::kBase - 256) == Status::not_owned);
  CHECK(arena.deallocate(FakeRegionSource::kBase + 16 * kMiB) == Status::not_owned);  // one past the end

  const ArenaStats after = arena.stats();
  CHECK(after.num_allocs == before.num_allocs);
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.chunks == before.chunks);
  CHECK(after.largest_free_block == before.largest_free_block);
  CHECK_FALSE(arena.has_pending_fences());
  CHECK(arena.validate());
  must_free(arena, a);  // still a live chunk
}

TEST_CASE("a block freed into its left neighbour still reports a double free", "[arena][bad_free]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t a = must_allocate(arena, kKiB);
  const std::uintptr_t b = must_allocate(arena, kKiB);
  must_allocate(arena, kKiB);
  must_free(arena, a);
  must_free(arena, b);  // merges into a: b no longer starts a chunk
  CHECK(chunk_size(arena, a) == 2 * kKiB);
  CHECK(arena.deallocate(b) == Status::double_free);
  CHECK(arena.deallocate(a) == Status::double_free);
}

TEST_CASE("owns and find answer for any address inside a region", "[arena]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  CHECK_FALSE(arena.owns(FakeRegionSource::kBase));  // nothing reserved yet
  CHECK_FALSE(arena.find(FakeRegionSource::kBase));
  const std::uintptr_t a = must_allocate(arena, 1000);
  const std::uintptr_t b = must_allocate(arena, 3000);
  CHECK(arena.owns(a));
  CHECK(arena.owns(a + kMiB - 1));
  CHECK_FALSE(arena.owns(a + kMiB));
  const auto inner = arena.find(b + 2999);
  REQUIRE(inner);
  CHECK(inner->base == b);
  CHECK(inner->size == 3072);
  CHECK(inner->requested == 3000);
  CHECK(inner->region.base == a);
  CHECK(inner->region.size == kMiB);
  const auto tail = arena.find(a + kMiB - 1);
  REQUIRE(tail);
  CHECK_FALSE(tail->in_use);
  CHECK(tail->base == b + 3072);
}

TEST_CASE("stats track use, peaks and fragmentation", "[arena][stats]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t a = must_allocate(arena, 1000);   // 1024
  const std::uintptr_t b = must_allocate(arena, 10000);  // 10240
  must_allocate(arena, 256);
  ArenaStats stats = arena.stats();
  CHECK(stats.num_allocs == 3);
  CHECK(stats.bytes_in_use == 1024 + 10240 + 256);
  CHECK(stats.bytes_requested == 1000 + 10000 + 256);
  CHECK(stats.largest_alloc_size == 10240);
  CHECK(stats.bytes_limit == kMiB);
  CHECK(stats.bytes_reserved == kMiB);
  CHECK(stats.peak_bytes_reserved == kMiB);
  CHECK(stats.regions == 1);
  CHECK(stats.region_reservations == 1);
  CHECK(stats.largest_free_block == kMiB - stats.bytes_in_use);
  CHECK(stats.fragmentation == 0.0);
  CHECK(arena.available() == kMiB - stats.bytes_in_use);

  must_free(arena, b);
  must_free(arena, a);
  stats = arena.stats();
  CHECK(stats.bytes_in_use == 256);
  CHECK(stats.bytes_requested == 256);
  CHECK(stats.peak_bytes_in_use == 1024 + 10240 + 256);
  CHECK(stats.num_allocs == 3);
  // Free: 11264 before the guard, the tail after it; the tail is the largest.
  const std::size_t tail = kMiB - 11264 - 256;
  CHECK(stats.largest_free_block == tail);
  CHECK(stats.fragmentation == Approx(11264.0 / (11264.0 + tail)));
  CHECK(stats.bytes_in_use <= stats.bytes_reserved);
  CHECK(stats.bytes_reserved <= stats.bytes_limit);
}

TEST_CASE("host memory: blocks can be written and read back without overlap", "[arena][host]") {
  HostRegionSource source;
  BfcArena arena(source, preallocated(4 * kMiB));
  std::vector<std::pair<std::uintptr_t, std::size_t>> blocks;
  for (std::size_t index = 0; index < 200; ++index) {
    const std::size_t bytes = 100 + index * 97;
    const std::uintptr_t ptr = must_allocate(arena, bytes);
    std::memset(reinterpret_cast<void*>(ptr), static_cast<int>(index & 0xff), bytes);
    blocks.emplace_back(ptr, bytes);
  }
  for (std::size_t index = 0; index < blocks.size(); ++index) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(blocks[index].first);
    for (std::size_t offset = 0; offset < blocks[index].second; ++offset) {
      if (bytes[offset] != (index & 0xff)) FAIL("block " << index << " overwritten at " << offset);
    }
  }
  for (const auto& block : blocks) must_free(arena, block.first);
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(arena.stats().chunks == 1);
}

TEST_CASE("largest_alloc_size is the largest chunk handed out, waste included (as XLA)", "[arena][stats]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  must_allocate(arena, 300 * kKiB);                            // split off the region
  const std::uintptr_t whole = must_allocate(arena, 500 * kKiB);  // 724 KiB < 2 * 500 KiB: served whole
  CHECK(chunk_size(arena, whole) == kMiB - 300 * kKiB);
  CHECK(arena.stats().largest_alloc_size == kMiB - 300 * kKiB);
}
