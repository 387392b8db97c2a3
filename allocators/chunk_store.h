// Chunk records: the host-side metadata of every piece of every region, in one table that also
// finds a chunk by its start address, so the arena needs no separate address map.
//
// Records are placed by address. Slots are grouped in buckets of kBucket (128 bytes of records, two
// cache lines); two hashes of `base` name two buckets, and the record of the chunk starting at `base`
// takes an unused slot of the emptier one. If both are full it goes to a stash of slots beyond the
// buckets, and a small overflow map names it. Keeping such records out of other buckets keeps them
// few however long the arena churns: 100k live records at 77% load, after a million random
// replacements, leave 8% in the stash, whose records and map are small enough to stay in cache.
//
// A chunk's base never changes while its record lives (a split creates the upper record, a merge
// keeps the lower), so a record never moves, and finding the chunk that starts at an address reads
// two buckets, whose loads overlap: in a large arena the only memory wait of a free. (Reading a
// dense array of one-byte tags first, then only the matching record, took fewer cache lines but made
// the two loads wait on each other: slower at 100k chunks where the last level holds the table,
// bench/README.md.) Two choices keep buckets balanced, so the table stays small (up to 80% of
// its bucketed slots in use).
//
// Growing the table rehashes every record into one at least twice the size (more if the stash would
// still be full), which changes handles: reserve() says so, and relocated() tells holders of handles
// outside the table where each record went. The table never shrinks: memory is proportional to the
// most chunks the arena has held, never to region bytes. Growth happens only in
// reserve(), which callers run before changing any state, so running out of host memory never leaves
// an operation half done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chunk_handle.h"
#include "fence.h"
#include "huge_page_allocator.h"
#include "pointer_map.h"

namespace gpumem::detail {

enum class ChunkState : std::uint8_t {
  unused,  // an empty slot
  free,    // available: in the free index
  in_use,  // handed out
  fenced,  // freed but possibly still used by the device: in a fence queue, not coalesced
};

// Invariants for a record in a live state (ChunkStore::state() not unused):
// - it lies inside one region; next (here) and prev (ChunkStore::prev()) are its address neighbours
//   in that region (kNoChunk at the region's ends) and prev.base + prev.size == base;
// - size is a positive multiple of 256;
// - left/right: the treap children when free, the fence-queue neighbours when fenced; in use, they
//   hold the requested byte count (requested(), in [1, size]) and whether it was allocated in stream
//   order (ordered()), since an in-use chunk is in neither a treap nor a queue;
// - a fenced chunk's fence (ChunkStore::fence()) is non-empty;
// - a free chunk never has a free neighbour (coalescing is eager).
// An unused slot's record has base 0 (no chunk starts at address 0).
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

  // In use: the requested count in left and the low 31 bits of right, and whether the block was
  // allocated in stream order in right's top bit.
  static constexpr std::size_t kMaxRequested = (std::size_t{1} << 63) - 1;
  static constexpr ChunkHandle kOrderedBit = ChunkHandle{1} << 31;
  std::size_t requested() const noexcept { return left | (std::size_t{right & ~kOrderedBit} << 32); }
  bool ordered() const noexcept { return (right & kOrderedBit) != 0; }
  void set_requested(std::size_t bytes, bool in_stream_order) noexcept {
    left = static_cast<ChunkHandle>(bytes);
    right = static_cast<ChunkHandle>(bytes >> 32) | (in_stream_order ? kOrderedBit : ChunkHandle{0});
  }
};
static_assert(sizeof(Chunk) == 32 && sizeof(std::size_t) == 8);

// The second bucket's hash: like address_hash, with a multiplier unrelated to its.
constexpr std::uint64_t second_address_hash(std::uintptr_t address) noexcept {
  return static_cast<std::uint64_t>(address >> 8) * 0xd6e8feb86659fd93ull;
}

// Owns the records. Invariants: table_slots_ (the bucketed slots) is a power of two, at least
// kInitialSlots, and fits(live(), table_slots_) (at most 80% of them in use); the stash is the
// table_slots_ / kStashShare slots after them; states_, prevs_ and fences_ parallel records_;
// live() == number of slots whose state is not unused; slot 0 stays unused; the record of a live
// chunk starting at `base` sits in one of base's two buckets, or in the stash with overflow_ naming
// it (both buckets were full when it was placed); overflow_ names exactly the stash's records;
// fences_[h] is empty unless h is fenced.
//
// States and prev links live in dense arrays beside the records (5 bytes a slot), which stay in
// cache: freeing a chunk asks whether both neighbours are free without reading their records (most
// frees in a full arena merge with nothing), and splitting a chunk updates its right neighbour's
// prev link without loading that neighbour's record.
class ChunkStore {
 public:
  // Slots per bucket: 4 records, 128 bytes.
  static constexpr std::size_t kBucket = 4;
  // Small, so an arena that holds a few blocks (or one whose context went) keeps a few KiB of host
  // memory; the table doubles as chunks come.
  static constexpr std::size_t kInitialSlots = 64;
  // Most of the bucketed slots in use at once, as a fraction: above it the table grows.
  static constexpr std::size_t kMaxLoadNumerator = 4;
  static constexpr std::size_t kMaxLoadDenominator = 5;
  // The stash has one slot for every kStashShare bucketed slots; when it fills, the table grows.
  // (Twice what the churn above needs, so a full stash rather than the load grows a table rarely.)
  static constexpr std::size_t kStashShare = 8;

  enum class Reserve : std::uint8_t {
    ready,      // room for the records asked for
    relocated,  // room made by rehashing: every handle changed (see relocated())
    no_memory,  // host memory (or the handle space) ran out; the store is unchanged
  };

  ChunkStore() : ChunkStore(kInitialSlots) {}
  // A table of `slots` bucketed slots to start with: a power of two, at least kInitialSlots.
  explicit ChunkStore(std::size_t slots);

  Chunk& operator[](ChunkHandle handle) noexcept { return records_[handle]; }
  const Chunk& operator[](ChunkHandle handle) const noexcept { return records_[handle]; }

  // Makes the next `count` create() calls allocation-free. After Reserve::relocated the caller must
  // translate every handle it keeps with relocated(), then call end_relocation().
  Reserve reserve(std::size_t count) noexcept {
    // Inline fast path: on the allocation path there is nearly always room.
    if (has_room(count) && overflow_.reserve(count)) return Reserve::ready;
    return reserve_slow(count);
  }
  // The new handle of a record that had `old` before the last rehash (kNoChunk stays kNoChunk).
  ChunkHandle relocated(ChunkHandle old) const noexcept { return relocation_[old]; }
  // Forgets the translation table.
  void end_relocation() noexcept;

  // A fresh record for the chunk starting at `base` (links cleared, new priority), in `state` (not
  // unused). Requires a reserve() covering it, so it never allocates and never moves records.
  ChunkHandle create(std::uintptr_t base, ChunkState state) noexcept;
  void destroy(ChunkHandle handle) noexcept;
  // The live record of the chunk starting at `base`, whatever its state; kNoChunk if none.
  ChunkHandle find(std::uintptr_t base) const noexcept {
    if (base == 0) return kNoChunk;
    const std::size_t first = first_bucket(base);
    const std::size_t second = second_bucket(base, first);
    __builtin_prefetch(&records_[second * kBucket]);  // overlaps the two buckets' misses
    for (const std::size_t bucket : {first, second}) {
      for (std::size_t slot = bucket * kBucket; slot < (bucket + 1) * kBucket; ++slot) {
        if (records_[slot].base == base) return static_cast<ChunkHandle>(slot);
      }
    }
    return overflow_.size() == 0 ? kNoChunk : overflow_.find(base);
  }

  ChunkState state(ChunkHandle handle) const noexcept { return states_[handle]; }
  void set_state(ChunkHandle handle, ChunkState state) noexcept { states_[handle] = state; }
  // The address neighbour below a live chunk in its region, kNoChunk at the region's start.
  ChunkHandle prev(ChunkHandle handle) const noexcept { return prevs_[handle]; }
  void set_prev(ChunkHandle handle, ChunkHandle prev) noexcept { prevs_[handle] = prev; }
  // The fence a fenced chunk waits for; empty for any other state.
  const Fence& fence(ChunkHandle handle) const noexcept { return fences_[handle]; }
  void set_fence(ChunkHandle handle, Fence fence) noexcept { fences_[handle] = fence; }

  std::size_t live() const noexcept { return live_; }
  // Records in the stash, named by the overflow map (for tests and statistics).
  std::size_t overflowed() const noexcept { return overflow_.size(); }
  // True if the live record `handle` sits in the stash.
  bool in_overflow(ChunkHandle handle) const noexcept { return handle >= table_slots_; }
  // Checks the placement invariants above (not the links, which the arena checks).
  bool validate() const noexcept;

 private:

  static constexpr bool fits(std::size_t live, std::size_t table_slots) noexcept {
    return live * kMaxLoadDenominator <= table_slots * kMaxLoadNumerator;
  }
  std::size_t stash_slots() const noexcept { return table_slots_ / kStashShare; }
  // Room for `count` more records, wherever they land (buckets or stash).
  bool has_room(std::size_t count) const noexcept {
    return fits(live_ + count, table_slots_) && overflow_.size() + count <= stash_slots();
  }
  // The two buckets of `base`: the top bits of two unrelated multiplicative hashes of its granule
  // number; never the same bucket.
  std::size_t first_bucket(std::uintptr_t base) const noexcept {
    return static_cast<std::size_t>(address_hash(base) >> bucket_shift_);
  }
  std::size_t second_bucket(std::uintptr_t base, std::size_t first) const noexcept {
    const auto bucket = static_cast<std::size_t>(second_address_hash(base) >> bucket_shift_);
    return bucket == first ? bucket ^ 1 : bucket;
  }
  Reserve reserve_slow(std::size_t count) noexcept;
  // What rehash_into() achieved.
  enum class Rehash : std::uint8_t { done, stash_full, no_memory };
  // Moves every live record into `bigger` (empty, more slots), translating the links inside the
  // records; fills relocation_, which is all that changes here (the caller clears it on failure).
  Rehash rehash_into(ChunkStore& bigger) noexcept;

  // The arrays a free or a split reads at random, on huge pages once large (huge_page_allocator.h).
  HugePageVector<Chunk> records_;
  HugePageVector<ChunkState> states_;
  HugePageVector<ChunkHandle> prevs_;
  std::vector<Fence> fences_;
  PointerMap overflow_;                   // base -> handle, for the records in the stash
  std::vector<ChunkHandle> relocation_;   // old handle -> new, from the last rehash until end_relocation()
  std::size_t table_slots_ = 0;
  int bucket_shift_ = 0;                  // 64 - log2(bucket count)
  std::size_t stash_cursor_ = 0;          // where the search for an unused stash slot resumes
  std::size_t live_ = 0;
  std::uint32_t random_state_ = 0x9e3779b9u;  // xorshift32 state for treap priorities
};

}  // namespace gpumem::detail
