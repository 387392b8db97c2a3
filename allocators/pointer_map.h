// The pointer map: base address of every in-use chunk -> its record, so deallocate finds a chunk in
// O(1) without a table per 256 bytes of region. Open addressing with linear probing and
// backward-shift deletion; it grows (rarely, amortised, and only in reserve_one()) and never shrinks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chunk_store.h"

namespace gpumem::detail {

// Invariants: slot count is a power of two; size_ <= slot count / 2; key 0 marks an empty slot (no
// chunk starts at address 0, since a region's base is never 0); every key sits in the probe run
// that starts at its home slot, with no empty slot in between.
class PointerMap {
 public:
  PointerMap();

  // Makes the next insert() allocation-free; false, with the map unchanged, when host memory runs out.
  bool reserve_one() noexcept { return (size_ + 1) * 2 <= slots_.size() || grow_or_fail(); }
  // Requires a reserve_one() since the last insert.
  void insert(std::uintptr_t key, ChunkHandle value) noexcept;
  ChunkHandle find(std::uintptr_t key) const noexcept;
  // Removes `key`; returns its value, or kNoChunk if it was absent.
  ChunkHandle erase(std::uintptr_t key) noexcept;

  std::size_t size() const noexcept { return size_; }
  // Starts loading the slot where `key`'s probe begins: in a large map that is a cache miss, which
  // the caller can overlap with other work before insert().
  void prefetch(std::uintptr_t key) const noexcept { __builtin_prefetch(&slots_[home(key)]); }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    ChunkHandle value = kNoChunk;
  };

  std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing of the granule number: consecutive chunks spread over the table.
    return static_cast<std::size_t>(((key >> 8) * 0x9e3779b97f4a7c15ull) >> shift_);
  }
  void grow();
  bool grow_or_fail() noexcept;
  void place(std::uintptr_t key, ChunkHandle value) noexcept;

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 0;
  std::size_t size_ = 0;
};

}  // namespace gpumem::detail
