// The free index: every free, unfenced chunk, searchable for the best fit (smallest size, then
// lowest address) in O(log n) with no allocation. Sizes are split into the classes of size_class.h;
// each class is an intrusive treap keyed by (size, base) whose nodes are the chunk records
// themselves, and a bitmap of non-empty classes finds the next class with a chunk in O(1).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "chunk_store.h"
#include "size_class.h"

namespace gpumem::detail {

// Invariants: class c's treap holds exactly the free chunks with class_index(size) == c, in
// (size, base) search-tree order and priority heap order; bit c of nonempty_ is set exactly when that
// treap is non-empty; count_ is the number of chunks in all treaps.
class FreeIndex {
 public:
  void insert(ChunkStore& store, ChunkHandle handle) noexcept;
  void erase(ChunkStore& store, ChunkHandle handle) noexcept;

  // The free chunk of smallest size >= `size`, lowest base among equals; kNoChunk if none.
  ChunkHandle best_fit(const ChunkStore& store, std::size_t size) const noexcept;
  // The largest free chunk (highest base among equals); kNoChunk if none.
  ChunkHandle largest(const ChunkStore& store) const noexcept;

  std::size_t count() const noexcept { return count_; }
  // The records moved (ChunkStore::Reserve::relocated): follow them. The links inside the records
  // were translated by the store.
  void relocate(const ChunkStore& store) noexcept {
    for (ChunkHandle& root : roots_) root = store.relocated(root);
  }
  // Checks the invariants above; `chunks` receives the number of chunks found in the treaps. Walks
  // only the non-empty classes: O(free chunks), cheap enough to run after every debug-build call.
  bool validate(const ChunkStore& store, std::size_t& chunks) const noexcept;

 private:
  static constexpr int kWords = (kClassCount + 63) / 64;

  // The first non-empty class >= `first`, or -1.
  int next_nonempty(int first) const noexcept;

  std::array<ChunkHandle, kClassCount> roots_{};
  std::array<std::uint64_t, kWords> nonempty_{};
  std::size_t count_ = 0;
};

}  // namespace gpumem::detail
