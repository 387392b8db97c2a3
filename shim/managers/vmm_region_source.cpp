#include "managers/vmm_region_source.h"

#include <algorithm>

#include "budget/budgets.h"
#include "intercept/real_driver.h"

namespace gpumem::shim {
namespace {

// Pieces per range: a preallocated range is mapped in at most this many mappings.
constexpr std::size_t kMappingsPerRange = 32;

CUmemAllocationProp device_memory(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

std::size_t round_up_to(std::size_t bytes, std::size_t unit) { return (bytes + unit - 1) / unit * unit; }

}  // namespace

std::size_t VmmRegionSource::granularity_for(CUdevice device) noexcept {
  const RealDriver& driver = real_driver();
  if (driver.cuDeviceGetAttribute == nullptr || driver.cuMemGetAllocationGranularity == nullptr ||
      driver.cuMemAddressReserve == nullptr || driver.cuMemAddressFree == nullptr || driver.cuMemCreate == nullptr ||
      driver.cuMemMap == nullptr || driver.cuMemUnmap == nullptr || driver.cuMemRelease == nullptr ||
      driver.cuMemSetAccess == nullptr) {
    return 0;
  }
  int supported = 0;
  if (driver.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return 0;
  }
  const CUmemAllocationProp prop = device_memory(device);
  std::size_t granularity = 0;
  if (driver.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
      CUDA_SUCCESS) {
    return 0;
  }
  // The arena needs a power of two of at least its 256-byte granule.
  return granularity >= 256 && (granularity & (granularity - 1)) == 0 ? granularity : 0;
}

VmmRegionSource::VmmRegionSource(CUdevice device, std::size_t range_bytes, std::size_t granularity)
    : device_(device),
      granule_(granularity),
      range_bytes_(round_up_to(range_bytes, granularity)),
      max_mapping_bytes_(std::max(granularity, round_up_to(range_bytes_ / kMappingsPerRange, granularity))) {}

std::uintptr_t VmmRegionSource::end() const noexcept {
  return mappings_.empty() ? range_base_ : mappings_.back().base + mappings_.back().size;
}

bool VmmRegionSource::map_one(std::uintptr_t at, std::size_t bytes) noexcept {
  const RealDriver& driver = real_driver();
  if (!budget::charge(device_, BudgetPath::arena, bytes, "an arena mapping")) return false;
  const CUmemAllocationProp prop = device_memory(device_);
  CUmemGenericAllocationHandle handle = 0;
  if (driver.cuMemCreate(&handle, bytes, &prop, 0) != CUDA_SUCCESS) {
    budget::refund(device_, BudgetPath::arena, bytes);
    return false;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const auto address = static_cast<CUdeviceptr>(at);
  if (driver.cuMemMap(address, bytes, 0, handle, 0) != CUDA_SUCCESS) {
    driver.cuMemRelease(handle);
    budget::refund(device_, BudgetPath::arena, bytes);
    return false;
  }
  if (driver.cuMemSetAccess(address, bytes, &access, 1) != CUDA_SUCCESS) {
    driver.cuMemUnmap(address, bytes);
    driver.cuMemRelease(handle);
    budget::refund(device_, BudgetPath::arena, bytes);
    return false;
  }
  mappings_.push_back(Mapping{at, bytes, handle});  // capacity secured by map_at_end
  bytes_reserved_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

bool VmmRegionSource::map_at_end(std::size_t bytes) noexcept {
  if (bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_ - bytes_reserved()) return false;
  const std::size_t kept = mappings_.size();
  try {
    mappings_.reserve(kept + (bytes + max_mapping_bytes_ - 1) / max_mapping_bytes_);
  } catch (...) {  // bad_alloc: no host memory for the records
    return false;
  }
  for (std::size_t mapped = 0; mapped < bytes;) {
    const std::size_t piece = std::min(max_mapping_bytes_, bytes - mapped);
    if (!map_one(end(), piece)) {
      while (mappings_.size() > kept && unmap_last()) {
      }
      return false;
    }
    mapped += piece;
  }
  return true;
}

bool VmmRegionSource::unmap_last() noexcept {
  const RealDriver& driver = real_driver();
  const Mapping mapping = mappings_.back();
  // The arena gives back only free, unfenced memory; cuMemUnmap also waits for the device. It can be
  // refused (during a graph capture, say): the mapping is then kept.
  if (driver.cuMemUnmap(static_cast<CUdeviceptr>(mapping.base), mapping.size) != CUDA_SUCCESS) return false;
  driver.cuMemRelease(mapping.handle);  // unmapped: the memory goes with its last reference
  mappings_.pop_back();
  bytes_reserved_.fetch_sub(mapping.size, std::memory_order_relaxed);
  budget::refund(device_, BudgetPath::arena, mapping.size);
  return true;
}

Status VmmRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!mappings_.empty()) return Status::out_of_memory;  // one region at a time
  if (range_base_ == 0) {
    CUdeviceptr base = 0;
    if (real_driver().cuMemAddressReserve(&base, range_bytes_, granule_, 0, 0) != CUDA_SUCCESS) {
      return Status::out_of_memory;
    }
    range_base_ = static_cast<std::uintptr_t>(base);
  }
  if (!map_at_end(bytes)) return Status::out_of_memory;
  out = Region{range_base_, bytes};
  return Status::ok;
}

bool VmmRegionSource::do_release(const Region& region) {
  if (region.base != range_base_ || region.size != bytes_reserved()) return false;
  while (!mappings_.empty()) {
    // Refused part way: the arena keeps its record, which no longer matches, so it grows and shrinks
    // no more (do_grow and do_shrink refuse) until abandon() gives the rest back.
    if (!unmap_last()) return false;
  }
  return true;  // the range stays reserved, for the next region
}

Status VmmRegionSource::do_grow(Region& region, std::size_t bytes) {
  if (region.base != range_base_ || region.size != bytes_reserved() || !map_at_end(bytes)) {
    return Status::out_of_memory;
  }
  region.size += bytes;
  return Status::ok;
}

std::size_t VmmRegionSource::do_shrink(Region& region, std::size_t bytes) {
  if (region.base != range_base_ || region.size != bytes_reserved()) return 0;
  const std::size_t before = bytes_reserved();
  // Whole mappings from the end; the first always stays (the region stays at least one granule).
  while (mappings_.size() > 1 && before - bytes_reserved() + mappings_.back().size <= bytes && unmap_last()) {
  }
  region.size = bytes_reserved();
  return before - region.size;
}

void VmmRegionSource::abandon() noexcept {
  while (!mappings_.empty()) {
    if (!unmap_last()) {  // the driver refused: forget the mapping, refund it all the same
      const Mapping mapping = mappings_.back();
      mappings_.pop_back();
      bytes_reserved_.fetch_sub(mapping.size, std::memory_order_relaxed);
      budget::refund(device_, BudgetPath::arena, mapping.size);
    }
  }
  if (range_base_ != 0) real_driver().cuMemAddressFree(static_cast<CUdeviceptr>(range_base_), range_bytes_);
  range_base_ = 0;
}

}  // namespace gpumem::shim
