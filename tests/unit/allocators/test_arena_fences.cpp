// Fences: freed memory is not reused until its fence is resolved (or reused on the same stream).
#include "arena_test_support.h"

using namespace gpumem;
using namespace gpumem::test;

TEST_CASE("a fenced chunk is not reused before its fence is resolved", "[fence]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t a = must_allocate(arena, 4 * kKiB);
  must_free(arena, a, Fence{1, 0});
  CHECK(arena.has_pending_fences());
  CHECK(arena.stats().bytes_fenced == 4 * kKiB);
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(arena.available() == kMiB);  // fenced bytes count as free for reporting
  const std::uintptr_t b = must_allocate(arena, 4 * kKiB);
  CHECK(b != a);
  CHECK_FALSE(arena.find(a)->in_use);
  CHECK(arena.validate());
}

TEST_CASE("fences_pending when only fenced memory could serve; resolving frees it", "[fence]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t a = must_allocate(arena, kMiB / 2);
  must_allocate(arena, kMiB / 2);
  must_free(arena, a, Fence{1, 0});
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kMiB / 4, ptr) == Status::fences_pending);
  arena.resolve_fences_through(1);
  CHECK_FALSE(arena.has_pending_fences());
  CHECK(arena.stats().bytes_fenced == 0);
  CHECK(must_allocate(arena, kMiB / 4) == a);
  CHECK(arena.validate());
}

TEST_CASE("out_of_memory rather than fences_pending when nothing is fenced", "[fence]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  must_allocate(arena, kMiB);
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(256, ptr) == Status::out_of_memory);
}

TEST_CASE("fenced chunks do not coalesce until resolved, then do", "[fence][coalesce]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t a = must_allocate(arena, 1 * kKiB);
  const std::uintptr_t b = must_allocate(arena, 2 * kKiB);
  const std::uintptr_t c = must_allocate(arena, 4 * kKiB);
  must_allocate(arena, 256);  // guard against the free tail
  must_free(arena, a);
  must_free(arena, b, Fence{5, 0});
  must_free(arena, c);
  CHECK(chunk_size(arena, a) == 1 * kKiB);
  CHECK(chunk_size(arena, b) == 2 * kKiB);
  CHECK(chunk_size(arena, c) == 4 * kKiB);
  arena.resolve_fences_through(4);  // not yet
  CHECK(chunk_size(arena, b) == 2 * kKiB);
  arena.resolve_fences_through(5);
  CHECK(chunk_size(arena, a) == 7 * kKiB);
  CHECK(chunk_size(arena, b) == 0);
  CHECK(arena.validate());
}

TEST_CASE("resolve_fences_through resolves a prefix of the fence ids", "[fence]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  std::vector<std::uintptr_t> blocks;
  for (int index = 0; index < 6; ++index) blocks.push_back(must_allocate(arena, kKiB));
  must_allocate(arena, 256);
  // Ids 1..6 over two streams, one pair arriving out of order.
  const FenceId ids[] = {1, 3, 2, 4, 6, 5};
  for (int index = 0; index < 6; ++index) {
    must_free(arena, blocks[static_cast<std::size_t>(index)], Fence{ids[index], index % 2 == 0 ? 0u : 77u});
  }
  CHECK(arena.stats().bytes_fenced == 6 * kKiB);
  arena.resolve_fences_through(3);
  CHECK(arena.stats().bytes_fenced == 3 * kKiB);  // ids 4, 5, 6 remain
  CHECK(arena.validate());
  arena.resolve_fences_through(6);
  CHECK(arena.stats().bytes_fenced == 0);
  CHECK(arena.stats().chunks == 3);  // the six blocks merged; the guard; the tail
  CHECK(arena.validate());
}

TEST_CASE("a chunk fenced on stream S is reused at once on S, and only on S", "[fence][stream]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t stream = 0x5000, other = 0x6000;
  const std::uintptr_t a = must_allocate(arena, kMiB / 2);
  must_allocate(arena, kMiB / 2);
  must_free(arena, a, Fence{1, stream});
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kMiB / 2, ptr, other) == Status::fences_pending);
  CHECK(arena.allocate(kMiB / 2, ptr) == Status::fences_pending);  // stream 0 is no ordering domain
  CHECK(must_allocate(arena, kMiB / 2, stream) == a);
  CHECK_FALSE(arena.has_pending_fences());
  CHECK(arena.validate());
}

TEST_CASE("same-stream reuse splits and the rest keeps the fence", "[fence][stream]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t stream = 0x5000;
  const std::uintptr_t a = must_allocate(arena, kMiB / 2);
  must_allocate(arena, kMiB / 2);
  must_free(arena, a, Fence{9, stream});
  CHECK(must_allocate(arena, 64 * kKiB, stream) == a);
  CHECK(arena.stats().bytes_fenced == kMiB / 2 - 64 * kKiB);
  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(64 * kKiB, ptr, 0x7000) == Status::fences_pending);
  CHECK(must_allocate(arena, 64 * kKiB, stream) == a + 64 * kKiB);
  arena.resolve_fences_through(9);
  CHECK(arena.stats().bytes_fenced == 0);
  CHECK(arena.stats().largest_free_block == kMiB / 2 - 128 * kKiB);
  CHECK(arena.validate());
}

TEST_CASE("same-stream reuse picks the best fit among the stream's chunks", "[fence][stream]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t stream = 0x5000;
  const std::uintptr_t big = allocate_guarded(arena, 64 * kKiB);
  const std::uintptr_t small = must_allocate(arena, 8 * kKiB);
  must_allocate(arena, kMiB - 64 * kKiB - 8 * kKiB - 256);  // fill the rest
  must_free(arena, big, Fence{1, stream});
  must_free(arena, small, Fence{2, stream});
  CHECK(must_allocate(arena, 6 * kKiB, stream) == small);
}

TEST_CASE("the oracle is consulted on a miss, oldest fences first", "[fence][oracle]") {
  FakeRegionSource source;
  ThresholdOracle oracle;
  BfcArena arena(source, preallocated(kMiB), &oracle);
  std::vector<std::uintptr_t> blocks;
  for (int index = 0; index < 4; ++index) blocks.push_back(must_allocate(arena, kMiB / 4));
  for (FenceId id = 1; id <= 4; ++id) must_free(arena, blocks[id - 1], Fence{id, 0});
  CHECK(oracle.asked.empty());  // frees never ask

  std::uintptr_t ptr = 0;
  CHECK(arena.allocate(kKiB, ptr) == Status::fences_pending);
  CHECK(oracle.asked == std::vector<FenceId>{1});  // stops at the first unresolved fence

  oracle.asked.clear();
  oracle.resolved_through = 2;
  CHECK(must_allocate(arena, kKiB) == blocks[0]);
  CHECK(oracle.asked == std::vector<FenceId>{1, 2, 3});
  CHECK(arena.stats().bytes_fenced == kMiB / 2);
  // Blocks 0 and 1 coalesced once resolved; the 1 KiB allocation was split from them.
  CHECK(chunk_size(arena, blocks[0] + kKiB) == kMiB / 2 - kKiB);

  oracle.asked.clear();
  must_allocate(arena, 256);  // served from free memory: the oracle is not asked
  CHECK(oracle.asked.empty());
  CHECK(arena.validate());
}

TEST_CASE("a fenced chunk cannot be freed again", "[fence][bad_free]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t a = must_allocate(arena, kKiB);
  must_free(arena, a, Fence{1, 0});
  CHECK(arena.deallocate(a) == Status::double_free);
  CHECK(arena.deallocate(a, Fence{2, 0}) == Status::double_free);
  CHECK(arena.stats().bytes_fenced == kKiB);
  CHECK(arena.validate());
}

TEST_CASE("garbage collection keeps regions holding fenced chunks", "[fence][gc]") {
  FakeRegionSource source;
  BfcArena arena(source, growing(64 * kMiB));
  const std::uintptr_t a = must_allocate(arena, 2 * kMiB);
  must_free(arena, a, Fence{1, 0});
  CHECK(arena.release_free_regions() == 0);
  arena.resolve_fences_through(1);
  CHECK(arena.release_free_regions() == 2 * kMiB);
}

TEST_CASE("find tells a block allocated with a stream from one allocated without", "[fence][stream]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t plain = must_allocate(arena, 4 * kKiB);
  std::uintptr_t ordered = 0;
  REQUIRE(arena.allocate(6 * kKiB + 1, ordered, /*stream=*/7) == Status::ok);
  CHECK_FALSE(arena.find(plain)->ordered);
  CHECK(arena.find(ordered)->ordered);
  CHECK(arena.find(ordered)->requested == 6 * kKiB + 1);  // the flag leaves the count alone
  // Reused by a synchronous allocation after a free on the stream, the chunk is plain again.
  must_free(arena, ordered, Fence{1, 7});
  arena.resolve_fences_through(1);
  const std::uintptr_t again = must_allocate(arena, 6 * kKiB);
  CHECK(again == ordered);
  CHECK_FALSE(arena.find(again)->ordered);
  CHECK_FALSE(arena.find(plain + kMiB / 2)->ordered);  // free space
  CHECK(arena.validate());
}
