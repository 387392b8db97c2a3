// Arena regions from the driver's cuMemAlloc, charged to the budget.
#include "regions/cuda_region_source.h"

#include <cuda.h>

#include "budget/budgets.h"
#include "driver/real_driver.h"

namespace gpumem::shim {

Status CudaRegionSource::do_reserve(std::size_t bytes, Region& out) {
  CUdeviceptr base = 0;
  if (budget::charged(device_, BudgetPath::arena, bytes, "an arena region",
                      [&] { return real_driver().cuMemAlloc_v2(&base, bytes); }) != CUDA_SUCCESS) {
    return Status::out_of_memory;
  }
  out = Region{static_cast<std::uintptr_t>(base), bytes};
  bytes_reserved_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::ok;
}

void CudaRegionSource::abandon() noexcept {
  budget::refund(device_, BudgetPath::arena, bytes_reserved_.exchange(0, std::memory_order_relaxed));
}

bool CudaRegionSource::do_release(const Region& region) {
  // The arena releases only wholly free, unfenced regions; cuMemFree_v2 also waits for the device.
  // It can be refused (during a graph capture, say): the arena then keeps the region.
  if (real_driver().cuMemFree_v2(static_cast<CUdeviceptr>(region.base)) != CUDA_SUCCESS) return false;
  bytes_reserved_.fetch_sub(region.size, std::memory_order_relaxed);
  budget::refund(device_, BudgetPath::arena, region.size);
  return true;
}

}  // namespace gpumem::shim
