// Running out of host memory: the arena's own allocations (chunk records, their overflow map, fence
// queues, region records) are made to fail one after another, and every failure must surface as
// Status::out_of_memory with the arena exactly as it was. This binary replaces the global operator
// new so that the n-th allocation from now on, and every later one, throws std::bad_alloc.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "arena_test_support.h"
#include "chunk_store.h"
#include "pointer_map.h"

using namespace gpumem;
using namespace gpumem::test;

namespace {

// Allocations still allowed before operator new starts failing; negative: never fail.
std::atomic<long> g_allocations_left{-1};
std::atomic<bool> g_failure_injected{false};

void* allocate_or_fail(std::size_t size, std::size_t alignment) {
  long left = g_allocations_left.load();
  while (left >= 0) {
    if (left == 0) {
      g_failure_injected = true;
      throw std::bad_alloc();
    }
    if (g_allocations_left.compare_exchange_weak(left, left - 1)) break;
  }
  void* memory = nullptr;
  if (posix_memalign(&memory, std::max(alignment, alignof(std::max_align_t)), size == 0 ? 1 : size) != 0) {
    throw std::bad_alloc();
  }
  return memory;
}

}  // namespace

// Every form is replaced, so that no allocation pairs a sanitizer's operator new with this free().
void* operator new(std::size_t size) { return allocate_or_fail(size, 0); }
void* operator new[](std::size_t size) { return allocate_or_fail(size, 0); }
void* operator new(std::size_t size, std::align_val_t alignment) {
  return allocate_or_fail(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return allocate_or_fail(size, static_cast<std::size_t>(alignment));
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate_or_fail(size, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  try {
    return allocate_or_fail(size, static_cast<std::size_t>(alignment));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t& tag) noexcept {
  return operator new(size, alignment, tag);
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, const std::nothrow_t&) noexcept { std::free(memory); }
void operator delete[](void* memory, const std::nothrow_t&) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t, const std::nothrow_t&) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t, const std::nothrow_t&) noexcept { std::free(memory); }

namespace {

// What must not change when an operation fails for want of host memory. region_refusals may: a
// source that throws counts as refusing.
struct Snapshot {
  ArenaStats stats;
  std::vector<OomReport::Bin> bins;
  std::vector<OomReport::InUseSize> in_use_by_size;
  std::string occupancy;
  std::size_t source_live_bytes = 0;
};

Snapshot snapshot(const BfcArena& arena, const FakeRegionSource& source) {
  const OomReport report = arena.oom_report(0);
  return Snapshot{report.stats, report.bins, report.in_use_by_size, report.occupancy, source.log().live_bytes};
}

void require_unchanged(const Snapshot& before, const Snapshot& after) {
  const ArenaStats& a = before.stats;
  const ArenaStats& b = after.stats;
  REQUIRE(b.num_allocs == a.num_allocs);
  REQUIRE(b.bytes_in_use == a.bytes_in_use);
  REQUIRE(b.bytes_requested == a.bytes_requested);
  REQUIRE(b.largest_alloc_size == a.largest_alloc_size);
  REQUIRE(b.bytes_reserved == a.bytes_reserved);
  REQUIRE(b.largest_free_block == a.largest_free_block);
  REQUIRE(b.bytes_fenced == a.bytes_fenced);
  REQUIRE(b.regions == a.regions);
  REQUIRE(b.region_reservations == a.region_reservations);
  REQUIRE(b.region_releases == a.region_releases);
  REQUIRE(b.chunks == a.chunks);
  REQUIRE(after.bins.size() == before.bins.size());
  for (std::size_t index = 0; index < before.bins.size(); ++index) {
    REQUIRE(after.bins[index].total_chunks == before.bins[index].total_chunks);
    REQUIRE(after.bins[index].free_bytes == before.bins[index].free_bytes);
  }
  REQUIRE(after.in_use_by_size.size() == before.in_use_by_size.size());
  REQUIRE(after.occupancy == before.occupancy);
  REQUIRE(after.source_live_bytes == before.source_live_bytes);  // no region reserved and dropped
}

struct Outcome {
  Status status = Status::ok;
  int injected_failures = 0;  // attempts that hit an injected failure before one went through
};

// Runs `operation` with host allocation n failing, for n = 0, 1, ... until an attempt hits no
// injected failure; each attempt that did must have failed cleanly.
template <typename Operation>
Outcome run_until_it_fits(BfcArena& arena, const FakeRegionSource& source, Operation operation) {
  for (long allowed = 0;; ++allowed) {
    const Snapshot before = snapshot(arena, source);
    g_failure_injected = false;
    g_allocations_left = allowed;
    const Status status = operation();
    g_allocations_left = -1;
    if (!g_failure_injected) return Outcome{status, static_cast<int>(allowed)};
    INFO("allocation " << allowed << " failed; status " << to_string(status));
    // A throwing source counts as a refusal, so with fenced chunks around the answer is to resolve.
    REQUIRE((status == Status::out_of_memory || status == Status::fences_pending));
    REQUIRE(arena.validate());
    require_unchanged(before, snapshot(arena, source));
  }
}

}  // namespace

TEST_CASE("running out of host memory at any allocation leaves the arena as it was", "[arena][host_oom]") {
  FakeRegionSource source;
  ArenaOptions options = growing(std::size_t{1} << 32);
  options.min_growth_bytes = 64 * kKiB;  // many regions: region records grow too
  BfcArena arena(source, options);
  std::mt19937_64 rng(7);
  std::vector<std::uintptr_t> live;
  FenceId next_fence = 1;
  int failed_allocations = 0, failed_frees = 0;
  // Enough live blocks to outgrow the initial record table (1024 slots, so 819 records), and
  // enough streams to outgrow the initial fence queues.
  constexpr std::size_t kTargetLive = 1500;
  for (int step = 0; step < 6000; ++step) {
    const bool allocate = live.empty() || rng() % 100 < (live.size() < kTargetLive ? 75u : 45u);
    if (allocate) {
      const std::size_t bytes = 1 + rng() % (64 * kKiB);
      const std::uintptr_t stream = rng() % 2 == 0 ? 0 : 1 + rng() % 64;
      std::uintptr_t ptr = 0;
      const Outcome outcome = run_until_it_fits(arena, source, [&] { return arena.allocate(bytes, ptr, stream); });
      REQUIRE(to_string(outcome.status) == std::string("ok"));
      live.push_back(ptr);
      failed_allocations += outcome.injected_failures;
    } else {
      const std::size_t index = rng() % live.size();
      const std::uintptr_t ptr = live[index];
      const Fence fence = rng() % 3 == 0 ? Fence{next_fence++, 1 + rng() % 64} : Fence{};
      const Outcome outcome = run_until_it_fits(arena, source, [&] { return arena.deallocate(ptr, fence); });
      REQUIRE(to_string(outcome.status) == std::string("ok"));
      live[index] = live.back();
      live.pop_back();
      failed_frees += outcome.injected_failures;
    }
    if (step % 500 == 499) arena.resolve_fences_through(next_fence - 1);  // drops the emptied queues
  }
  // Each kind of growth was reached and failed at least once.
  CHECK(failed_allocations > 0);
  CHECK(failed_frees > 0);
  CHECK(arena.stats().regions > 8);
  CHECK(arena.stats().chunks > 1024);
  for (const std::uintptr_t ptr : live) must_free(arena, ptr);
  arena.resolve_fences_through(next_fence);
  CHECK(arena.stats().bytes_in_use == 0);
  CHECK(arena.validate());
}

TEST_CASE("a fenced free that cannot get a queue keeps the block allocated", "[arena][host_oom]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  const std::uintptr_t guard = must_allocate(arena, 256);  // the first fence makes the queue vector
  must_free(arena, guard, Fence{1, 1});
  std::vector<std::uintptr_t> blocks;
  for (int index = 0; index < 64; ++index) blocks.push_back(must_allocate(arena, 1024));
  // Fence on new streams until a queue vector growth fails.
  Status status = Status::ok;
  std::uintptr_t stream = 2;
  for (const std::uintptr_t block : blocks) {
    g_failure_injected = false;
    g_allocations_left = 0;
    status = arena.deallocate(block, Fence{stream + 1, stream});
    g_allocations_left = -1;
    if (g_failure_injected) {
      CHECK(to_string(status) == std::string("out_of_memory"));
      const auto info = arena.find(block);
      REQUIRE(info);
      CHECK(info->in_use);
      CHECK(arena.validate());
      must_free(arena, block, Fence{stream + 1, stream});  // with memory, the same free succeeds
      break;
    }
    REQUIRE(to_string(status) == std::string("ok"));
    ++stream;
  }
  CHECK(to_string(status) == std::string("out_of_memory"));
  CHECK(arena.validate());
}

TEST_CASE("a record table that cannot grow is left exactly as it was", "[chunk_store][host_oom]") {
  using namespace gpumem::detail;
  // 100 records sharing both buckets of the initial table (most in the stash, named by the overflow
  // map) and 600 spread ones: growing then moves buckets, stash and map, and every allocation on the
  // way is made to fail in turn.
  std::mt19937_64 rng(17);
  std::vector<std::uintptr_t> bases;
  while (bases.size() < 100) {
    const std::uintptr_t base = ((rng() >> 24) + 1) << 8;
    if (address_hash(base) >> 56 == 0 && second_address_hash(base) >> 56 == 0) bases.push_back(base);
  }
  while (bases.size() < 700) bases.push_back(((rng() >> 24) + 1) << 8);
  ChunkStore store(1024);  // 700 records fit it; 900 do not
  std::vector<ChunkHandle> handles;
  for (const std::uintptr_t base : bases) {
    REQUIRE(store.reserve(1) == ChunkStore::Reserve::ready);
    handles.push_back(store.create(base, ChunkState::in_use));
  }
  const std::size_t stashed = store.overflowed();
  REQUIRE(stashed > 50);
  int failures = 0;
  for (long allowed = 0;; ++allowed) {
    g_failure_injected = false;
    g_allocations_left = allowed;
    const ChunkStore::Reserve reserved = store.reserve(200);  // 900 records need a bigger table
    g_allocations_left = -1;
    if (reserved == ChunkStore::Reserve::relocated) break;
    REQUIRE(reserved == ChunkStore::Reserve::no_memory);
    REQUIRE(g_failure_injected);
    ++failures;
    REQUIRE(store.validate());
    REQUIRE(store.live() == bases.size());
    REQUIRE(store.overflowed() == stashed);
    for (std::size_t k = 0; k < bases.size(); ++k) REQUIRE(store.find(bases[k]) == handles[k]);
  }
  CHECK(failures >= 5);  // the four arrays, the stash's map and the translation table at least
  for (std::size_t k = 0; k < bases.size(); ++k) CHECK(store.find(bases[k]) == store.relocated(handles[k]));
  store.end_relocation();
  CHECK(store.validate());
}

TEST_CASE("a PointerMap that cannot grow is left exactly as it was", "[pointer_map][host_oom]") {
  gpumem::detail::PointerMap map;
  for (std::uintptr_t key = 1; key <= 500; ++key) {
    REQUIRE(map.reserve_one());
    map.insert(key << 8, static_cast<gpumem::detail::ChunkHandle>(key));
  }
  g_failure_injected = false;
  g_allocations_left = 0;
  const bool reserved = map.reserve(100);  // 600 keys need more than 1024 slots
  g_allocations_left = -1;
  CHECK_FALSE(reserved);
  CHECK(g_failure_injected);
  CHECK(map.size() == 500);
  for (std::uintptr_t key = 1; key <= 500; ++key) CHECK(map.find(key << 8) == key);
  CHECK(map.reserve(100));
}
