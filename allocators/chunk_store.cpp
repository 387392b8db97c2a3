// Chunk records: the metadata of every piece of every region, in one table that also finds a chunk by its start.
#include "chunk_store.h"

#include <bit>
#include <cassert>

namespace gpumem::detail {
namespace {

// Handles are 32-bit: the table stops growing there.
constexpr std::size_t kMaxSlots = std::size_t{1} << 31;

}  // namespace

ChunkStore::ChunkStore(std::size_t table_slots)
    : records_(table_slots + table_slots / kStashShare),
      states_(records_.size(), ChunkState::unused),
      prevs_(records_.size(), kNoChunk),
      fences_(records_.size()),
      table_slots_(table_slots),
      bucket_shift_(64 - std::countr_zero(table_slots / kBucket)),
      stash_cursor_(table_slots) {}

ChunkStore::Reserve ChunkStore::reserve_slow(std::size_t count) noexcept {
  if (has_room(count)) return overflow_.reserve(count) ? Reserve::ready : Reserve::no_memory;
  std::size_t table_slots = table_slots_ * 2;
  while (!fits(live_ + count, table_slots)) table_slots *= 2;
  // A bigger table spreads the records over more buckets, so fewer need the stash; in the rare case
  // that it is still too full, double again.
  for (; table_slots <= kMaxSlots; table_slots *= 2) {
    try {
      ChunkStore bigger(table_slots);
      const Rehash rehash = rehash_into(bigger);
      if (rehash == Rehash::no_memory) break;
      if (rehash == Rehash::stash_full || !bigger.has_room(count)) continue;
      if (!bigger.overflow_.reserve(count)) break;
      std::vector<ChunkHandle> relocation = std::move(relocation_);
      *this = std::move(bigger);
      relocation_ = std::move(relocation);
      return Reserve::relocated;
    } catch (...) {  // bad_alloc while building `bigger`: this store is untouched
      end_relocation();
      return Reserve::no_memory;
    }
  }
  end_relocation();
  return Reserve::no_memory;
}

ChunkStore::Rehash ChunkStore::rehash_into(ChunkStore& bigger) noexcept {
  try {
    relocation_.assign(records_.size(), kNoChunk);
  } catch (...) {
    return Rehash::no_memory;
  }
  bigger.random_state_ = random_state_;
  for (std::size_t slot = 1; slot < records_.size(); ++slot) {
    if (states_[slot] == ChunkState::unused) continue;
    if (!bigger.has_room(1)) return Rehash::stash_full;
    if (!bigger.overflow_.reserve_one()) return Rehash::no_memory;
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
  return Rehash::done;
}

void ChunkStore::end_relocation() noexcept {
  std::vector<ChunkHandle>().swap(relocation_);  // frees the memory, allocates none
}

ChunkHandle ChunkStore::create(std::uintptr_t base, ChunkState state) noexcept {
  assert(base != 0 && state != ChunkState::unused && has_room(1));
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
    // Both buckets are full: the stash takes it (reserve() made sure it has room), and the overflow
    // map remembers where.
    while (states_[stash_cursor_] != ChunkState::unused) {
      stash_cursor_ = stash_cursor_ + 1 == records_.size() ? table_slots_ : stash_cursor_ + 1;
    }
    chosen = stash_cursor_;
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
  if (handle >= table_slots_) overflow_.erase(chunk.base);
  chunk.base = 0;
  states_[handle] = ChunkState::unused;
  --live_;
}

bool ChunkStore::validate() const noexcept {
  const std::size_t slots = records_.size();
  if (!std::has_single_bit(table_slots_) || table_slots_ < kInitialSlots || !fits(live_, table_slots_) ||
      slots != table_slots_ + stash_slots() || states_.size() != slots || prevs_.size() != slots ||
      fences_.size() != slots || states_[0] != ChunkState::unused || records_[0].base != 0) {
    return false;
  }
  std::size_t live = 0, stashed = 0;
  for (std::size_t slot = 1; slot < slots; ++slot) {
    const Chunk& chunk = records_[slot];
    if (states_[slot] == ChunkState::unused) {
      if (chunk.base != 0 || !fences_[slot].empty()) return false;
      continue;
    }
    ++live;
    if (chunk.base == 0 || find(chunk.base) != slot) return false;
    if (fences_[slot].empty() == (states_[slot] == ChunkState::fenced)) return false;
    if (slot >= table_slots_) {
      if (overflow_.find(chunk.base) != slot) return false;
      ++stashed;
    } else {
      const std::size_t first = first_bucket(chunk.base);
      if (slot / kBucket != first && slot / kBucket != second_bucket(chunk.base, first)) return false;
    }
  }
  return live == live_ && stashed == overflow_.size();
}

}  // namespace gpumem::detail
