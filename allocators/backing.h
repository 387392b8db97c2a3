// Backing: how the memory behind one resizable region is held, as CUDA's virtual memory management
// holds it: pieces of physical memory (one cuMemCreate each) placed at the region's addresses by
// mappings (one cuMemMap each). Device-agnostic bookkeeping shared by the shim's virtual-memory
// source, which makes the driver calls it plans, and the sources without a device, which count them:
// the replay and the benchmarks see the calls the shim would make.
//
// Two kinds of pieces. A laid-out piece (the first reservation, piece_layout.h) is mapped whole by
// one mapping: a whole preallocation in few calls; its memory goes back only whole, and its idle
// granules serve elsewhere only when lent (mapped a second time). A slab (growth, and memory mapped
// again after it was unmapped) is mapped one granule at a time, so any of its granules can be
// unmapped; the granule's memory then waits in the slab for the next mapping anywhere in the region.
// Memory thus moves to where blocks need it with a cuMemMap (about a microsecond) instead of a
// cuMemCreate (a few hundred). A slab's memory goes back once none of its granules is mapped and its
// holder asks (release_idle(): a trim, another process's reclaim), not at once: memory that moves
// from one place to another would otherwise be given back and created again.
// A slab holds at least `slab_bytes` (fewer creations), or a single granule where its memory must be
// able to go back granule by granule (`fine`: a shared GPU's memory beyond the guarantee).
//
// Planning and recording are separate, so a caller can make the calls a plan needs and record only
// what succeeded: plan_map() says which pieces to create and which mappings to make; commit_map()
// records them once made. unmap() records at once (an unmap is not undone) and says which pieces
// went with it.
//
// Records are kept so that every call costs in proportion to the mappings it names, not to all of
// them: one slot per granule of the range says what is mapped there (a region of hundreds of
// gigabytes has a few hundred thousand granules, and maps and unmaps them all the time), and slabs
// with idle granules are listed by how many they have, so a plan finds the fullest ones at once.
//
// Invariants (validate()): mappings are disjoint, whole granules each; a mapping maps a range inside
// its piece; a laid-out piece has exactly one mapping that is not borrowed, covering it; each granule
// of a slab is either mapped by exactly one mapping or listed idle once; every live piece has a
// mapping or an idle granule; a piece's `loans` counts its borrowed mappings; a slab with idle
// granules is in the idle list of its count (the last list: that many or more), others in none;
// held_bytes() is the sum of the live pieces' sizes and mapped_bytes() that of the mappings that
// are not borrowed.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gpumem {

class Backing {
 public:
  using PieceId = std::uint32_t;
  static constexpr PieceId kNoPiece = UINT32_MAX;

  struct Mapping {
    std::uintptr_t base = 0;  // in the region; a granule multiple
    std::size_t size = 0;     // a laid-out piece's size, or one granule
    PieceId piece = kNoPiece;
    std::size_t offset = 0;   // of the mapping's first byte in its piece
    bool borrowed = false;    // a laid-out piece's idle granule mapped a second time: no memory of its own
  };

  struct Piece {
    PieceId id = kNoPiece;
    std::size_t size = 0;
    std::uint64_t handle = 0;  // the platform's handle of the memory (the shim's CUmemGenericAllocationHandle)
    bool live = false;
    bool slab = false;
    std::size_t mapped_granules = 0;   // slab: its granules mapped now
    std::vector<std::uint32_t> idle;   // slab: its granules not mapped (granule indices), reused last-in first
    std::size_t loans = 0;             // laid-out: its granules mapped a second time (borrowed mappings)
    PieceId idle_prev = kNoPiece;      // slab with idle granules: its neighbours in the idle list of its count
    PieceId idle_next = kNoPiece;
  };

  enum class Kind : std::uint8_t {
    laid_out,  // pieces as piece_layout.h lays them out from the region's start, one mapping each
    slabs,     // granule mappings, idle slab granules first, then a new slab of at least slab_bytes
    fine,      // granule mappings, idle slab granules first, then slabs of one granule each
  };

  // What one map request needs: pieces to create (new_pieces[i], to be recorded as piece
  // new_ids[i]), then the mappings, in address order, each one cuMemMap.
  struct Plan {
    Kind kind = Kind::slabs;
    std::vector<std::size_t> new_pieces;
    std::vector<PieceId> new_ids;
    std::vector<Mapping> mappings;
    std::size_t granules_reused = 0;  // idle slab granules the plan maps again
  };

  // `range_base`: where the region starts (set_range_base() when known later); `granule`: a power of
  // two; `largest_piece`: laid-out pieces are at most this (piece_layout.h); `slab_bytes`: a new slab
  // holds at least this (rounded down to the granule, at least one).
  Backing(std::uintptr_t range_base, std::size_t granule, std::size_t largest_piece, std::size_t slab_bytes);
  void set_range_base(std::uintptr_t base) noexcept { range_base_ = base; }
  // Pieces laid out from now on are at most `bytes` (at least a granule); those held keep their size.
  void set_largest_piece(std::size_t bytes) noexcept {
    largest_piece_.store(bytes < granule_ ? granule_ : bytes, std::memory_order_relaxed);
  }

  // Plans mapping [at, at + bytes) (whole granules, nothing mapped there). A new slab holds at least
  // `slab_bytes` (default: the backing's; a caller whose platform refused that much asks for no more
  // than needed, 0). False when there is no host memory for the plan.
  bool plan_map(std::uintptr_t at, std::size_t bytes, Kind kind, Plan& plan,
                std::size_t slab_bytes = std::size_t(-1)) const;
  // Records `plan` as made: `handles[i]` is the handle of new_pieces[i]. Needs the room
  // reserve_for(plan) secures (false from that: no host memory; nothing recorded). Nothing may change
  // the backing between the plan and its record.
  bool reserve_for(const Plan& plan);
  void commit_map(const Plan& plan, std::span<const std::uint64_t> handles) noexcept;
  // The plan was not carried out (after reserve_for): its records stay free for the next.
  void abandon(const Plan& plan) noexcept;

  // The mappings lying wholly in [at, at + bytes), in address order, from `at` on while they follow
  // each other back to back (a mapping reaching past the range, or a gap, ends the list).
  std::vector<Mapping> mappings_from(std::uintptr_t at, std::size_t bytes) const;
  // Whether unmapping `mappings` would take a lender's mapping while one of its loans stays mapped
  // outside them.
  bool strands_a_loan(std::span<const Mapping> mappings) const noexcept;
  // Records the unmapping of exactly those mappings (what mappings_from() listed, or a prefix of it):
  // a laid-out piece goes with its mapping (appended to `gone`: the caller releases it, and its
  // memory goes); a slab's granule goes idle, and a slab with nothing mapped stays, idle, until
  // release_idle(). `gone` needs room for one piece per mapping (no allocation here).
  void unmap(std::span<const Mapping> mappings, std::vector<Piece>& gone) noexcept;
  // The slabs with no granule mapped leave (appended to `gone`, which needs room for piece_count()):
  // the caller releases them, and their memory goes. Returns their bytes.
  std::size_t release_idle(std::vector<Piece>& gone) noexcept;

  // A borrowed mapping: the idle granule at `from` (of a laid-out piece's mapping, not itself
  // borrowed) mapped again at `at`. Returns it, or a mapping with piece == kNoPiece where `from` is
  // not such a granule.
  Mapping plan_loan(std::uintptr_t from, std::uintptr_t at) const noexcept;
  bool reserve_for_loan(const Mapping& loan);
  void commit_loan(const Mapping& loan) noexcept;

  // The mapping holding `address`, or nothing.
  std::optional<Mapping> mapping_at(std::uintptr_t address) const noexcept;
  // Every mapping, in address order (made on each call: for the slow paths, releasing everything,
  // opening the memory to a peer).
  std::vector<Mapping> mappings() const;
  const Piece& piece(PieceId id) const { return pieces_[id]; }
  std::size_t piece_count() const noexcept { return pieces_.size(); }

  std::size_t held_bytes() const noexcept { return held_bytes_; }
  std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }
  // Memory held but mapped nowhere: idle slab granules, waiting for the next mapping.
  std::size_t idle_bytes() const noexcept { return held_bytes_ - mapped_bytes_; }
  std::size_t granule() const noexcept { return granule_; }

  // Forgets every mapping and piece (the caller unmapped and released them).
  void clear() noexcept;
  bool validate() const noexcept;

 private:
  // What one granule of the range holds: nothing (piece == kNoPiece), or granule `granule` of
  // `piece` (of a laid-out piece mapped whole, or a slab's or a borrowed granule mapped alone).
  struct Slot {
    PieceId piece = kNoPiece;
    std::uint32_t granule = 0;
    bool borrowed = false;
  };
  // Slabs with idle granules, one list per count: list k holds those with k idle (the last list, k
  // or more); a plan takes from the lowest first.
  static constexpr std::size_t kIdleLists = 64;

  std::size_t slot_of(std::uintptr_t address) const noexcept { return (address - range_base_) / granule_; }
  // The mapping whose granule `slot` is (which must hold one).
  Mapping mapping_of(std::size_t slot) const noexcept;
  void set_slots(const Mapping& mapping, Slot value) noexcept;
  static std::size_t idle_list_of(std::size_t idle) noexcept { return idle < kIdleLists ? idle : kIdleLists - 1; }
  void unlink_idle(PieceId id) noexcept;  // from its idle list, if in one
  void link_idle(PieceId id) noexcept;    // into the list of its idle count, if it has idle granules
  void forget(PieceId id, std::vector<Piece>& gone) noexcept;  // piece `id` leaves, into `gone`

  std::uintptr_t range_base_;
  const std::size_t granule_;
  std::atomic<std::size_t> largest_piece_;  // set from any thread; read when a mapping is planned
  const std::size_t slab_bytes_;
  std::vector<Piece> pieces_;       // by PieceId; a dead piece's record is reused
  std::vector<PieceId> free_ids_;
  std::vector<Slot> slots_;         // by granule from range_base_, as far as anything was mapped
  std::array<PieceId, kIdleLists> idle_heads_;
  std::size_t held_bytes_ = 0;
  std::size_t mapped_bytes_ = 0;
};

}  // namespace gpumem
