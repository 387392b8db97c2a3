// Chunk records: the host-side metadata of every piece of every region. Records live in one vector
// and are recycled through an intrusive free list, so splitting and merging chunks allocates nothing
// once the vector has grown to the arena's high-water mark of chunks. Memory is proportional to the
// number of chunks, never to region bytes. Growth happens only in reserve(), which callers run before
// changing any state, so running out of host memory never leaves an operation half done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fence.h"

namespace gpumem::detail {

// Index of a record in the ChunkStore; 0 is "no chunk" (record 0 is never handed out).
using ChunkHandle = std::uint32_t;
inline constexpr ChunkHandle kNoChunk = 0;

enum class ChunkState : std::uint8_t {
  unused,  // record on the store's free list
  free,    // available: in the free index
  in_use,  // handed out: in the pointer map
  fenced,  // freed but possibly still used by the device: in a fence queue, not coalesced
};

// Invariants for a record in a live state (ChunkStore::state() not unused):
// - it lies inside one region; prev/next are its address neighbours in that region (kNoChunk at the
//   region's ends) and prev.base + prev.size == base;
// - size is a positive multiple of 256;
// - requested is in [1, size] when in_use, else 0;
// - fence_id != 0 exactly when fenced;
// - left/right: the treap children when free, the fence-queue neighbours when fenced, unused when in
//   use. An unused record links the store's free list through `right`.
// - a free chunk never has a free neighbour (coalescing is eager).
// One cache line per record (alignas): a record read at random then costs one miss, not two. The
// state lives apart, in ChunkStore, to spare more misses (see there).
struct alignas(64) Chunk {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  FenceId fence_id = 0;
  std::uintptr_t fence_stream = 0;
  ChunkHandle prev = kNoChunk;
  ChunkHandle next = kNoChunk;
  ChunkHandle left = kNoChunk;
  ChunkHandle right = kNoChunk;
  std::uint32_t priority = 0;  // treap heap key, random per record
};

// Owns the records. Invariants: live() == number of records not on the free list, excluding record 0;
// free_count_ == length of the free list; states_ parallels records_ (same size, capacity >= theirs
// whenever reserve() has returned true).
//
// With many chunks the records are cold, and address neighbours sit in unrelated records. States are
// therefore kept in a dense byte array beside the records, which stays in cache: freeing a chunk
// asks whether both neighbours are free without reading their records, and most frees in a full
// arena merge with nothing.
class ChunkStore {
 public:
  ChunkStore();

  Chunk& operator[](ChunkHandle handle) noexcept { return records_[handle]; }
  const Chunk& operator[](ChunkHandle handle) const noexcept { return records_[handle]; }

  // Makes the next `count` create() calls allocation-free. False, with the store unchanged, when host
  // memory (or the handle space) runs out. May grow the vector: references to records obtained
  // before the call are invalidated.
  bool reserve(std::size_t count) noexcept {
    // Inline fast path: on the allocation path the records are nearly always there already.
    return count <= free_count_ || spare_slots() >= count - free_count_ || grow(count);
  }
  // A fresh record (state unused, links cleared, new priority). Requires a reserve() covering it, so
  // it never allocates and never invalidates references.
  ChunkHandle create() noexcept;
  void destroy(ChunkHandle handle) noexcept;

  ChunkState state(ChunkHandle handle) const noexcept { return states_[handle]; }
  void set_state(ChunkHandle handle, ChunkState state) noexcept { states_[handle] = state; }

  std::size_t live() const noexcept { return live_; }

 private:
  // Records that can still be appended without reallocating either vector.
  std::size_t spare_slots() const noexcept {
    return (records_.capacity() < states_.capacity() ? records_.capacity() : states_.capacity()) -
           records_.size();
  }
  bool grow(std::size_t count) noexcept;

  std::vector<Chunk> records_;
  std::vector<ChunkState> states_;
  ChunkHandle free_head_ = kNoChunk;
  std::size_t free_count_ = 0;
  std::size_t live_ = 0;
  std::uint32_t random_state_ = 0x9e3779b9u;  // xorshift32 state for treap priorities
};

}  // namespace gpumem::detail
