// Regions for an arena, taken from the real driver with cuMemAlloc_v2 in the current context and
// given back with cuMemFree_v2.
#pragma once

#include <atomic>

#include "region_source.h"

namespace gpumem::shim {

class CudaRegionSource final : public RegionSource {
 public:
  // Bytes of the regions held now (read without the arena's lock, for the trace).
  std::size_t bytes_reserved() const noexcept { return bytes_reserved_.load(std::memory_order_relaxed); }

 private:
  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;

  std::atomic<std::size_t> bytes_reserved_{0};
};

}  // namespace gpumem::shim
