// ChunkMap: the base address of every in-use chunk -> its record, so deallocate finds a chunk in O(1)
// without a table per 256 bytes of region. A slot is 8 bytes, a 32-bit fingerprint of the address
// and the record's handle; a fingerprint match is confirmed against the record's base, which the
// caller reads next anyway. Small slots keep the table, which every free reads at a random place,
// half the size it would be with whole addresses. See probing_table.h for the table itself.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chunk_store.h"
#include "probing_table.h"

namespace gpumem::detail {

// Invariants: those of ProbingTable; every slot's handle names a record in state in_use whose base
// fingerprints to the slot's tag, and each in-use record appears once.
class ChunkMap {
 public:
  // Makes the next insert() allocation-free; false, with the map unchanged, when host memory runs out.
  bool reserve_one() noexcept { return table_.reserve_one(); }
  // Adds `handle` under its record's base (not yet present). Requires a reserve_one() since the last
  // insert.
  void insert(std::uintptr_t base, ChunkHandle handle) noexcept { table_.insert(Slot{tag(base), handle}); }
  // The in-use chunk starting at `base`, or kNoChunk.
  ChunkHandle find(const ChunkStore& store, std::uintptr_t base) const noexcept {
    const std::uint32_t wanted = tag(base);
    const Slot* slot = table_.find(hash_of(wanted), [&](const Slot& s) {
      return s.tag == wanted && store[s.handle].base == base;
    });
    return slot == nullptr ? kNoChunk : slot->handle;
  }
  // Removes the in-use chunk starting at `base`; returns its handle, or kNoChunk if there is none.
  ChunkHandle erase(const ChunkStore& store, std::uintptr_t base) noexcept {
    const std::uint32_t wanted = tag(base);
    Slot removed;
    const bool found = table_.erase(hash_of(wanted), [&](const Slot& s) {
      return s.tag == wanted && store[s.handle].base == base;
    }, removed);
    return found ? removed.handle : kNoChunk;
  }
  std::size_t size() const noexcept { return table_.size(); }
  // Starts loading the slot where `base`'s probe begins (see ProbingTable::prefetch).
  void prefetch(std::uintptr_t base) const noexcept { table_.prefetch(hash_of(tag(base))); }

 private:
  struct Slot {
    std::uint32_t tag = 0;
    ChunkHandle handle = kNoChunk;
    bool empty() const noexcept { return handle == kNoChunk; }
    std::uint64_t hash() const noexcept { return hash_of(tag); }
  };

  // The top 32 bits of the address hash: they choose the home slot (tables stay below 2^32 slots).
  static std::uint32_t tag(std::uintptr_t base) noexcept { return static_cast<std::uint32_t>(address_hash(base) >> 32); }
  static std::uint64_t hash_of(std::uint32_t tag) noexcept { return std::uint64_t{tag} << 32; }

  ProbingTable<Slot> table_;
};

}  // namespace gpumem::detail
