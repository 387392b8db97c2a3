#include "chunk_store.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace gpumem::detail {
namespace {

// Records set aside up front: a fresh arena splits and merges for a while without growing the vector.
constexpr std::size_t kInitialRecords = 1024;
// Handles are 32-bit; record 0 is kNoChunk.
constexpr std::size_t kMaxRecords = std::numeric_limits<ChunkHandle>::max();

}  // namespace

ChunkStore::ChunkStore() {
  records_.reserve(kInitialRecords);
  states_.reserve(kInitialRecords);
  prevs_.reserve(kInitialRecords);
  fences_.reserve(kInitialRecords);
  records_.emplace_back();  // record 0: kNoChunk
  states_.push_back(ChunkState::unused);
  prevs_.push_back(kNoChunk);
  fences_.emplace_back();
}

bool ChunkStore::grow(std::size_t count) noexcept {
  const std::size_t needed = records_.size() + (count - free_count_);
  if (needed > kMaxRecords) return false;
  // Geometric, as push_back would grow: reserving exactly `needed` would copy on every call.
  const std::size_t capacity = std::min(kMaxRecords, std::max(needed, 2 * records_.capacity()));
  try {
    // Side arrays first: should the records then fail, spare capacity is all that changed.
    states_.reserve(capacity);
    prevs_.reserve(capacity);
    fences_.reserve(capacity);
    records_.reserve(capacity);
  } catch (...) {  // bad_alloc; sizes and contents are unchanged
    return false;
  }
  return true;
}

ChunkHandle ChunkStore::create() noexcept {
  ChunkHandle handle = free_head_;
  if (handle != kNoChunk) {
    free_head_ = records_[handle].right;
    --free_count_;
  } else {
    assert(spare_slots() > 0);  // reserved
    handle = static_cast<ChunkHandle>(records_.size());
    records_.emplace_back();
    states_.push_back(ChunkState::unused);
    prevs_.push_back(kNoChunk);
    fences_.emplace_back();
  }
  random_state_ ^= random_state_ << 13;
  random_state_ ^= random_state_ >> 17;
  random_state_ ^= random_state_ << 5;
  Chunk& chunk = records_[handle];
  chunk = Chunk{};
  chunk.priority = random_state_;
  states_[handle] = ChunkState::unused;
  prevs_[handle] = kNoChunk;
  // fences_[handle] is already empty: a fence is cleared when its chunk stops being fenced, and a
  // record is destroyed only when free. Not touching it spares a write to a cold line per split.
  assert(fences_[handle].empty());
  ++live_;
  return handle;
}

void ChunkStore::destroy(ChunkHandle handle) noexcept {
  Chunk& chunk = records_[handle];
  states_[handle] = ChunkState::unused;
  chunk.right = free_head_;
  free_head_ = handle;
  ++free_count_;
  --live_;
}

}  // namespace gpumem::detail
