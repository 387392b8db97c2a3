// Fenced chunks, kept per stream in FIFOs ordered by fence id.
#include "fence_queues.h"

#include <algorithm>
#include <cassert>

namespace gpumem::detail {
namespace {

// Queues set aside at the first fence: programs use a handful of streams.
constexpr std::size_t kInitialQueues = 8;

}  // namespace

FenceQueues::Queue* FenceQueues::find_mutable(std::uintptr_t stream) noexcept {
  for (Queue& queue : queues_) {
    if (queue.stream == stream) return &queue;
  }
  return nullptr;
}

const FenceQueues::Queue* FenceQueues::find(std::uintptr_t stream) const noexcept {
  for (const Queue& queue : queues_) {
    if (queue.stream == stream) return &queue;
  }
  return nullptr;
}

bool FenceQueues::reserve(std::uintptr_t stream) noexcept {
  if (queues_.size() < queues_.capacity() || find(stream) != nullptr) return true;
  try {
    queues_.reserve(std::max(kInitialQueues, 2 * queues_.capacity()));
  } catch (...) {  // bad_alloc; the vector is unchanged
    return false;
  }
  return true;
}

void FenceQueues::push(ChunkStore& store, ChunkHandle handle) noexcept {
  Chunk& chunk = store[handle];
  const Fence& fence = store.fence(handle);
  Queue* queue = find_mutable(fence.stream);
  if (queue == nullptr) {
    assert(queues_.size() < queues_.capacity());  // reserve() was called
    queues_.push_back(Queue{fence.stream, kNoChunk, kNoChunk, 0});
    queue = &queues_.back();
  }
  // Walk back from the tail past later ids (only when frees raced with their fence ids).
  ChunkHandle after = queue->tail;
  while (after != kNoChunk && store.fence(after).id > fence.id) after = store[after].left;
  const ChunkHandle before = after == kNoChunk ? queue->head : store[after].right;
  chunk.left = after;
  chunk.right = before;
  if (after == kNoChunk) queue->head = handle; else store[after].right = handle;
  if (before == kNoChunk) queue->tail = handle; else store[before].left = handle;
  ++queue->chunks;
  ++chunks_;
}

void FenceQueues::remove(ChunkStore& store, ChunkHandle handle) noexcept {
  Chunk& chunk = store[handle];
  Queue* queue = find_mutable(store.fence(handle).stream);
  if (chunk.left == kNoChunk) queue->head = chunk.right; else store[chunk.left].right = chunk.right;
  if (chunk.right == kNoChunk) queue->tail = chunk.left; else store[chunk.right].left = chunk.left;
  chunk.left = chunk.right = kNoChunk;
  --queue->chunks;
  --chunks_;
}

void FenceQueues::drop_empty_queues() noexcept {
  std::erase_if(queues_, [](const Queue& queue) { return queue.chunks == 0; });
}

bool FenceQueues::validate(const ChunkStore& store, std::size_t& chunks) const noexcept {
  chunks = 0;
  for (const Queue& queue : queues_) {
    std::size_t length = 0;
    ChunkHandle previous = kNoChunk;
    for (ChunkHandle node = queue.head; node != kNoChunk; node = store[node].right) {
      const Chunk& chunk = store[node];
      const Fence& fence = store.fence(node);
      if (store.state(node) != ChunkState::fenced || fence.stream != queue.stream || fence.empty() ||
          chunk.left != previous) {
        return false;
      }
      if (previous != kNoChunk && store.fence(previous).id > fence.id) return false;
      if (++length > chunks_) return false;  // a cycle
      previous = node;
    }
    if (previous != queue.tail || length != queue.chunks) return false;
    chunks += length;
  }
  return chunks == chunks_;
}

}  // namespace gpumem::detail
