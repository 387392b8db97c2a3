// Regions for an arena from CUDA's virtual memory management: one virtual range of the arena's limit
// is reserved (cuMemAddressReserve) at the first reservation, and physical memory (cuMemCreate at the
// device's recommended granularity) is mapped at the end of the arena's one region as it grows,
// readable and writable by the owning device (cuMemSetAccess). The address space stays contiguous,
// so the arena's chunks coalesce across growth steps, and a free end is unmapped and released.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ipc/vmm_span.h"
#include "region_source.h"

namespace gpumem::shim {

// Each mapping is charged to the device's budget (BudgetPath::arena) before its memory is created
// and refunded once it is unmapped and released. Invariants: mappings_ lie back to back from
// range_base_, in address order; their total is bytes_reserved(); each is a multiple of granule_.
// Shrinking gives back whole mappings only, so a growth step is split into mappings of at most
// max_mapping_bytes_ (1/32 of the range, in granules): a preallocated range can give back its end too.
// Mappings are created exportable as POSIX descriptors where the driver allows it, so their blocks
// can be shared with legacy IPC (docs/ipc.md); a mapping's descriptor is exported at its first
// export, kept open (close-on-exec) and closed when the mapping goes.
class VmmRegionSource final : public RegionSource {
 public:
  // The device's recommended granularity for pinned device memory, or 0 when the driver does not
  // support virtual memory management on `device` (or the question fails).
  static std::size_t granularity_for(CUdevice device) noexcept;

  // `granularity`: from granularity_for() (not 0). `range_bytes`: the limit; rounded up to it.
  VmmRegionSource(CUdevice device, std::size_t range_bytes, std::size_t granularity);

  std::size_t bytes_reserved() const noexcept { return bytes_reserved_.load(std::memory_order_relaxed); }
  // The context went: unmaps and releases what it can, gives the range back, and refunds every
  // charge (the arena keeps its records, so its figures stay readable).
  void abandon() noexcept;
  // The mappings [block_base, + block_size) overlaps, each exported as a descriptor, into `span`.
  // CUDA_SUCCESS, or a refusal already logged in one line (memory not created exportable, a block
  // over more than ipc::kMaxVmmPieces mappings, a driver error).
  CUresult export_span(std::uintptr_t block_base, std::size_t block_size, ipc::VmmSpan& span) const noexcept;
  // Whether a mapping starts at `address` (what cuMemGetAddressRange answers for memory in it).
  bool starts_mapping(std::uintptr_t address) const noexcept;

 private:
  struct Mapping {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    bool exportable = false;       // created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    mutable int exported_fd = -1;  // its descriptor once exported (under pieces_mutex_)
  };

  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;
  std::size_t do_resize_granule() const noexcept override { return granule_; }
  Status do_grow(Region& region, std::size_t bytes) override;
  std::size_t do_shrink(Region& region, std::size_t bytes) override;

  // Maps `bytes` at the end of the mappings, in pieces; all or nothing.
  bool map_at_end(std::size_t bytes) noexcept;
  bool map_one(std::uintptr_t at, std::size_t bytes) noexcept;
  // Unmaps and releases the last mapping; false (and the mapping kept) if the driver refuses.
  bool unmap_last() noexcept;
  // Forgets the last mapping (unmapped or not), closing its descriptor and refunding its charge.
  void drop_last() noexcept;
  std::uintptr_t end() const noexcept;

  const CUdevice device_;
  const std::size_t granule_;
  const std::size_t range_bytes_;
  const std::size_t max_mapping_bytes_;
  std::uintptr_t range_base_ = 0;  // 0 until the range is reserved
  // mappings_ changes under the arena's lock and pieces_mutex_; exports read it under pieces_mutex_.
  mutable std::mutex pieces_mutex_;
  std::vector<Mapping> mappings_;
  bool exportable_refused_ = false;  // the driver refused exportable memory once: not asked again
  std::atomic<std::size_t> bytes_reserved_{0};
};

}  // namespace gpumem::shim
