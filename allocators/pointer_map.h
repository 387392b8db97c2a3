// PointerMap: an address -> 32-bit value map (a ChunkHandle-sized word): the chunk records' overflow
// map, and the shim's cuda_async manager's record of the blocks it handed out. Each slot keeps the
// whole address. O(1), allocation-free within what reserve() secured; see probing_table.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chunk_handle.h"
#include "probing_table.h"

namespace gpumem::detail {

// Invariants: those of ProbingTable; no key is 0 (0 marks an empty slot) and each key appears once.
class PointerMap {
 public:
  // Makes the next insert() allocation-free; false, with the map unchanged, when host memory runs out.
  bool reserve_one() noexcept { return table_.reserve_one(); }
  // Makes the next `count` insert() calls allocation-free (false, unchanged, when memory runs out).
  bool reserve(std::size_t count) noexcept { return table_.reserve(count); }
  // Requires a reserve covering it, a non-zero key and a value other than kNoChunk.
  void insert(std::uintptr_t key, ChunkHandle value) noexcept { table_.insert(Slot{key, value}); }
  // The value stored for `key`, or kNoChunk.
  ChunkHandle find(std::uintptr_t key) const noexcept {
    if (key == 0) return kNoChunk;
    const Slot* slot = table_.find(address_hash(key), [key](const Slot& s) { return s.key == key; });
    return slot == nullptr ? kNoChunk : slot->value;
  }
  // Removes `key`; returns its value, or kNoChunk if it was absent.
  ChunkHandle erase(std::uintptr_t key) noexcept {
    Slot removed;
    if (key == 0 || !table_.erase(address_hash(key), [key](const Slot& s) { return s.key == key; }, removed)) {
      return kNoChunk;
    }
    return removed.value;
  }
  std::size_t size() const noexcept { return table_.size(); }
  // Calls visit(key, value) for every entry and empties the map, without allocating.
  template <typename Visit>
  void drain(Visit visit) noexcept {
    table_.drain([&](const Slot& slot) { visit(slot.key, slot.value); });
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    ChunkHandle value = kNoChunk;
    bool empty() const noexcept { return key == 0; }
    std::uint64_t hash() const noexcept { return address_hash(key); }
  };

  ProbingTable<Slot> table_;
};

}  // namespace gpumem::detail
