// Regions for an arena from CUDA's virtual memory management: one virtual range of twice the arena's
// limit is reserved (cuMemAddressReserve) at the first reservation, and the arena's one region under
// it is backed as allocators/backing.h plans it: the first reservation (a preallocated limit, or the
// first growth step) in laid-out pieces, one cuMemCreate and one cuMemMap each; growth and memory
// mapped again in slabs of at least the arena's growth step, each mapped a granule at a time, whose
// unmapped granules keep their memory for the next mapping anywhere in the region (a cuMemMap instead
// of a cuMemCreate); beyond set_fine_above() (a shared GPU's memory past the member's guarantee) in
// slabs of one granule, which can go back one by one. Each request's new mappings are opened to the owning
// device and to the devices the program gave peer access to the context in one cuMemSetAccess
// (cuCtxEnablePeerAccess opens cuMemAlloc memory only); an unmap takes its mappings back to back in
// one cuMemUnmap. The address space stays contiguous, so the arena's chunks coalesce across growth
// steps, and holes cost addresses only. It lends (region_source.h): an idle granule of a piece that
// also holds live blocks is mapped a second time (cuMemMap of the piece's handle at the granule's
// offset) where the arena needs memory the limit does not allow; that mapping adds no memory, and is
// not charged to the budget.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backing.h"
#include "exports/vmm_span.h"
#include "region_source.h"
#include "thread_annotations.h"

namespace gpumem::shim {

// Each piece is charged to the device's budget (BudgetPath::arena) before its memory is created and
// refunded once it is released (a laid-out piece when it is unmapped; a slab when none of its
// granules is mapped and the arena gives back what its source keeps, release_idle()). Invariants: the
// backing's mappings lie inside [range_base_, range_base_ + extent_) (the region; unmapped granules
// are holes); bytes_reserved() is the memory the pieces hold, mapped or idle.
// Pieces are created exportable as POSIX descriptors where the driver allows it, so their blocks can
// be shared with legacy IPC (docs/ipc.md). No descriptor is kept: the descriptor service asks for a
// piece's (export_pieces) when an importer does, and closes it once sent.
class VmmRegionSource final : public RegionSource, public ipc::VmmPieceSource {
 public:
  // The device's recommended granularity for pinned device memory, or 0 when the driver does not
  // support virtual memory management on `device` (or the question fails).
  static std::size_t granularity_for(CUdevice device) noexcept;

  // The address range reserved, in limits: room for the holes fragmentation leaves.
  static constexpr std::size_t kRangeLimits = 2;

  // `granularity`: from granularity_for() (not 0). `limit_bytes`: the arena's limit; the range
  // reserved is kRangeLimits times it, rounded up to the granularity. `slab_bytes`: the least new
  // memory a growth takes (the arena's growth step). `fine_above`: set_fine_above()'s first value
  // (SIZE_MAX: every piece as large as the layout and the growth step make it).
  VmmRegionSource(CUdevice device, std::size_t limit_bytes, std::size_t granularity, std::size_t slab_bytes,
                  std::size_t fine_above);

  // The memory held: every piece's, mapped or kept idle for the next mapping; and the most held at once.
  std::size_t bytes_reserved() const noexcept { return bytes_reserved_.load(std::memory_order_relaxed); }
  std::size_t peak_bytes_reserved() const noexcept { return peak_bytes_reserved_.load(std::memory_order_relaxed); }
  // Pieces created so far: the driver allocations (cuMemCreate) the arena made.
  std::uint64_t pieces_mapped() const noexcept { return pieces_created_.load(std::memory_order_relaxed); }
  // New memory beyond this many bytes held is taken a granule per piece, so that it can go back
  // granule by granule (a shared GPU: the member's guarantee, which changes as members come and
  // go). Memory already held keeps its pieces: a larger one goes back whole, once wholly idle.
  // Laid-out pieces follow: at most a 32nd of the guarantee (or of the limit), as an unshared arena's.
  void set_fine_above(std::size_t bytes) noexcept;
  // The context went: unmaps and releases what it can, gives the range back, and refunds every
  // charge (the arena keeps its records, so its figures stay readable).
  void abandon() noexcept;
  // The mappings [block_base, + block_size) overlaps, as the pieces of memory behind them (one entry
  // per stretch of one piece) into `out`, for the export table. Each piece is exported once here, its
  // descriptor closed at once, so that the driver's refusal is the caller's and the driver's first
  // export (which may wait for the device) is not made later under the piece lock. CUDA_SUCCESS, or a
  // refusal already logged in one line (memory not created exportable, a block over more than
  // ipc::kMaxVmmPieces stretches, a driver error).
  CUresult export_span(std::uintptr_t block_base, std::size_t block_size, ipc::VmmExport& out) const noexcept;
  // For the descriptor service: each piece's descriptor, while it is the live piece `refs` names.
  CUresult export_pieces(std::span<const ipc::VmmPieceRef> refs, std::span<int> fds) const noexcept override;
  // Peer access (peer_access.h): `accessor` gets read-write access to every mapping, now and later,
  // or loses it (CU_MEM_ACCESS_FLAGS_PROT_NONE for that device alone). The owning device is left as it
  // is. A refusal of the driver is logged in one line; the access then stays as it was.
  void set_peer_access(CUdevice accessor, bool enabled) noexcept;
  // The devices besides the owner that set_peer_access gave access.
  std::vector<CUdevice> peer_accessors() const;

 private:
  // What the shim keeps of a piece beside the backing's record.
  struct PieceInfo {
    bool exportable = false;     // created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    bool exported_once = false;  // the driver exported it once (its later exports are quick)
  };

  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;
  std::size_t do_resize_granule() const noexcept override { return granule_; }
  Status do_grow(Region& region, std::size_t bytes) override;
  std::size_t do_unmap(const Region& region, std::uintptr_t at, std::size_t bytes) override;
  Status do_map(const Region& region, std::uintptr_t at, std::size_t bytes) override;
  bool do_lends() const noexcept override { return true; }
  Status do_grow_unbacked(Region& region, std::size_t bytes) override;
  Status do_lend(const Region& region, std::uintptr_t from, std::uintptr_t at) override;
  std::size_t do_idle_bytes() const noexcept override { return backing_.idle_bytes(); }
  std::size_t do_release_idle() override;

  // Whether `region` is the one region held now.
  bool holds(const Region& region) const noexcept;
  Region do_piece_at(const Region& region, std::uintptr_t at) const override;

  // Backs [at, at + bytes) (nothing mapped there yet) as the backing plans it: all or nothing.
  bool map_range(std::uintptr_t at, std::size_t bytes, Backing::Kind kind) noexcept;
  // Carries out `plan` for [at, at + bytes): creates its pieces (charged), maps, opens the range to
  // the accessors. On failure everything it did is undone and `refused_piece` says whether the driver
  // (or the budget) refused a new piece's memory.
  bool carry_out(const Backing::Plan& plan, std::uintptr_t at, std::size_t bytes, bool& refused_piece) noexcept;
  // Creates one piece of `bytes`, charged; 0 when refused.
  CUmemGenericAllocationHandle create_piece(std::size_t bytes, bool& exportable) noexcept;
  // Releases pieces that left the backing: handles, descriptors, charges.
  void release_pieces(const std::vector<Backing::Piece>& gone) noexcept;
  // Unmaps [at, at + bytes), whole mappings back to back, in one call where the driver takes it, else
  // one at a time; returns the mappings unmapped (a prefix of `mappings`).
  std::size_t unmap_mappings(const std::vector<Backing::Mapping>& mappings) noexcept;
  // What a new mapping is opened to: read-write for the owning device (first) and each peer accessor.
  // Called with access_mutex_ held.
  std::vector<CUmemAccessDesc> access_descs() const;
  // cuMemSetAccess of access_descs() on new mappings; a peer the driver refuses is left out (logged).
  bool open_to_accessors(CUdeviceptr address, std::size_t bytes) const noexcept;

  const CUdevice device_;
  const std::size_t granule_;
  const std::size_t limit_bytes_;
  const std::size_t range_bytes_;
  std::uintptr_t range_base_ = 0;  // 0 until the range is reserved
  std::size_t extent_ = 0;         // the region's size (mapped or not); 0 while none is held
  std::atomic<std::size_t> fine_above_;  // set from any thread; read under the arena's lock
  // The backing changes under the arena's lock and pieces_mutex_; exports (the descriptor service's
  // thread among them) and peer access read it under pieces_mutex_. A piece leaves the backing under
  // pieces_mutex_ before it is released, so a piece found live under it stays valid until it is let go.
  mutable Mutex pieces_mutex_;
  Backing backing_;
  mutable std::unordered_map<Backing::PieceId, PieceInfo> piece_info_ GPUMEM_GUARDED_BY(pieces_mutex_);
  bool exportable_refused_ = false;  // the driver refused exportable memory once: not asked again
  // Held by map_range and the unmapping paths as well, so that no mapping comes or goes while
  // set_peer_access applies a change to the mappings.
  mutable std::mutex access_mutex_;
  std::vector<CUdevice> peer_accessors_;  // under access_mutex_
  std::atomic<std::size_t> bytes_reserved_{0};
  std::atomic<std::size_t> peak_bytes_reserved_{0};
  void note_held() noexcept;  // bytes_reserved_ and its peak from the backing (under the arena's lock)
  std::atomic<std::uint64_t> pieces_created_{0};
};

}  // namespace gpumem::shim
