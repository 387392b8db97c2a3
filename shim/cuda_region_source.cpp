#include "cuda_region_source.h"

#include <cuda.h>

#include "real_driver.h"

namespace gpumem::shim {

Status CudaRegionSource::do_reserve(std::size_t bytes, Region& out) {
  CUdeviceptr base = 0;
  if (real_driver().cuMemAlloc_v2(&base, bytes) != CUDA_SUCCESS) return Status::out_of_memory;
  out = Region{static_cast<std::uintptr_t>(base), bytes};
  return Status::ok;
}

bool CudaRegionSource::do_release(const Region& region) {
  // The arena releases only wholly free, unfenced regions; cuMemFree_v2 also waits for the device.
  // It can be refused (during a graph capture, say): the arena then keeps the region.
  return real_driver().cuMemFree_v2(static_cast<CUdeviceptr>(region.base)) == CUDA_SUCCESS;
}

}  // namespace gpumem::shim
