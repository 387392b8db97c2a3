// The free index's own checker: it walks only the non-empty size classes, and must still catch a
// broken treap in any of them.
#include <catch2/catch.hpp>

#include "chunk_store.h"
#include "free_index.h"

using namespace gpumem::detail;

namespace {

// Free chunks of the given sizes at consecutive addresses, all in `index`.
std::vector<ChunkHandle> fill(ChunkStore& store, FreeIndex& index, const std::vector<std::size_t>& sizes) {
  // A fresh store: should reserving rehash, no handle is held yet.
  REQUIRE(store.reserve(sizes.size()) != ChunkStore::Reserve::no_memory);
  std::vector<ChunkHandle> handles;
  std::uintptr_t base = std::uintptr_t{1} << 40;
  for (const std::size_t size : sizes) {
    const ChunkHandle handle = store.create(base, ChunkState::free);
    store[handle].size = size;
    index.insert(store, handle);
    handles.push_back(handle);
    base += size;
  }
  return handles;
}

}  // namespace

TEST_CASE("validate accepts a sound index and counts its chunks", "[free_index]") {
  ChunkStore store;
  FreeIndex index;
  std::vector<std::size_t> sizes;
  for (std::size_t units = 1; units <= 300; ++units) sizes.push_back(units * 256 * (units % 7 + 1));
  fill(store, index, sizes);
  std::size_t chunks = 0;
  CHECK(index.validate(store, chunks));
  CHECK(chunks == sizes.size());
  CHECK(index.count() == sizes.size());
}

TEST_CASE("validate catches a broken heap order, a wrong class and a stray state", "[free_index]") {
  ChunkStore store;
  FreeIndex index;
  // Many equal sizes: one class, one treap with children to break.
  const std::vector<ChunkHandle> handles = fill(store, index, std::vector<std::size_t>(64, 4096));
  std::size_t chunks = 0;
  REQUIRE(index.validate(store, chunks));

  ChunkHandle parent = kNoChunk;
  for (const ChunkHandle handle : handles) {
    if (store[handle].left != kNoChunk || store[handle].right != kNoChunk) parent = handle;
  }
  REQUIRE(parent != kNoChunk);
  const ChunkHandle child = store[parent].left != kNoChunk ? store[parent].left : store[parent].right;

  SECTION("a child whose priority beats its parent's") {
    store[child].priority = store[parent].priority + 1;
    if (store[child].priority == 0) store[parent].priority -= 1;  // wrapped: lower the parent instead
    CHECK_FALSE(index.validate(store, chunks));
  }
  SECTION("a node whose size belongs to another class") {
    store[child].size = 1 << 20;
    CHECK_FALSE(index.validate(store, chunks));
  }
  SECTION("a node that is no longer free") {
    store.set_state(child, ChunkState::in_use);
    CHECK_FALSE(index.validate(store, chunks));
  }
}

TEST_CASE("validate follows classes emptied and refilled", "[free_index]") {
  ChunkStore store;
  FreeIndex index;
  const std::vector<ChunkHandle> handles = fill(store, index, {256, 512, 4096, 4096, 1 << 20});
  std::size_t chunks = 0;
  for (const ChunkHandle handle : handles) {
    index.erase(store, handle);
    REQUIRE(index.validate(store, chunks));
  }
  CHECK(chunks == 0);
  CHECK(index.best_fit(store, 256) == kNoChunk);
  index.insert(store, handles[2]);
  REQUIRE(index.validate(store, chunks));
  CHECK(chunks == 1);
  CHECK(index.best_fit(store, 300) == handles[2]);
  CHECK(index.largest(store) == handles[2]);
}
