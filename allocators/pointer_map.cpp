#include "pointer_map.h"

#include <bit>
#include <cassert>
#include <utility>

namespace gpumem::detail {
namespace {
constexpr std::size_t kInitialSlots = 1024;
}

PointerMap::PointerMap()
    : slots_(kInitialSlots),
      mask_(kInitialSlots - 1),
      shift_(64 - std::countr_zero(kInitialSlots)) {}

bool PointerMap::grow_or_fail() noexcept {
  try {
    grow();
  } catch (...) {  // bad_alloc before anything moved: the map is unchanged
    return false;
  }
  return true;
}

void PointerMap::insert(std::uintptr_t key, ChunkHandle value) noexcept {
  assert((size_ + 1) * 2 <= slots_.size());  // reserve_one() was called
  place(key, value);
}

void PointerMap::place(std::uintptr_t key, ChunkHandle value) noexcept {
  std::size_t slot = home(key);
  while (slots_[slot].key != 0) slot = (slot + 1) & mask_;
  slots_[slot] = Slot{key, value};
  ++size_;
}

ChunkHandle PointerMap::find(std::uintptr_t key) const noexcept {
  if (key == 0) return kNoChunk;
  for (std::size_t slot = home(key);; slot = (slot + 1) & mask_) {
    if (slots_[slot].key == key) return slots_[slot].value;
    if (slots_[slot].key == 0) return kNoChunk;
  }
}

ChunkHandle PointerMap::erase(std::uintptr_t key) noexcept {
  if (key == 0) return kNoChunk;
  std::size_t slot = home(key);
  while (slots_[slot].key != key) {
    if (slots_[slot].key == 0) return kNoChunk;
    slot = (slot + 1) & mask_;
  }
  const ChunkHandle value = slots_[slot].value;
  // Backward-shift: pull later members of the run into the hole when their home allows it.
  std::size_t hole = slot;
  for (std::size_t next = (hole + 1) & mask_; slots_[next].key != 0; next = (next + 1) & mask_) {
    const std::size_t want = home(slots_[next].key);
    // `next` may move to `hole` unless its home lies cyclically in (hole, next].
    const bool home_after_hole = ((next - want) & mask_) < ((next - hole) & mask_);
    if (!home_after_hole) {
      slots_[hole] = slots_[next];
      hole = next;
    }
  }
  slots_[hole] = Slot{};
  --size_;
  return value;
}

void PointerMap::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  shift_ = 64 - std::countr_zero(slots_.size());
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != 0) place(slot.key, slot.value);
  }
}

}  // namespace gpumem::detail
