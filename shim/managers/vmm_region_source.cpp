#include "managers/vmm_region_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "budget/budgets.h"
#include "intercept/real_driver.h"
#include "ipc/export_table.h"
#include "log.h"

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
  CUmemAllocationProp prop = device_memory(device_);
  bool exportable = !exportable_refused_;
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  CUresult created = driver.cuMemCreate(&handle, bytes, &prop, 0);
  if (created != CUDA_SUCCESS && created != CUDA_ERROR_OUT_OF_MEMORY && exportable) {
    // Plain memory still serves the arena; only sharing its blocks is lost.
    exportable_refused_ = true;
    exportable = false;
    log::at(LogLevel::info, "device {}: the driver refused memory exportable as POSIX descriptors (error {}); "
            "blocks of the VMM arena cannot be shared with cuIpcGetMemHandle", device_, static_cast<int>(created));
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    created = driver.cuMemCreate(&handle, bytes, &prop, 0);
  }
  if (created != CUDA_SUCCESS) {
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
  {
    const std::lock_guard lock(pieces_mutex_);
    mappings_.push_back(Mapping{at, bytes, handle, exportable});  // capacity secured by map_at_end
  }
  bytes_reserved_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

bool VmmRegionSource::map_at_end(std::size_t bytes) noexcept {
  if (bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_ - bytes_reserved()) return false;
  const std::size_t kept = mappings_.size();
  try {
    const std::lock_guard lock(pieces_mutex_);  // an export may be reading the records
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
  const Mapping& mapping = mappings_.back();
  // The arena gives back only free, unfenced memory; cuMemUnmap also waits for the device. It can be
  // refused (during a graph capture, say): the mapping is then kept.
  if (driver.cuMemUnmap(static_cast<CUdeviceptr>(mapping.base), mapping.size) != CUDA_SUCCESS) return false;
  driver.cuMemRelease(mapping.handle);  // unmapped: the memory goes with its last reference
  drop_last();
  return true;
}

void VmmRegionSource::drop_last() noexcept {
  Mapping mapping;
  {
    const std::lock_guard lock(pieces_mutex_);
    mapping = mappings_.back();
    mappings_.pop_back();
  }
  // Importers hold their own references: their mappings stay.
  if (mapping.exported_fd >= 0) close(mapping.exported_fd);
  bytes_reserved_.fetch_sub(mapping.size, std::memory_order_relaxed);
  budget::refund(device_, BudgetPath::arena, mapping.size);
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
  // The blocks' handles stop opening before their descriptors close: a reused descriptor number
  // would name other memory.
  if (range_base_ != 0) ipc::withdraw_range(range_base_, range_base_ + range_bytes_);
  while (!mappings_.empty()) {
    if (!unmap_last()) drop_last();  // the driver refused: forget the mapping, refund it all the same
  }
  if (range_base_ != 0) real_driver().cuMemAddressFree(static_cast<CUdeviceptr>(range_base_), range_bytes_);
  range_base_ = 0;
}

bool VmmRegionSource::starts_mapping(std::uintptr_t address) const noexcept {
  try {
    const std::lock_guard lock(pieces_mutex_);
    const auto found = std::lower_bound(mappings_.begin(), mappings_.end(), address,
                                        [](const Mapping& mapping, std::uintptr_t at) { return mapping.base < at; });
    return found != mappings_.end() && found->base == address;
  } catch (...) {  // the lock failed
    return false;
  }
}

CUresult VmmRegionSource::export_span(std::uintptr_t block_base, std::size_t block_size,
                                     ipc::VmmSpan& span) const noexcept {
  const RealDriver& driver = real_driver();
  const std::uintptr_t block_end = block_base + block_size;
  span = ipc::VmmSpan{};
  try {
    const std::lock_guard lock(pieces_mutex_);
    for (const Mapping& mapping : mappings_) {
      if (mapping.base + mapping.size <= block_base || mapping.base >= block_end) continue;
      if (!mapping.exportable || driver.cuMemExportToShareableHandle == nullptr) {
        log::at(LogLevel::error, "cuIpcGetMemHandle: {:#x} lies in arena memory the driver could not make "
                "exportable; it cannot be shared", block_base);
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (span.piece_count == ipc::kMaxVmmPieces) {
        log::at(LogLevel::error, "cuIpcGetMemHandle: the {}-byte block at {:#x} lies over more than {} of the "
                "arena's mappings; it cannot be shared", block_size, block_base, ipc::kMaxVmmPieces);
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (mapping.exported_fd < 0) {  // exported once, kept for later exports while the mapping lives
        int fd = -1;
        const CUresult exported =
            driver.cuMemExportToShareableHandle(&fd, mapping.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (exported != CUDA_SUCCESS) {
          log::at(LogLevel::error, "cuIpcGetMemHandle: the driver refused to export the memory under {:#x} "
                  "(error {})", block_base, static_cast<int>(exported));
          return exported;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);  // the program's children get none of the arena's memory
        mapping.exported_fd = fd;
      }
      if (span.piece_count == 0) span.offset = block_base - mapping.base;
      span.pieces[span.piece_count++] = ipc::VmmPiece{mapping.exported_fd, 0, mapping.size};
    }
  } catch (...) {  // the lock failed
    return CUDA_ERROR_UNKNOWN;
  }
  return span.piece_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace gpumem::shim
