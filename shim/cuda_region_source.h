// Regions for an arena, taken from the real driver with cuMemAlloc_v2 in the current context and
// given back with cuMemFree_v2.
#pragma once

#include "region_source.h"

namespace gpumem::shim {

class CudaRegionSource final : public RegionSource {
 private:
  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;
};

}  // namespace gpumem::shim
