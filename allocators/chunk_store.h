// Chunk records: the host-side metadata of every piece of every region. Records live in one vector
// and are recycled through an intrusive free list, so splitting and merging chunks allocates nothing
// once the vector has grown to the arena's high-water mark of chunks. Memory is proportional to the
// number of chunks, never to region bytes. Growth happens only in reserve(), which callers run before
// changing any state, so running out of host memory never leaves an operation half done.
#pragma once

#include <algorithm>
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
  in_use,  // handed out: in the chunk map
  fenced,  // freed but possibly still used by the device: in a fence queue, not coalesced
};

// Invariants for a record in a live state (ChunkStore::state() not unused):
// - it lies inside one region; next (here) and prev (ChunkStore::prev()) are its address neighbours
//   in that region (kNoChunk at the region's ends) and prev.base + prev.size == base;
// - size is a positive multiple of 256;
// - left/right: the treap children when free, the fence-queue neighbours when fenced; in use, they
//   hold the requested byte count (requested(), in [1, size]), since an in-use chunk is in neither
//   a treap nor a queue. An unused record links the store's free list through `right`;
// - a fenced chunk's fence (ChunkStore::fence()) is non-empty;
// - a free chunk never has a free neighbour (coalescing is eager).
// 32 bytes, aligned: two records per cache line, so one read at random costs one miss, and the
// records of a large arena take half the cache they would at a line each. What a free does not need
// (the fence) lives apart, in ChunkStore, as do the state and the prev link (see there).
struct alignas(32) Chunk {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  ChunkHandle next = kNoChunk;
  ChunkHandle left = kNoChunk;
  ChunkHandle right = kNoChunk;
  std::uint32_t priority = 0;  // treap heap key, random per record

  std::size_t requested() const noexcept { return left | (std::size_t{right} << 32); }
  void set_requested(std::size_t bytes) noexcept {
    left = static_cast<ChunkHandle>(bytes);
    right = static_cast<ChunkHandle>(bytes >> 32);
  }
};
static_assert(sizeof(Chunk) == 32 && sizeof(std::size_t) == 8);

// Owns the records. Invariants: live() == number of records not on the free list, excluding record 0;
// free_count_ == length of the free list; states_, prevs_ and fences_ parallel records_ (same size,
// capacity >= theirs whenever reserve() has returned true); fences_[h] is empty unless h is fenced.
//
// With many chunks the records are cold, and address neighbours sit in unrelated records. States and
// prev links are therefore kept in dense arrays beside the records (5 bytes a chunk), which stay in
// cache: freeing a chunk asks whether both neighbours are free without reading their records (most
// frees in a full arena merge with nothing), and splitting a chunk updates its right neighbour's
// prev link without loading that neighbour's record.
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
  // The address neighbour below a live chunk in its region, kNoChunk at the region's start.
  ChunkHandle prev(ChunkHandle handle) const noexcept { return prevs_[handle]; }
  void set_prev(ChunkHandle handle, ChunkHandle prev) noexcept { prevs_[handle] = prev; }
  // The fence a fenced chunk waits for; empty for any other state.
  const Fence& fence(ChunkHandle handle) const noexcept { return fences_[handle]; }
  void set_fence(ChunkHandle handle, Fence fence) noexcept { fences_[handle] = fence; }

  std::size_t live() const noexcept { return live_; }

 private:
  // Records that can still be appended without reallocating either vector.
  std::size_t spare_slots() const noexcept {
    return std::min({records_.capacity(), states_.capacity(), prevs_.capacity(), fences_.capacity()}) -
           records_.size();
  }
  bool grow(std::size_t count) noexcept;

  std::vector<Chunk> records_;
  std::vector<ChunkState> states_;
  std::vector<ChunkHandle> prevs_;
  std::vector<Fence> fences_;
  ChunkHandle free_head_ = kNoChunk;
  std::size_t free_count_ = 0;
  std::size_t live_ = 0;
  std::uint32_t random_state_ = 0x9e3779b9u;  // xorshift32 state for treap priorities
};

}  // namespace gpumem::detail
