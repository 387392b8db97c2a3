// One arena region under a reserved virtual range, mapped in pieces (piece_layout.h).
#include "regions/vmm_region_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "budget/budgets.h"
#include "driver/real_driver.h"
#include "exports/export_table.h"
#include "base/log.h"
#include "checked_size.h"
#include "piece_layout.h"

namespace gpumem::shim {
namespace {

CUmemAllocationProp device_memory(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Rounded up to whole `unit`s; where that does not fit, rounded down instead.
std::size_t round_up_to(std::size_t bytes, std::size_t unit) {
  return checked_round_up(bytes, unit).value_or(bytes / unit * unit);
}

CUmemAccessDesc read_write_for(CUdevice device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

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

VmmRegionSource::VmmRegionSource(CUdevice device, std::size_t limit_bytes, std::size_t granularity,
                                 bool lends_granules)
    : device_(device),
      granule_(granularity),
      largest_piece_(lends_granules ? granularity : largest_piece_for(limit_bytes, granularity)),
      range_bytes_(round_up_to(saturating_mul(kRangeLimits, limit_bytes), granularity)) {}

std::size_t VmmRegionSource::index_containing(std::uintptr_t address) const noexcept {
  auto found = std::upper_bound(mappings_.begin(), mappings_.end(), address,
                                [](std::uintptr_t at, const Mapping& mapping) { return at < mapping.base; });
  if (found == mappings_.begin()) return mappings_.size();
  --found;
  return address - found->base < found->size ? static_cast<std::size_t>(found - mappings_.begin()) : mappings_.size();
}

Region VmmRegionSource::do_piece_at(const Region& region, std::uintptr_t at) const {
  if (!holds(region)) return Region{};
  const std::size_t index = index_containing(at);  // mappings_ changes only under the arena's lock, held here
  return index == mappings_.size() ? Region{} : Region{mappings_[index].base, mappings_[index].size};
}

std::size_t VmmRegionSource::index_of(std::uintptr_t base) const noexcept {
  const auto found = std::lower_bound(mappings_.begin(), mappings_.end(), base,
                                      [](const Mapping& mapping, std::uintptr_t at) { return mapping.base < at; });
  return found != mappings_.end() && found->base == base ? static_cast<std::size_t>(found - mappings_.begin())
                                                         : mappings_.size();
}

bool VmmRegionSource::holds(const Region& region) const noexcept {
  return extent_ != 0 && region.base == range_base_ && region.size == extent_;
}

bool VmmRegionSource::map_one(std::uintptr_t at, std::size_t bytes) noexcept {
  const RealDriver& driver = real_driver();
  CUmemGenericAllocationHandle handle = 0;
  bool exportable = !exportable_refused_;
  const auto address = static_cast<CUdeviceptr>(at);
  // The peer accessors stay as they are from the mapping until it is recorded.
  std::unique_lock access_lock(access_mutex_, std::defer_lock);
  const CUresult mapped = budget::charged(device_, BudgetPath::arena, bytes, "an arena mapping", [&] {
    CUmemAllocationProp prop = device_memory(device_);
    if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUresult result = driver.cuMemCreate(&handle, bytes, &prop, 0);
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_OUT_OF_MEMORY && exportable) {
      // Plain memory still serves the arena; only sharing its blocks is lost.
      exportable_refused_ = true;
      exportable = false;
      log::at(LogLevel::info, "device {}: the driver refused memory exportable as POSIX descriptors (error {}); "
              "blocks of the VMM arena cannot be shared with cuIpcGetMemHandle", device_, static_cast<int>(result));
      prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
      result = driver.cuMemCreate(&handle, bytes, &prop, 0);
    }
    if (result != CUDA_SUCCESS) return result;
    access_lock.lock();
    result = driver.cuMemMap(address, bytes, 0, handle, 0);
    if (result == CUDA_SUCCESS && !open_to_accessors(address, bytes)) {
      driver.cuMemUnmap(address, bytes);
      result = CUDA_ERROR_INVALID_VALUE;
    }
    if (result != CUDA_SUCCESS) driver.cuMemRelease(handle);
    return result;
  });
  if (mapped != CUDA_SUCCESS) return false;
  {
    const std::lock_guard lock(pieces_mutex_);
    const auto position = std::lower_bound(mappings_.begin(), mappings_.end(), at,
                                           [](const Mapping& mapping, std::uintptr_t base) { return mapping.base < base; });
    mappings_.insert(position, Mapping{at, bytes, handle, exportable});  // capacity secured by map_range
  }
  bytes_reserved_.fetch_add(bytes, std::memory_order_relaxed);
  pieces_mapped_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool VmmRegionSource::map_range(std::uintptr_t at, std::size_t bytes, bool laid_out) noexcept {
  if (bytes == 0 || bytes % granule_ != 0 || at % granule_ != 0 || at < range_base_ ||
      at - range_base_ > range_bytes_ || bytes > range_bytes_ - (at - range_base_)) {
    return false;
  }
  // Nothing mapped there yet: the first mapping ending after `at` starts at or after the range's end.
  const auto after = std::upper_bound(mappings_.begin(), mappings_.end(), at, [](std::uintptr_t address, const Mapping& mapping) {
    return address < mapping.base + mapping.size;
  });
  if (after != mappings_.end() && after->base < at + bytes) return false;
  const auto piece_at_offset = [&](std::size_t done) {
    return std::min(bytes - done, laid_out ? piece_bytes_at(at + done - range_base_, granule_, largest_piece_) : granule_);
  };
  std::size_t pieces = 0;
  for (std::size_t done = 0; done < bytes; ++pieces) done += piece_at_offset(done);
  try {
    const std::lock_guard lock(pieces_mutex_);  // an export may be reading the records
    mappings_.reserve(mappings_.size() + pieces);
  } catch (...) {  // bad_alloc: no host memory for the records
    return false;
  }
  for (std::size_t mapped = 0; mapped < bytes;) {
    const std::size_t piece = piece_at_offset(mapped);
    if (!map_one(at + mapped, piece)) {
      // All or nothing: the pieces of this call go again (refused: kept, and forgotten all the same).
      for (std::size_t index = index_of(at); index < mappings_.size() && mappings_[index].base < at + mapped;) {
        if (!unmap_at(index)) drop_at(index);
      }
      return false;
    }
    mapped += piece;
  }
  return true;
}

bool VmmRegionSource::unmap_at(std::size_t index) noexcept {
  const RealDriver& driver = real_driver();
  const std::lock_guard access_lock(access_mutex_);
  const Mapping& mapping = mappings_[index];
  // The arena gives back only free, unfenced memory; cuMemUnmap also waits for the device. It can be
  // refused (during a graph capture, say): the mapping is then kept.
  if (driver.cuMemUnmap(static_cast<CUdeviceptr>(mapping.base), mapping.size) != CUDA_SUCCESS) return false;
  // Unmapped: the memory goes with its last reference (a borrowed granule holds none of its own).
  if (!mapping.borrowed) driver.cuMemRelease(mapping.handle);
  drop_at(index);
  return true;
}

void VmmRegionSource::drop_at(std::size_t index) noexcept {
  Mapping mapping;
  {
    const std::lock_guard lock(pieces_mutex_);
    mapping = mappings_[index];
    mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(index));
  }
  // Importers hold their own references: their mappings stay.
  if (mapping.exported_fd >= 0) close(mapping.exported_fd);
  if (mapping.borrowed) return;  // its memory is its lender's, charged there
  bytes_reserved_.fetch_sub(mapping.size, std::memory_order_relaxed);
  budget::refund(device_, BudgetPath::arena, mapping.size);
}

Status VmmRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (extent_ != 0 || !mappings_.empty() || bytes > range_bytes_) return Status::out_of_memory;  // one region
  if (range_base_ == 0) {
    CUdeviceptr base = 0;
    if (real_driver().cuMemAddressReserve(&base, range_bytes_, granule_, 0, 0) != CUDA_SUCCESS) {
      return Status::out_of_memory;
    }
    range_base_ = static_cast<std::uintptr_t>(base);
  }
  if (!map_range(range_base_, bytes, true)) return Status::out_of_memory;
  extent_ = bytes;
  out = Region{range_base_, bytes};
  return Status::ok;
}

bool VmmRegionSource::do_release(const Region& region) {
  if (!holds(region)) return false;
  while (!mappings_.empty()) {
    // Refused part way: the arena keeps its record and this source its extent, so unmapping and
    // mapping go on as before until abandon() gives the rest back.
    if (!unmap_at(mappings_.size() - 1)) return false;
  }
  extent_ = 0;
  return true;  // the range stays reserved, for the next region
}

Status VmmRegionSource::do_grow(Region& region, std::size_t bytes) {
  if (!holds(region) || bytes > range_bytes_ - extent_ || !map_range(range_base_ + extent_, bytes, false)) {
    return Status::out_of_memory;
  }
  extent_ += bytes;
  region.size = extent_;
  return Status::ok;
}

std::size_t VmmRegionSource::do_unmap(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!holds(region) || at % granule_ != 0 || bytes % granule_ != 0 || at < range_base_ ||
      at - range_base_ > extent_ || bytes > extent_ - (at - range_base_)) {
    return 0;
  }
  // Whole mappings from `at` on; one not mapped there, reaching past the range (a broken contract)
  // or refused stops it.
  std::size_t given = 0;
  while (given < bytes) {
    const std::size_t index = index_of(at + given);
    if (index == mappings_.size() || mappings_[index].size > bytes - given) break;
    const std::size_t size = mappings_[index].size;
    if (!unmap_at(index)) break;
    given += size;
  }
  return given;
}

Status VmmRegionSource::do_map(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!holds(region) || at < range_base_ || at - range_base_ > extent_ || bytes > extent_ - (at - range_base_) ||
      !map_range(at, bytes, false)) {
    return Status::out_of_memory;
  }
  return Status::ok;
}

Status VmmRegionSource::do_grow_unbacked(Region& region, std::size_t bytes) {
  if (!holds(region) || bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_ - extent_) {
    return Status::out_of_memory;
  }
  extent_ += bytes;  // addresses only: lend() and map() back them
  region.size = extent_;
  return Status::ok;
}

Status VmmRegionSource::do_lend(const Region& region, std::uintptr_t from, std::uintptr_t at) {
  if (!holds(region) || at % granule_ != 0 || from % granule_ != 0 || at < range_base_ || from < range_base_ ||
      at - range_base_ >= extent_ || from - range_base_ >= extent_ || index_containing(at) != mappings_.size()) {
    return Status::out_of_memory;
  }
  const std::size_t lender = index_containing(from);
  if (lender == mappings_.size() || mappings_[lender].borrowed) return Status::out_of_memory;
  try {
    const std::lock_guard lock(pieces_mutex_);  // an export may be reading the records
    mappings_.reserve(mappings_.size() + 1);
  } catch (...) {  // bad_alloc: no host memory for the record
    return Status::out_of_memory;
  }
  Mapping borrowed = mappings_[lender];
  borrowed.offset += from - borrowed.base;
  borrowed.base = at;
  borrowed.size = granule_;
  borrowed.exported_fd = -1;
  borrowed.borrowed = true;
  const RealDriver& driver = real_driver();
  const auto address = static_cast<CUdeviceptr>(at);
  {
    const std::lock_guard access_lock(access_mutex_);
    if (driver.cuMemMap(address, granule_, borrowed.offset, borrowed.handle, 0) != CUDA_SUCCESS) {
      return Status::out_of_memory;  // a driver that maps allocations only from their start, say
    }
    if (!open_to_accessors(address, granule_)) {
      driver.cuMemUnmap(address, granule_);
      return Status::out_of_memory;
    }
    const std::lock_guard lock(pieces_mutex_);
    const auto position = std::lower_bound(mappings_.begin(), mappings_.end(), at,
                                           [](const Mapping& mapping, std::uintptr_t base) { return mapping.base < base; });
    mappings_.insert(position, borrowed);  // capacity secured above
  }
  return Status::ok;
}

void VmmRegionSource::abandon() noexcept {
  // The blocks' handles stop opening before their descriptors close: a reused descriptor number
  // would name other memory.
  if (range_base_ != 0) ipc::withdraw_range(range_base_, range_base_ + range_bytes_);
  while (!mappings_.empty()) {
    const std::size_t last = mappings_.size() - 1;
    if (!unmap_at(last)) drop_at(last);  // the driver refused: forget the mapping, refund it all the same
  }
  if (range_base_ != 0) real_driver().cuMemAddressFree(static_cast<CUdeviceptr>(range_base_), range_bytes_);
  range_base_ = 0;
  extent_ = 0;
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

std::vector<CUmemAccessDesc> VmmRegionSource::access_descs() const {
  std::vector<CUmemAccessDesc> access;
  access.reserve(1 + peer_accessors_.size());
  access.push_back(read_write_for(device_));
  for (const CUdevice device : peer_accessors_) access.push_back(read_write_for(device));
  return access;
}

bool VmmRegionSource::open_to_accessors(CUdeviceptr address, std::size_t bytes) const noexcept {
  const RealDriver& driver = real_driver();
  try {
    const std::vector<CUmemAccessDesc> access = access_descs();
    CUresult result = driver.cuMemSetAccess(address, bytes, access.data(), access.size());
    if (result != CUDA_SUCCESS && access.size() > 1) {
      // A peer the driver no longer accepts must not stop the arena from mapping memory.
      log::at(LogLevel::warn, "device {}: the driver refused peer access to a new arena mapping (error {}); "
              "peer devices cannot reach the blocks in it", device_, static_cast<int>(result));
      result = driver.cuMemSetAccess(address, bytes, access.data(), 1);
    }
    return result == CUDA_SUCCESS;
  } catch (...) {  // bad_alloc: no host memory for the list
    return false;
  }
}

std::vector<CUdevice> VmmRegionSource::peer_accessors() const {
  const std::lock_guard lock(access_mutex_);
  return peer_accessors_;
}

void VmmRegionSource::set_peer_access(CUdevice accessor, bool enabled) noexcept {
  if (accessor == device_) return;  // the owner's access is the arena's own
  try {
    const std::lock_guard lock(access_mutex_);
    const auto found = std::find(peer_accessors_.begin(), peer_accessors_.end(), accessor);
    if ((found != peer_accessors_.end()) == enabled) return;
    if (enabled) {
      peer_accessors_.push_back(accessor);
    } else {
      peer_accessors_.erase(found);
    }
    // The mapped ranges, adjacent mappings joined: cuMemSetAccess takes several whole mappings at once.
    std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;
    {
      const std::lock_guard pieces_lock(pieces_mutex_);
      for (const Mapping& mapping : mappings_) {
        if (!ranges.empty() && ranges.back().first + ranges.back().second == mapping.base) {
          ranges.back().second += mapping.size;
        } else {
          ranges.emplace_back(mapping.base, mapping.size);
        }
      }
    }
    CUmemAccessDesc access = read_write_for(accessor);
    if (!enabled) access.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // for this device alone
    for (const auto& [base, size] : ranges) {
      const CUresult result = real_driver().cuMemSetAccess(static_cast<CUdeviceptr>(base), size, &access, 1);
      if (result == CUDA_SUCCESS) continue;
      if (enabled) {
        log::at(LogLevel::warn, "device {}: the driver refused device {} access to the arena's memory (error {}); "
                "that device cannot reach the blocks of this context", device_, accessor, static_cast<int>(result));
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // what was granted goes back, and later mappings ask nothing
        for (const auto& [granted_base, granted_size] : ranges) {
          if (granted_base == base) break;
          real_driver().cuMemSetAccess(static_cast<CUdeviceptr>(granted_base), granted_size, &access, 1);
        }
        peer_accessors_.pop_back();
      } else {
        log::at(LogLevel::warn, "device {}: the driver refused to take back device {}'s access to the arena's "
                "memory (error {}); it keeps that access", device_, accessor, static_cast<int>(result));
      }
      return;
    }
  } catch (...) {  // no host memory for the records, or a lock failed: the access stays as it was
  }
}

CUresult VmmRegionSource::export_span(std::uintptr_t block_base, std::size_t block_size,
                                     ipc::VmmSpan& span) const noexcept {
  const RealDriver& driver = real_driver();
  const std::uintptr_t block_end = block_base + block_size;
  span = ipc::VmmSpan{};
  try {
    std::vector<ipc::VmmPiece> pieces;
    const std::lock_guard lock(pieces_mutex_);
    // The mappings the block overlaps: from the one holding its first byte on.
    auto mapping = std::upper_bound(mappings_.begin(), mappings_.end(), block_base,
                                    [](std::uintptr_t at, const Mapping& piece) { return at < piece.base + piece.size; });
    for (; mapping != mappings_.end() && mapping->base < block_end; ++mapping) {
      if (!mapping->exportable || driver.cuMemExportToShareableHandle == nullptr) {
        log::at(LogLevel::error, "cuIpcGetMemHandle: {:#x} lies in arena memory the driver could not make "
                "exportable; it cannot be shared", block_base);
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (pieces.size() == ipc::kMaxVmmPieces) {
        log::at(LogLevel::error, "cuIpcGetMemHandle: the {}-byte block at {:#x} lies over more than {} of the "
                "arena's mappings; it cannot be shared", block_size, block_base, ipc::kMaxVmmPieces);
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (mapping->exported_fd < 0) {  // exported once, kept for later exports while the mapping lives
        int fd = -1;
        const CUresult exported =
            driver.cuMemExportToShareableHandle(&fd, mapping->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (exported != CUDA_SUCCESS) {
          log::at(LogLevel::error, "cuIpcGetMemHandle: the driver refused to export the memory under {:#x} "
                  "(error {})", block_base, static_cast<int>(exported));
          return exported;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);  // the program's children get none of the arena's memory
        mapping->exported_fd = fd;
      }
      if (pieces.empty()) span.offset = block_base - mapping->base;
      pieces.push_back(ipc::VmmPiece{mapping->exported_fd, 0, mapping->size, mapping->offset});
    }
    if (pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
    span.piece_count = static_cast<std::uint32_t>(pieces.size());
    if (pieces.size() <= ipc::kInlineVmmPieces) {
      std::copy(pieces.begin(), pieces.end(), span.pieces);
    } else if ((span.list_fd = ipc::make_piece_list(pieces)) < 0) {
      log::at(LogLevel::error, "cuIpcGetMemHandle: cannot record the {} mappings of the {}-byte block at {:#x} "
              "(no memfd or memory); it cannot be shared", pieces.size(), block_size, block_base);
      span = ipc::VmmSpan{};
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  } catch (...) {  // the lock failed, or no host memory for the list
    span = ipc::VmmSpan{};
    return CUDA_ERROR_UNKNOWN;
  }
  return CUDA_SUCCESS;
}

}  // namespace gpumem::shim
