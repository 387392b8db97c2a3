// Regions for an arena from CUDA's virtual memory management: one virtual range of twice the arena's
// limit is reserved (cuMemAddressReserve) at the first reservation, and physical memory (cuMemCreate,
// in pieces as piece_layout.h says: the first reservation, a preallocated limit, from one granule
// of the device's recommended granularity at the range's start, doubling, up to a 32nd of the limit;
// growth and memory mapped again one granule each) is mapped under the arena's one region, one
// cuMemMap per piece, readable and writable by the owning device and by the devices the program gave
// peer access to the context (cuMemSetAccess; cuCtxEnablePeerAccess opens cuMemAlloc memory only). The
// address space stays contiguous, so the arena's chunks coalesce across growth steps; the arena unmaps idle
// pieces anywhere in the region (their memory is released) and has the granules a block needs mapped
// again (in pieces of their own), so the limit bounds the memory mapped, and holes cost addresses only.
// It lends (region_source.h): an idle granule of a piece that also holds live blocks is mapped a
// second time (cuMemMap of the piece's handle at the granule's offset) where the arena needs memory
// the limit does not allow; that mapping adds no memory, and is not charged to the budget.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "exports/vmm_span.h"
#include "region_source.h"

namespace gpumem::shim {

// Each mapping is charged to the device's budget (BudgetPath::arena) before its memory is created
// and refunded once it is unmapped and released. Invariants: mappings_ are whole granules each, in
// address order, apart, inside [range_base_, range_base_ + extent_) (the region; unmapped granules
// are holes); their total is bytes_reserved(). CUDA unmaps whole mappings only, so an idle stretch
// goes back only in whole pieces (piece_at() tells the arena where they lie): the trade-off of
// preallocating a limit in few calls (192 GiB in 44 pieces at 2 MiB granules).
// Mappings are created exportable as POSIX descriptors where the driver allows it, so their blocks
// can be shared with legacy IPC (docs/ipc.md); a mapping's descriptor is exported at its first
// export, kept open (close-on-exec) and closed when the mapping goes.
class VmmRegionSource final : public RegionSource {
 public:
  // The device's recommended granularity for pinned device memory, or 0 when the driver does not
  // support virtual memory management on `device` (or the question fails).
  static std::size_t granularity_for(CUdevice device) noexcept;

  // The address range reserved, in limits: room for the holes fragmentation leaves.
  static constexpr std::size_t kRangeLimits = 2;

  // `granularity`: from granularity_for() (not 0). `limit_bytes`: the arena's limit; the range
  // reserved is kRangeLimits times it, rounded up to the granularity. `lends_granules`: every piece
  // one granule, the preallocation included, so that any idle granule can go back to the other
  // processes of a shared GPU (GPUMEM_SHARE=auto) at once.
  VmmRegionSource(CUdevice device, std::size_t limit_bytes, std::size_t granularity, bool lends_granules);

  std::size_t bytes_reserved() const noexcept { return bytes_reserved_.load(std::memory_order_relaxed); }
  // Pieces created and mapped so far: the driver allocations (cuMemCreate) the arena made.
  std::uint64_t pieces_mapped() const noexcept { return pieces_mapped_.load(std::memory_order_relaxed); }
  // The context went: unmaps and releases what it can, gives the range back, and refunds every
  // charge (the arena keeps its records, so its figures stay readable).
  void abandon() noexcept;
  // The mappings [block_base, + block_size) overlaps, each exported as a descriptor, into `span`
  // (inline, or past ipc::kInlineVmmPieces a list whose descriptor publish() takes over).
  // CUDA_SUCCESS, or a refusal already logged in one line (memory not created exportable, a block
  // over more than ipc::kMaxVmmPieces mappings, a driver error).
  CUresult export_span(std::uintptr_t block_base, std::size_t block_size, ipc::VmmSpan& span) const noexcept;
  // Whether a mapping starts at `address` (what the driver's cuMemGetAddressRange answers for memory in it).
  bool starts_mapping(std::uintptr_t address) const noexcept;
  // Peer access (peer_access.h): `accessor` gets read-write access to every mapping, now and later,
  // or loses it (CU_MEM_ACCESS_FLAGS_PROT_NONE for that device alone). The owning device is left as it
  // is. A refusal of the driver is logged in one line; the access then stays as it was.
  void set_peer_access(CUdevice accessor, bool enabled) noexcept;
  // The devices besides the owner that set_peer_access gave access.
  std::vector<CUdevice> peer_accessors() const;

 private:
  struct Mapping {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    bool exportable = false;       // created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    mutable int exported_fd = -1;  // its descriptor once exported (under pieces_mutex_)
    // A lent granule's second mapping: `handle` is its lender's (released with that mapping), at
    // `offset` in it; no memory or charge of its own.
    bool borrowed = false;
    std::size_t offset = 0;
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

  // Whether `region` is the one region held now.
  bool holds(const Region& region) const noexcept;
  Region do_piece_at(const Region& region, std::uintptr_t at) const override;

  // Maps [at, at + bytes) (nothing mapped there yet) in pieces, laid out (piece_layout.h) or one
  // granule each; all or nothing.
  bool map_range(std::uintptr_t at, std::size_t bytes, bool laid_out) noexcept;
  // Creates and maps one piece of `bytes` at `at`.
  bool map_one(std::uintptr_t at, std::size_t bytes) noexcept;
  // Unmaps and releases mappings_[index]; false (and the mapping kept) if the driver refuses.
  bool unmap_at(std::size_t index) noexcept;
  // Forgets mappings_[index] (unmapped or not), closing its descriptor and refunding its charge.
  void drop_at(std::size_t index) noexcept;
  // The index of the mapping at `base`, or mappings_.size().
  std::size_t index_of(std::uintptr_t base) const noexcept;
  // The index of the mapping holding `address`, or mappings_.size().
  std::size_t index_containing(std::uintptr_t address) const noexcept;
  // What a new mapping is opened to: read-write for the owning device (first) and each peer accessor.
  // Called with access_mutex_ held.
  std::vector<CUmemAccessDesc> access_descs() const;
  // cuMemSetAccess of access_descs() on a new mapping; a peer the driver refuses is left out (logged).
  bool open_to_accessors(CUdeviceptr address, std::size_t bytes) const noexcept;

  const CUdevice device_;
  const std::size_t granule_;
  const std::size_t largest_piece_;  // piece_layout.h
  const std::size_t range_bytes_;
  std::uintptr_t range_base_ = 0;  // 0 until the range is reserved
  std::size_t extent_ = 0;         // the region's size (mapped or not); 0 while none is held
  // mappings_ changes under the arena's lock and pieces_mutex_; exports read it under pieces_mutex_.
  mutable std::mutex pieces_mutex_;
  std::vector<Mapping> mappings_;
  bool exportable_refused_ = false;  // the driver refused exportable memory once: not asked again
  // Held by map_one and unmap_at as well, so that no mapping comes or goes while set_peer_access
  // applies a change to the mappings.
  mutable std::mutex access_mutex_;
  std::vector<CUdevice> peer_accessors_;  // under access_mutex_
  std::atomic<std::size_t> bytes_reserved_{0};
  std::atomic<std::uint64_t> pieces_mapped_{0};
};

}  // namespace gpumem::shim
