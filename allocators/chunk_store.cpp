#include "chunk_store.h"

namespace gpumem::detail {

ChunkStore::ChunkStore() {
  records_.reserve(1024);
  records_.emplace_back();  // record 0: kNoChunk
}

ChunkHandle ChunkStore::create() {
  ChunkHandle handle = free_head_;
  if (handle != kNoChunk) {
    free_head_ = records_[handle].right;
  } else {
    handle = static_cast<ChunkHandle>(records_.size());
    records_.emplace_back();
  }
  random_state_ ^= random_state_ << 13;
  random_state_ ^= random_state_ >> 17;
  random_state_ ^= random_state_ << 5;
  Chunk& chunk = records_[handle];
  chunk = Chunk{};
  chunk.priority = random_state_;
  ++live_;
  return handle;
}

void ChunkStore::destroy(ChunkHandle handle) noexcept {
  Chunk& chunk = records_[handle];
  chunk.state = ChunkState::unused;
  chunk.right = free_head_;
  free_head_ = handle;
  --live_;
}

}  // namespace gpumem::detail
