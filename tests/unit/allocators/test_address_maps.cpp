// The two address maps over ProbingTable: PointerMap (whole addresses in the slots) against a
// reference map under churn, and ChunkMap (32-bit fingerprints confirmed against the chunk records)
// on addresses whose fingerprints collide. Also the requested byte count an in-use record packs into
// its link fields, above 4 GiB.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "arena_test_support.h"
#include "chunk_map.h"
#include "chunk_store.h"
#include "pointer_map.h"

using namespace gpumem::detail;

namespace {

// A granule count d whose address hash x is below 2^24: then the granules d, 2d, ... 9d hash to
// k * x < 2^28 and share the top 32 bits (fingerprint 0). Search d = x * K^-1 mod 2^64 over small x
// until 9d still fits in an address (d < 2^48 granules).
std::uint64_t colliding_granule_step() {
  std::uint64_t inverse = 1;  // Newton's iteration for the inverse of the odd multiplier mod 2^64
  const std::uint64_t multiplier = address_hash(std::uintptr_t{1} << 8);
  for (int round = 0; round < 6; ++round) inverse *= 2 - multiplier * inverse;
  REQUIRE(multiplier * inverse == 1);
  for (std::uint64_t x = 1; x < (std::uint64_t{1} << 24); ++x) {
    const std::uint64_t granules = x * inverse;
    if (granules != 0 && granules < (std::uint64_t{1} << 48)) return granules;
  }
  FAIL("no colliding step found");
  return 0;
}

}  // namespace

TEST_CASE("ChunkMap tells apart chunks whose fingerprints collide", "[address_map]") {
  const std::uint64_t step = colliding_granule_step();
  ChunkStore store;
  ChunkMap map;
  std::vector<ChunkHandle> handles;
  REQUIRE(store.reserve(8));
  for (std::uint64_t k = 1; k <= 8; ++k) {
    const std::uintptr_t base = static_cast<std::uintptr_t>(k * step) << 8;
    REQUIRE(address_hash(base) >> 32 == 0);  // the same fingerprint for all eight
    const ChunkHandle handle = store.create();
    store[handle].base = base;
    store[handle].size = 256;
    store.set_state(handle, ChunkState::in_use);
    REQUIRE(map.reserve_one());
    map.insert(base, handle);
    handles.push_back(handle);
  }
  for (std::size_t k = 0; k < handles.size(); ++k) CHECK(map.find(store, store[handles[k]].base) == handles[k]);
  // An address with the same fingerprint that starts no chunk is not found.
  CHECK(map.find(store, static_cast<std::uintptr_t>(9 * step) << 8) == kNoChunk);
  // Erasing from the middle of the probe run keeps the others reachable (backward shift).
  CHECK(map.erase(store, store[handles[3]].base) == handles[3]);
  CHECK(map.erase(store, store[handles[3]].base) == kNoChunk);
  CHECK(map.size() == 7);
  for (std::size_t k = 0; k < handles.size(); ++k) {
    CHECK(map.find(store, store[handles[k]].base) == (k == 3 ? kNoChunk : handles[k]));
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
  gpumem::test::must_free(arena, ptr);
  CHECK(arena.stats().bytes_requested == 0);
  CHECK(arena.find(ptr)->requested == 0);
  CHECK(arena.validate());
}
