// Fenced chunks: freed, but not reusable (nor coalescable) until their fence is resolved. They are
// kept per stream in FIFOs ordered by fence id, so "every fence up to X is resolved" pops a prefix of
// each queue and same-stream reuse only looks at that stream's chunks. Streams are few (an
// application uses a handful), so queues live in a small vector searched linearly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chunk_store.h"

namespace gpumem::detail {

// Invariants: each queue holds only fenced chunks whose fence's stream is the queue's stream, linked
// through Chunk::left (towards head) and Chunk::right (towards tail), in non-decreasing fence id;
// chunks_ is the total over all queues; each queue's `chunks` is its own length.
class FenceQueues {
 public:
  struct Queue {
    std::uintptr_t stream = 0;
    ChunkHandle head = kNoChunk;
    ChunkHandle tail = kNoChunk;
    std::size_t chunks = 0;
  };

  // Makes a push() onto `stream` allocation-free (a new stream needs a queue); false, with the queues
  // unchanged, when host memory runs out.
  bool reserve(std::uintptr_t stream) noexcept;
  // Enqueues a chunk whose fence is set; requires reserve(its stream) since the last push.
  // Ids normally arrive in increasing order, so the insertion point is found from the tail in O(1).
  void push(ChunkStore& store, ChunkHandle handle) noexcept;
  void remove(ChunkStore& store, ChunkHandle handle) noexcept;

  // The queue of `stream`, or nullptr.
  const Queue* find(std::uintptr_t stream) const noexcept;
  std::size_t queue_count() const noexcept { return queues_.size(); }
  const Queue& queue(std::size_t index) const noexcept { return queues_[index]; }
  // Forgets queues that became empty (call when not iterating by index).
  void drop_empty_queues() noexcept;

  std::size_t chunks() const noexcept { return chunks_; }
  // The records moved (ChunkStore::Reserve::relocated): follow them.
  void relocate(const ChunkStore& store) noexcept {
    for (Queue& queue : queues_) {
      queue.head = store.relocated(queue.head);
      queue.tail = store.relocated(queue.tail);
    }
  }
  bool validate(const ChunkStore& store, std::size_t& chunks) const noexcept;

 private:
  Queue* find_mutable(std::uintptr_t stream) noexcept;

  std::vector<Queue> queues_;
  std::size_t chunks_ = 0;
};

}  // namespace gpumem::detail
