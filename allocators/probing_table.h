// The hash table under PointerMap: open addressing with linear probing and backward-shift deletion
// (no tombstones, so lookups never slow down with churn). It grows (rarely, amortised, and only in
// reserve() and reserve_one()) and never shrinks.
//
// A slot carries the hash bits that place it (Slot::hash()), and lookups take a predicate, so a map
// decides what its slots keep of the key.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::detail {

// Fibonacci hashing of the 256-byte granule number: consecutive chunks spread over the table. The
// home slot comes from the top bits.
constexpr std::uint64_t address_hash(std::uintptr_t address) noexcept {
  return static_cast<std::uint64_t>(address >> 8) * 0x9e3779b97f4a7c15ull;
}

// Slot requirements: default-constructed is empty; empty() tells an empty slot; hash() gives the
// 64-bit hash of the key it holds (only its top log2(slot count) bits are used, at most 32).
//
// Invariants: slot count is a power of two, at least kInitialSlots; size_ <= slot count / 2; every
// occupied slot sits in the probe run that starts at its home slot, with no empty slot in between.
template <typename Slot>
class ProbingTable {
 public:
  // Small: most tables (an arena's overflow map, a manager's block table) hold a few entries.
  static constexpr std::size_t kInitialSlots = 16;

  ProbingTable()
      : slots_(kInitialSlots), mask_(kInitialSlots - 1), shift_(64 - std::countr_zero(kInitialSlots)) {}

  // Makes the next `count` insert() calls allocation-free; false, with the table unchanged, when
  // host memory runs out.
  bool reserve(std::size_t count) noexcept {
    return (size_ + count) * 2 <= slots_.size() || grow_or_fail(count);
  }
  bool reserve_one() noexcept { return reserve(1); }

  // Adds a slot (its key must not be present). Requires a reserve() covering it.
  void insert(const Slot& slot) noexcept {
    assert((size_ + 1) * 2 <= slots_.size());
    place(slot);
  }

  // The occupied slot in `hash`'s probe run for which matches(slot) holds, or nullptr.
  template <typename Matches>
  const Slot* find(std::uint64_t hash, Matches matches) const noexcept {
    for (std::size_t index = home(hash);; index = (index + 1) & mask_) {
      const Slot& slot = slots_[index];
      if (slot.empty()) return nullptr;
      if (matches(slot)) return &slot;
    }
  }

  // Removes the slot find() would return and gives it back in `removed`; false if there is none.
  template <typename Matches>
  bool erase(std::uint64_t hash, Matches matches, Slot& removed) noexcept {
    std::size_t hole = home(hash);
    for (;; hole = (hole + 1) & mask_) {
      if (slots_[hole].empty()) return false;
      if (matches(slots_[hole])) break;
    }
    removed = slots_[hole];
    // Backward shift: pull later members of the run into the hole when their home allows it.
    for (std::size_t next = (hole + 1) & mask_; !slots_[next].empty(); next = (next + 1) & mask_) {
      const std::size_t want = home(slots_[next].hash());
      // `next` may move to `hole` unless its home lies cyclically in (hole, next].
      const bool home_after_hole = ((next - want) & mask_) < ((next - hole) & mask_);
      if (!home_after_hole) {
        slots_[hole] = slots_[next];
        hole = next;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  std::size_t size() const noexcept { return size_; }

  // Calls visit(slot) for every occupied slot, in table order, and empties the table (its memory
  // stays): no allocation.
  template <typename Visit>
  void drain(Visit visit) noexcept {
    for (Slot& slot : slots_) {
      if (slot.empty()) continue;
      visit(static_cast<const Slot&>(slot));
      slot = Slot{};
    }
    size_ = 0;
  }

  // Starts loading `hash`'s home slot: in a large table that is a cache miss, which the caller can
  // overlap with other work before insert() or find().
  void prefetch(std::uint64_t hash) const noexcept { __builtin_prefetch(&slots_[home(hash)]); }

 private:
  std::size_t home(std::uint64_t hash) const noexcept { return static_cast<std::size_t>(hash >> shift_); }

  void place(const Slot& slot) noexcept {
    std::size_t index = home(slot.hash());
    while (!slots_[index].empty()) index = (index + 1) & mask_;
    slots_[index] = slot;
    ++size_;
  }

  bool grow_or_fail(std::size_t count) noexcept {
    std::size_t slots = slots_.size() * 2;
    while ((size_ + count) * 2 > slots) slots *= 2;
    // Values are 32-bit handles: more slots than that could never be needed.
    if (slots > (std::size_t{1} << 32)) return false;
    try {
      std::vector<Slot> old(slots);
      old.swap(slots_);
      mask_ = slots_.size() - 1;
      shift_ = 64 - std::countr_zero(slots_.size());
      size_ = 0;
      for (const Slot& slot : old) {
        if (!slot.empty()) place(slot);
      }
    } catch (...) {  // bad_alloc before anything moved: the table is unchanged
      return false;
    }
    return true;
  }

  std::vector<Slot> slots_;
  std::size_t mask_;
  int shift_;
  std::size_t size_ = 0;
};

}  // namespace gpumem::detail
