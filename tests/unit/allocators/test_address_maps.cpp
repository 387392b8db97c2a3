// Finding things by address: the chunk records' own placement by address (ChunkStore) on addresses
// that share a bucket, through overflow and rehashing; PointerMap against a reference map under
// churn. Also the requested byte count an in-use record packs into its link fields, above 4 GiB.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "arena_test_support.h"
#include "chunk_store.h"
#include "pointer_map.h"

using namespace gpumem::detail;

namespace {

// `count` random chunk bases (256-aligned, non-zero) for which `wanted` holds.
template <typename Wanted>
std::vector<std::uintptr_t> bases_where(std::uint64_t seed, std::size_t count, Wanted wanted) {
  std::mt19937_64 rng(seed);
  std::vector<std::uintptr_t> bases;
  while (bases.size() < count) {
    const std::uintptr_t base = ((rng() >> 24) + 1) << 8;
    if (wanted(base)) bases.push_back(base);
  }
  return bases;
}

}  // namespace

TEST_CASE("ChunkStore finds records whose buckets are full, and keeps finding them as it grows", "[address_map]") {
  // 600 chunks whose first bucket is bucket 0 in the initial table (the top 8 bits of the address
  // hash are 0): bucket 0 holds three (slot 0 is never used), so nearly all go to their second
  // bucket, and some of those overflow into the stash.
  const std::vector<std::uintptr_t> bases =
      bases_where(11, 600, [](std::uintptr_t base) { return address_hash(base) >> 56 == 0; });
  ChunkStore store(1024);
  std::vector<ChunkHandle> handles;
  for (const std::uintptr_t base : bases) {
    REQUIRE(store.reserve(1) == ChunkStore::Reserve::ready);  // 600 fit 1024 slots and the stash
    handles.push_back(store.create(base, ChunkState::in_use));
  }
  REQUIRE(store.overflowed() > 0);
  CHECK(store.validate());
  for (std::size_t k = 0; k < bases.size(); ++k) CHECK(store.find(bases[k]) == handles[k]);
  CHECK(store.find(bases[0] + 256) == kNoChunk);  // no chunk starts there
  CHECK(store.find(0) == kNoChunk);

  // Freeing a record in its bucket and an overflowed one: both are forgotten, the rest still found.
  std::size_t in_bucket = 0, overflowed = 0;
  while (store.in_overflow(handles[in_bucket])) ++in_bucket;
  while (!store.in_overflow(handles[overflowed])) ++overflowed;
  const std::size_t overflow_before = store.overflowed();
  store.destroy(handles[in_bucket]);
  store.destroy(handles[overflowed]);
  CHECK(store.overflowed() == overflow_before - 1);
  CHECK(store.find(bases[in_bucket]) == kNoChunk);
  CHECK(store.find(bases[overflowed]) == kNoChunk);
  CHECK(store.validate());

  // Growing past the load limit rehashes: handles change, relocated() says how, links follow.
  std::vector<std::size_t> kept;  // two records still live, linked to each other
  for (std::size_t k = 0; kept.size() < 2; ++k) {
    if (k != in_bucket && k != overflowed) kept.push_back(k);
  }
  store[handles[kept[0]]].next = handles[kept[1]];
  store.set_prev(handles[kept[1]], handles[kept[0]]);
  std::vector<ChunkHandle> filler;
  std::size_t relocations = 0;
  for (std::uintptr_t base = std::uintptr_t{1} << 44; store.live() < 3 * 1024;
       base += 256) {
    const ChunkStore::Reserve reserved = store.reserve(1);
    REQUIRE(reserved != ChunkStore::Reserve::no_memory);
    if (reserved == ChunkStore::Reserve::relocated) {
      ++relocations;
      for (ChunkHandle& handle : handles) handle = store.relocated(handle);
      for (ChunkHandle& handle : filler) handle = store.relocated(handle);
      store.end_relocation();
    }
    filler.push_back(store.create(base, ChunkState::free));
  }
  CHECK(relocations == 2);  // 3072 live records need 4096 slots: 1024 -> 2048 -> 4096
  CHECK(store.validate());
  for (std::size_t k = 0; k < bases.size(); ++k) {
    if (k == in_bucket || k == overflowed) continue;
    CHECK(store.find(bases[k]) == handles[k]);
    CHECK(store[handles[k]].base == bases[k]);
  }
  CHECK(store[handles[kept[0]]].next == handles[kept[1]]);
  CHECK(store.prev(handles[kept[1]]) == handles[kept[0]]);
}

TEST_CASE("a full stash grows the table, however low the load", "[address_map]") {
  // 200 chunks whose two buckets are the same two in the initial table (both hashes start with 8 zero
  // bits): 7 fit there, the stash (128 slots) cannot take the rest, so the table must grow, though
  // 200 records are far below its load limit, until the bigger tables spread them.
  const std::vector<std::uintptr_t> bases = bases_where(13, 200, [](std::uintptr_t base) {
    return address_hash(base) >> 56 == 0 && second_address_hash(base) >> 56 == 0;
  });
  ChunkStore store;
  std::vector<ChunkHandle> handles;
  std::size_t relocations = 0;
  for (const std::uintptr_t base : bases) {
    const ChunkStore::Reserve reserved = store.reserve(1);
    REQUIRE(reserved != ChunkStore::Reserve::no_memory);
    if (reserved == ChunkStore::Reserve::relocated) {
      ++relocations;
      for (ChunkHandle& handle : handles) handle = store.relocated(handle);
      store.end_relocation();
    }
    handles.push_back(store.create(base, ChunkState::free));
  }
  CHECK(relocations > 0);
  CHECK(store.validate());
  for (std::size_t k = 0; k < bases.size(); ++k) CHECK(store.find(bases[k]) == handles[k]);
}

TEST_CASE("ChunkStore tells apart records whose first buckets are the same", "[address_map]") {
  // In a 1024-slot table a record's first bucket is the top 8 bits of its address hash: 12 chunks
  // with 16 zero bits there share it (and more), so every lookup among them meets other chunks, and
  // some sit in their second buckets or the stash.
  std::vector<std::uintptr_t> bases =
      bases_where(17, 13, [](std::uintptr_t base) { return address_hash(base) >> 48 == 0; });
  const std::uintptr_t absent = bases.back();  // same first bucket, never created
  bases.pop_back();
  ChunkStore store(1024);
  std::vector<ChunkHandle> handles;
  for (const std::uintptr_t base : bases) {
    REQUIRE(store.reserve(1) == ChunkStore::Reserve::ready);
    handles.push_back(store.create(base, ChunkState::in_use));
  }
  CHECK(store.validate());
  for (std::size_t k = 0; k < bases.size(); ++k) CHECK(store.find(bases[k]) == handles[k]);
  CHECK(store.find(absent) == kNoChunk);
  // A destroyed record is no longer found; the others still are.
  store.destroy(handles[0]);
  CHECK(store.find(bases[0]) == kNoChunk);
  for (std::size_t k = 1; k < bases.size(); ++k) CHECK(store.find(bases[k]) == handles[k]);
  CHECK(store.validate());
}

TEST_CASE("a table large enough for huge pages holds and finds its records", "[address_map]") {
  // 2^17 bucketed slots: 4.5 MiB of records, so the records come from HugePageAllocator's mapping;
  // growing rehashes into a bigger mapping and gives the old one back.
  ChunkStore store(std::size_t{1} << 17);
  std::vector<std::uintptr_t> bases;
  std::vector<ChunkHandle> handles;
  for (std::uintptr_t base = std::uintptr_t{1} << 40; bases.size() < 110'000; base += 4096) {
    const ChunkStore::Reserve reserved = store.reserve(1);
    REQUIRE(reserved != ChunkStore::Reserve::no_memory);
    if (reserved == ChunkStore::Reserve::relocated) {
      for (ChunkHandle& handle : handles) handle = store.relocated(handle);
      store.end_relocation();
    }
    bases.push_back(base);
    handles.push_back(store.create(base, ChunkState::in_use));
  }
  CHECK(store.validate());
  for (std::size_t k = 0; k < bases.size(); k += 7) CHECK(store.find(bases[k]) == handles[k]);

  HugePageVector<std::uint64_t> values(std::size_t{3} << 18, 7);  // 6 MiB
  CHECK(reinterpret_cast<std::uintptr_t>(values.data()) % kHugePageBytes == 0);
  values.resize(values.size() + 1, 9);
  CHECK(values.front() == 7);
  CHECK(values.back() == 9);
}

TEST_CASE("ChunkStore::validate catches a misplaced record, a stale slot and a stray fence", "[address_map]") {
  ChunkStore store;
  REQUIRE(store.reserve(2) == ChunkStore::Reserve::ready);
  const ChunkHandle live = store.create(std::uintptr_t{1} << 20, ChunkState::free);
  const ChunkHandle gone = store.create(std::uintptr_t{2} << 20, ChunkState::free);
  store.destroy(gone);
  REQUIRE(store.validate());
  SECTION("a live record whose base is not where its buckets are") {
    store[live].base += 256;
    CHECK_FALSE(store.validate());
  }
  SECTION("an unused slot that still names a chunk") {
    store[gone].base = std::uintptr_t{2} << 20;
    CHECK_FALSE(store.validate());
  }
  SECTION("a fence on a chunk that is not fenced") {
    store.set_fence(live, gpumem::Fence{1, 0});
    CHECK_FALSE(store.validate());
  }
}

TEST_CASE("PointerMap agrees with a reference map under churn and growth", "[address_map]") {
  std::mt19937_64 rng(7);
  // Clustered keys make long probe runs, which exercise the backward shift across the table's end.
  std::uniform_int_distribution<std::uintptr_t> key_distribution(1, 1 << 16);
  PointerMap map;
  std::unordered_map<std::uintptr_t, ChunkHandle> model;
  for (int op = 0; op < 200'000; ++op) {
    const std::uintptr_t key = key_distribution(rng) << 8;
    const auto found = model.find(key);
    if (found == model.end()) {
      REQUIRE(map.find(key) == kNoChunk);
      if (op % 3 == 0) continue;  // lookups of absent keys as well
      REQUIRE(map.reserve_one());
      const auto value = static_cast<ChunkHandle>(op + 1);
      map.insert(key, value);
      model.emplace(key, value);
    } else {
      REQUIRE(map.find(key) == found->second);
      REQUIRE(map.erase(key) == found->second);
      model.erase(found);
    }
    REQUIRE(map.size() == model.size());
  }
  for (const auto& [key, value] : model) CHECK(map.find(key) == value);
  CHECK(map.find(0) == kNoChunk);
  CHECK(map.erase(0) == kNoChunk);
}

TEST_CASE("an in-use chunk keeps a requested size above 4 GiB", "[address_map][arena]") {
  gpumem::FakeRegionSource source;
  gpumem::BfcArena arena(source, gpumem::test::preallocated(std::size_t{1} << 40));
  const std::size_t requested = (std::size_t{5} << 30) + 1;
  const std::uintptr_t ptr = gpumem::test::must_allocate(arena, requested);
  const auto info = arena.find(ptr);
  REQUIRE(info);
  CHECK(info->requested == requested);
  CHECK(arena.stats().bytes_requested == requested);
  CHECK(arena.validate());
  // Enough blocks after it to grow the record table: the count moves with the record.
  std::vector<std::uintptr_t> small;
  for (int index = 0; index < 2000; ++index) small.push_back(gpumem::test::must_allocate(arena, 256));
  CHECK(arena.find(ptr)->requested == requested);
  CHECK(arena.stats().bytes_requested == requested + 2000 * 256);
  for (const std::uintptr_t block : small) gpumem::test::must_free(arena, block);
  gpumem::test::must_free(arena, ptr);
  CHECK(arena.stats().bytes_requested == 0);
  CHECK(arena.find(ptr)->requested == 0);
  CHECK(arena.validate());
}

TEST_CASE("PointerMap::drain visits every entry once and leaves the map empty and usable", "[pointer_map]") {
  gpumem::detail::PointerMap map;
  REQUIRE(map.reserve(300));
  for (std::uintptr_t k = 1; k <= 300; ++k) map.insert(k << 12, static_cast<gpumem::detail::ChunkHandle>(k));
  std::uintptr_t key_sum = 0;
  std::size_t visits = 0;
  map.drain([&](std::uintptr_t key, gpumem::detail::ChunkHandle value) {
    CHECK(key == std::uintptr_t{value} << 12);
    key_sum += key >> 12;
    ++visits;
  });
  CHECK(visits == 300);
  CHECK(key_sum == 300 * 301 / 2);
  CHECK(map.size() == 0);
  CHECK(map.find(5 << 12) == gpumem::detail::kNoChunk);
  REQUIRE(map.reserve_one());
  map.insert(5 << 12, 9);
  CHECK(map.find(5 << 12) == 9);
}
