#include "chunk_store.h"

#include <bit>
#include <cassert>

namespace gpumem::detail {
namespace {

// Handles are 32-bit: the table stops growing there.
constexpr std::size_t kMaxSlots = std::size_t{1} << 31;

}  // namespace

ChunkStore::ChunkStore(std::size_t slots)
    : records_(slots),
      states_(slots, ChunkState::unused),
      prevs_(slots, kNoChunk),
      fences_(slots),
      mask_(slots - 1),
      bucket_shift_(64 - std::countr_zero(slots / kBucket)) {}

ChunkStore::Reserve ChunkStore::reserve_slow(std::size_t count) noexcept {
  if (fits(live_ + count, records_.size())) {
    return overflow_.reserve(count) ? Reserve::ready : Reserve::no_memory;
  }
  std::size_t slots = records_.size() * 2;
  while (!fits(live_ + count, slots)) slots *= 2;
  if (slots > kMaxSlots) return Reserve::no_memory;
  try {
    ChunkStore bigger(slots);
    if (!rehash_into(bigger) || !bigger.overflow_.reserve(count)) {
      end_relocation();
      return Reserve::no_memory;
    }
    std::vector<ChunkHandle> relocation = std::move(relocation_);
    *this = std::move(bigger);
    relocation_ = std::move(relocation);
  } catch (...) {  // bad_alloc while building `bigger`: this store is untouched
    return Reserve::no_memory;
  }
  return Reserve::relocated;
}

bool ChunkStore::rehash_into(ChunkStore& bigger) noexcept {
  try {
    relocation_.assign(records_.size(), kNoChunk);
  } catch (...) {
    return false;
  }
  bigger.random_state_ = random_state_;
  for (std::size_t slot = 1; slot < records_.size(); ++slot) {
    if (states_[slot] == ChunkState::unused) continue;
    if (!bigger.overflow_.reserve_one()) return false;
    const ChunkHandle moved = bigger.create(records_[slot].base, states_[slot]);
    relocation_[slot] = moved;
    bigger.records_[moved] = records_[slot];
    bigger.fences_[moved] = fences_[slot];
  }
  // Links follow their records. Only free and fenced chunks use left/right as links (an in-use chunk
  // keeps its requested size there).
  const auto follow = [this](ChunkHandle old) { return relocation_[old]; };
  for (std::size_t slot = 1; slot < records_.size(); ++slot) {
    const ChunkHandle moved = relocation_[slot];
    if (moved == kNoChunk) continue;
    Chunk& chunk = bigger.records_[moved];
    chunk.next = follow(chunk.next);
    bigger.prevs_[moved] = follow(prevs_[slot]);
    if (states_[slot] == ChunkState::free || states_[slot] == ChunkState::fenced) {
      chunk.left = follow(chunk.left);
      chunk.right = follow(chunk.right);
    }
  }
  return true;
}

void ChunkStore::end_relocation() noexcept {
  relocation_.clear();
  relocation_.shrink_to_fit();
}

ChunkHandle ChunkStore::create(std::uintptr_t base, ChunkState state) noexcept {
  assert(base != 0 && state != ChunkState::unused && fits(live_ + 1, records_.size()));
  // The first unused slot of the bucket with more unused slots (the first bucket on a tie). States
  // are dense, so this reads no record.
  std::size_t chosen = 0, most_unused = 0;
  const std::size_t first = first_bucket(base);
  for (const std::size_t bucket : {first, second_bucket(base, first)}) {
    std::size_t unused = 0, first_unused = 0;
    for (std::size_t slot = bucket * kBucket; slot < (bucket + 1) * kBucket; ++slot) {
      if (slot == 0 || states_[slot] != ChunkState::unused) continue;
      if (unused++ == 0) first_unused = slot;
    }
    if (unused > most_unused) {
      most_unused = unused;
      chosen = first_unused;
    }
  }
  if (chosen == 0) {
    // Both buckets are full: any unused slot will do (a fifth of them at least are unused, so the
    // search is short on average), and the overflow map remembers it.
    while (cursor_ == 0 || states_[cursor_] != ChunkState::unused) cursor_ = (cursor_ + 1) & mask_;
    chosen = cursor_;
    overflow_.insert(base, static_cast<ChunkHandle>(chosen));
  }
  random_state_ ^= random_state_ << 13;
  random_state_ ^= random_state_ >> 17;
  random_state_ ^= random_state_ << 5;
  Chunk& chunk = records_[chosen];
  chunk = Chunk{};
  chunk.base = base;
  chunk.priority = random_state_;
  states_[chosen] = state;
  prevs_[chosen] = kNoChunk;
  // fences_[chosen] is already empty: a fence is cleared when its chunk stops being fenced, and a
  // record is destroyed only when free. Not touching it spares a write to a cold line.
  assert(fences_[chosen].empty());
  ++live_;
  return static_cast<ChunkHandle>(chosen);
}

void ChunkStore::destroy(ChunkHandle handle) noexcept {
  Chunk& chunk = records_[handle];
  if (!in_own_bucket(chunk.base, handle)) overflow_.erase(chunk.base);
  chunk.base = 0;
  states_[handle] = ChunkState::unused;
  --live_;
}

bool ChunkStore::validate() const noexcept {
  const std::size_t slots = records_.size();
  if (!std::has_single_bit(slots) || slots < kInitialSlots || !fits(live_, slots) || states_.size() != slots ||
      prevs_.size() != slots || fences_.size() != slots || states_[0] != ChunkState::unused ||
      records_[0].base != 0) {
    return false;
  }
  std::size_t live = 0, overflowed = 0;
  for (std::size_t slot = 1; slot < records_.size(); ++slot) {
    const Chunk& chunk = records_[slot];
    if (states_[slot] == ChunkState::unused) {
      if (chunk.base != 0 || !fences_[slot].empty()) return false;
      continue;
    }
    ++live;
    if (chunk.base == 0 || find(chunk.base) != slot) return false;
    if (fences_[slot].empty() == (states_[slot] == ChunkState::fenced)) return false;
    if (!in_own_bucket(chunk.base, slot)) {
      if (overflow_.find(chunk.base) != slot) return false;
      ++overflowed;
    }
  }
  return live == live_ && overflowed == overflow_.size();
}

}  // namespace gpumem::detail
