// Regions for an arena, taken from the real driver with cuMemAlloc_v2 in the current context and
// given back with cuMemFree_v2.
#pragma once

#include <cuda.h>

#include <atomic>

#include "region_source.h"

namespace gpumem::shim {

// Each region is charged to the device's budget (budget/budgets.h) before it is taken, and refunded
// when it is given back.
class CudaRegionSource final : public RegionSource {
 public:
  explicit CudaRegionSource(CUdevice device) : device_(device) {}

  // Bytes of the regions held now (read without the arena's lock, for the trace).
  std::size_t bytes_reserved() const noexcept { return bytes_reserved_.load(std::memory_order_relaxed); }
  // The context went, and its regions with it: their charges are refunded (the arena keeps its
  // records, so its figures stay readable).
  void abandon() noexcept;

 private:
  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;

  const CUdevice device_;
  std::atomic<std::size_t> bytes_reserved_{0};
};

}  // namespace gpumem::shim
