// One arena region under a reserved virtual range, backed as allocators/backing.h plans it.
#include "regions/vmm_region_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "base/log.h"
#include "budget/budgets.h"
#include "checked_size.h"
#include "driver/real_driver.h"
#include "exports/export_table.h"
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

// The mappings of `mappings` as address ranges, back-to-back ones joined: cuMemSetAccess and
// cuMemUnmap take several whole mappings at once.
std::vector<std::pair<std::uintptr_t, std::size_t>> joined_ranges(const std::vector<Backing::Mapping>& mappings) {
  std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;
  for (const Backing::Mapping& mapping : mappings) {
    if (!ranges.empty() && ranges.back().first + ranges.back().second == mapping.base) {
      ranges.back().second += mapping.size;
    } else {
      ranges.emplace_back(mapping.base, mapping.size);
    }
  }
  return ranges;
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
                                 std::size_t slab_bytes, std::size_t fine_above)
    : device_(device),
      granule_(granularity),
      limit_bytes_(limit_bytes),
      range_bytes_(round_up_to(saturating_mul(kRangeLimits, limit_bytes), granularity)),
      fine_above_(fine_above),
      backing_(0, granularity,
               fine_above == std::numeric_limits<std::size_t>::max()
                   ? largest_piece_for(limit_bytes, granularity)
                   : shared_largest_piece_for(std::min(limit_bytes, fine_above), granularity),
               slab_bytes) {}

void VmmRegionSource::set_fine_above(std::size_t bytes) noexcept {
  fine_above_.store(bytes, std::memory_order_relaxed);
  backing_.set_largest_piece(shared_largest_piece_for(std::min(limit_bytes_, bytes), granule_));
}

Region VmmRegionSource::do_piece_at(const Region& region, std::uintptr_t at) const {
  if (!holds(region)) return Region{};
  const std::optional<Backing::Mapping> mapping = backing_.mapping_at(at);  // changes only under the arena's lock, held here
  return !mapping ? Region{} : Region{mapping->base, mapping->size};
}

bool VmmRegionSource::holds(const Region& region) const noexcept {
  return extent_ != 0 && region.base == range_base_ && region.size == extent_;
}

CUmemGenericAllocationHandle VmmRegionSource::create_piece(std::size_t bytes, bool& exportable) noexcept {
  const RealDriver& driver = real_driver();
  CUmemGenericAllocationHandle handle = 0;
  exportable = !exportable_refused_;
  // Charged, created; the charge stays with the piece until it is released (release_pieces).
  const CUresult created = budget::charged(device_, BudgetPath::arena, bytes, "an arena mapping", [&] {
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
    return result;
  });
  if (created != CUDA_SUCCESS) return 0;
  pieces_created_.fetch_add(1, std::memory_order_relaxed);
  return handle;
}

void VmmRegionSource::release_pieces(const std::vector<Backing::Piece>& gone) noexcept {
  const RealDriver& driver = real_driver();
  for (const Backing::Piece& piece : gone) {
    // Unmapped, out of the backing: its memory goes. Importers hold their own references: their
    // mappings stay.
    driver.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(piece.handle));
    {
      const MutexLock lock(pieces_mutex_);
      piece_info_.erase(piece.id);
    }
    budget::refund(device_, BudgetPath::arena, piece.size);
  }
  note_held();
}

void VmmRegionSource::note_held() noexcept {
  const std::size_t held = backing_.held_bytes();
  bytes_reserved_.store(held, std::memory_order_relaxed);
  if (held > peak_bytes_reserved_.load(std::memory_order_relaxed)) peak_bytes_reserved_.store(held, std::memory_order_relaxed);
}

bool VmmRegionSource::carry_out(const Backing::Plan& plan, std::uintptr_t at, std::size_t bytes,
                                bool& refused_piece) noexcept {
  const RealDriver& driver = real_driver();
  refused_piece = false;
  std::vector<std::uint64_t> handles;
  std::vector<PieceInfo> infos;
  try {
    handles.reserve(plan.new_pieces.size());
    infos.reserve(plan.new_pieces.size());
  } catch (...) {  // bad_alloc
    return false;
  }
  std::size_t mapped = 0;  // mappings made so far
  const auto undo = [&] {
    for (std::size_t i = 0; i < mapped; ++i) {
      driver.cuMemUnmap(static_cast<CUdeviceptr>(plan.mappings[i].base), plan.mappings[i].size);
    }
    for (std::size_t i = 0; i < handles.size(); ++i) {
      driver.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handles[i]));
      budget::refund(device_, BudgetPath::arena, plan.new_pieces[i]);
    }
    return false;
  };
  for (const std::size_t piece_bytes : plan.new_pieces) {
    bool exportable = false;
    const CUmemGenericAllocationHandle handle = create_piece(piece_bytes, exportable);
    if (handle == 0) {
      refused_piece = true;
      return undo();
    }
    handles.push_back(handle);  // room reserved
    infos.push_back(PieceInfo{exportable, false});
  }
  // The peer accessors stay as they are from the first mapping until the range is opened to them.
  const std::lock_guard access_lock(access_mutex_);
  for (; mapped < plan.mappings.size(); ++mapped) {
    const Backing::Mapping& mapping = plan.mappings[mapped];
    std::uint64_t handle = 0;
    if (mapping.piece >= backing_.piece_count() || !backing_.piece(mapping.piece).live) {
      const auto fresh = std::find(plan.new_ids.begin(), plan.new_ids.end(), mapping.piece);
      handle = handles[static_cast<std::size_t>(fresh - plan.new_ids.begin())];
    } else {
      handle = backing_.piece(mapping.piece).handle;  // an idle granule of a slab, mapped again
    }
    if (driver.cuMemMap(static_cast<CUdeviceptr>(mapping.base), mapping.size, mapping.offset,
                        static_cast<CUmemGenericAllocationHandle>(handle), 0) != CUDA_SUCCESS) {
      return undo();
    }
  }
  if (!open_to_accessors(static_cast<CUdeviceptr>(at), bytes)) return undo();
  {
    const MutexLock lock(pieces_mutex_);  // an export may be reading the records
    try {
      for (std::size_t i = 0; i < plan.new_ids.size(); ++i) piece_info_[plan.new_ids[i]] = infos[i];
    } catch (...) {  // no host memory for the records: the pieces count as not exportable
    }
    backing_.commit_map(plan, handles);
  }
  note_held();
  return true;
}

bool VmmRegionSource::map_range(std::uintptr_t at, std::size_t bytes, Backing::Kind kind) noexcept {
  if (bytes == 0 || bytes % granule_ != 0 || at % granule_ != 0 || at < range_base_ ||
      at - range_base_ > range_bytes_ || bytes > range_bytes_ - (at - range_base_)) {
    return false;
  }
  for (std::uintptr_t granule = at; granule < at + bytes; granule += granule_) {
    if (backing_.mapping_at(granule)) return false;  // something is mapped there already
  }
  // Memory beyond the guarantee in pieces of a granule; the first reservation too, laid out whole
  // only where all of it lies within.
  if (backing_.held_bytes() + bytes > fine_above_.load(std::memory_order_relaxed)) kind = Backing::Kind::fine;
  try {
    Backing::Plan plan;
    bool refused_piece = false;
    if (!backing_.plan_map(at, bytes, kind, plan)) return false;
    {
      const MutexLock lock(pieces_mutex_);
      if (!backing_.reserve_for(plan)) return false;
    }
    if (carry_out(plan, at, bytes, refused_piece)) return true;
    backing_.abandon(plan);
    // A whole slab did not fit (the budget, the device): no more than the request needs, once.
    if (!refused_piece || kind != Backing::Kind::slabs || !backing_.plan_map(at, bytes, kind, plan, 0)) return false;
    {
      const MutexLock lock(pieces_mutex_);
      if (!backing_.reserve_for(plan)) return false;
    }
    if (carry_out(plan, at, bytes, refused_piece)) return true;
    backing_.abandon(plan);
    return false;
  } catch (...) {  // the lock failed
    return false;
  }
}

std::size_t VmmRegionSource::unmap_mappings(const std::vector<Backing::Mapping>& mappings) noexcept {
  const RealDriver& driver = real_driver();
  if (mappings.empty()) return 0;
  const Backing::Mapping& last = mappings.back();
  const std::uintptr_t begin = mappings.front().base;
  // The arena gives back only free, unfenced memory; cuMemUnmap also waits for the device. Mappings
  // back to back go in one call; a driver that takes them one at a time only gets them so.
  if (driver.cuMemUnmap(static_cast<CUdeviceptr>(begin), last.base + last.size - begin) == CUDA_SUCCESS) {
    return mappings.size();
  }
  std::size_t unmapped = 0;
  for (; unmapped < mappings.size(); ++unmapped) {
    // Refused (during a graph capture, say): the mappings from here on are kept.
    if (driver.cuMemUnmap(static_cast<CUdeviceptr>(mappings[unmapped].base), mappings[unmapped].size) !=
        CUDA_SUCCESS) {
      break;
    }
  }
  return unmapped;
}

Status VmmRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (extent_ != 0 || backing_.held_bytes() != 0 || bytes > range_bytes_) return Status::out_of_memory;  // one region
  if (range_base_ == 0) {
    CUdeviceptr base = 0;
    if (real_driver().cuMemAddressReserve(&base, range_bytes_, granule_, 0, 0) != CUDA_SUCCESS) {
      return Status::out_of_memory;
    }
    range_base_ = static_cast<std::uintptr_t>(base);
    backing_.set_range_base(range_base_);
  }
  if (!map_range(range_base_, bytes, Backing::Kind::laid_out)) {
    return Status::out_of_memory;
  }
  extent_ = bytes;
  out = Region{range_base_, bytes};
  return Status::ok;
}

bool VmmRegionSource::do_release(const Region& region) {
  if (!holds(region)) return false;
  try {
    const std::lock_guard access_lock(access_mutex_);
    std::vector<Backing::Mapping> mappings = backing_.mappings();
    std::vector<Backing::Piece> gone;
    gone.reserve(backing_.piece_count() + mappings.size());
    // Each stretch of mappings back to back in one call. Refused part way: the arena keeps its record
    // and this source its extent, so unmapping and mapping go on as before until abandon() gives the
    // rest back.
    bool refused = false;
    for (std::size_t first = 0; first < mappings.size() && !refused;) {
      std::size_t end = first + 1;
      while (end < mappings.size() && mappings[end].base == mappings[end - 1].base + mappings[end - 1].size) ++end;
      const std::vector<Backing::Mapping> stretch(mappings.begin() + static_cast<std::ptrdiff_t>(first),
                                                  mappings.begin() + static_cast<std::ptrdiff_t>(end));
      const std::size_t unmapped = unmap_mappings(stretch);
      {
        const MutexLock lock(pieces_mutex_);
        backing_.unmap(std::span(stretch.data(), unmapped), gone);
      }
      refused = unmapped < stretch.size();
      first = end;
    }
    {
      const MutexLock lock(pieces_mutex_);
      backing_.release_idle(gone);
    }
    release_pieces(gone);
    if (refused) return false;
  } catch (...) {  // no host memory for the lists, or a lock failed: the region stays
    return false;
  }
  extent_ = 0;
  return true;  // the range stays reserved, for the next region
}

Status VmmRegionSource::do_grow(Region& region, std::size_t bytes) {
  if (!holds(region) || bytes > range_bytes_ - extent_ ||
      !map_range(range_base_ + extent_, bytes, Backing::Kind::slabs)) {
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
  try {
    const std::lock_guard access_lock(access_mutex_);
    // Whole mappings from `at` on; one reaching past the range (a broken contract) stops the list.
    const std::vector<Backing::Mapping> mappings = backing_.mappings_from(at, bytes);
    std::vector<Backing::Piece> gone;
    gone.reserve(mappings.size());
    const std::size_t unmapped = unmap_mappings(mappings);
    std::size_t given = 0;
    for (std::size_t i = 0; i < unmapped; ++i) given += mappings[i].size;
    {
      const MutexLock lock(pieces_mutex_);
      backing_.unmap(std::span(mappings.data(), unmapped), gone);
    }
    release_pieces(gone);  // laid-out pieces go with their mapping; slabs keep their memory
    return given;
  } catch (...) {  // no host memory for the lists, or a lock failed: nothing given back
    return 0;
  }
}

std::size_t VmmRegionSource::do_release_idle() {
  try {
    std::vector<Backing::Piece> gone;
    gone.reserve(backing_.piece_count());
    std::size_t released = 0;
    {
      const MutexLock lock(pieces_mutex_);
      released = backing_.release_idle(gone);
    }
    release_pieces(gone);
    return released;
  } catch (...) {  // no host memory for the list, or the lock failed: nothing given back
    return 0;
  }
}

Status VmmRegionSource::do_map(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!holds(region) || at < range_base_ || at - range_base_ > extent_ || bytes > extent_ - (at - range_base_) ||
      !map_range(at, bytes, Backing::Kind::slabs)) {
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
      at - range_base_ >= extent_ || from - range_base_ >= extent_ || backing_.mapping_at(at)) {
    return Status::out_of_memory;
  }
  const Backing::Mapping loan = backing_.plan_loan(from, at);
  if (loan.piece == Backing::kNoPiece) return Status::out_of_memory;
  try {
    const MutexLock lock(pieces_mutex_);  // an export may be reading the records
    if (!backing_.reserve_for_loan(loan)) return Status::out_of_memory;
  } catch (...) {  // the lock failed
    return Status::out_of_memory;
  }
  const RealDriver& driver = real_driver();
  const auto address = static_cast<CUdeviceptr>(at);
  try {
    const std::lock_guard access_lock(access_mutex_);
    const auto handle = static_cast<CUmemGenericAllocationHandle>(backing_.piece(loan.piece).handle);
    if (driver.cuMemMap(address, granule_, loan.offset, handle, 0) != CUDA_SUCCESS) {
      return Status::out_of_memory;  // a driver that maps allocations only from their start, say
    }
    if (!open_to_accessors(address, granule_)) {
      driver.cuMemUnmap(address, granule_);
      return Status::out_of_memory;
    }
    const MutexLock lock(pieces_mutex_);
    backing_.commit_loan(loan);  // room reserved above
  } catch (...) {  // a lock failed
    return Status::out_of_memory;
  }
  return Status::ok;
}

void VmmRegionSource::abandon() noexcept {
  // The blocks' handles stop opening before their pieces go: the descriptor service then answers
  // that they were freed (it also finds the pieces gone from the backing).
  if (range_base_ != 0) ipc::withdraw_range(range_base_, range_base_ + range_bytes_);
  const RealDriver& driver = real_driver();
  try {
    const std::lock_guard access_lock(access_mutex_);
    const MutexLock lock(pieces_mutex_);
    // The driver may refuse (the context is going): the memory is forgotten and refunded all the same.
    for (const auto& [base, size] : joined_ranges(backing_.mappings())) {
      if (driver.cuMemUnmap(static_cast<CUdeviceptr>(base), size) != CUDA_SUCCESS) {
        for (std::optional<Backing::Mapping> mapping = backing_.mapping_at(base); mapping && mapping->base < base + size;
             mapping = backing_.mapping_at(mapping->base + mapping->size)) {
          driver.cuMemUnmap(static_cast<CUdeviceptr>(mapping->base), mapping->size);
        }
      }
    }
    for (Backing::PieceId id = 0; id < backing_.piece_count(); ++id) {
      const Backing::Piece& piece = backing_.piece(id);
      if (!piece.live) continue;
      driver.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(piece.handle));
      budget::refund(device_, BudgetPath::arena, piece.size);
    }
    piece_info_.clear();
    backing_.clear();
  } catch (...) {  // a lock failed: nothing more can be done safely
  }
  bytes_reserved_.store(0, std::memory_order_relaxed);
  if (range_base_ != 0) driver.cuMemAddressFree(static_cast<CUdeviceptr>(range_base_), range_bytes_);
  range_base_ = 0;
  extent_ = 0;
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
    std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;
    {
      const MutexLock pieces_lock(pieces_mutex_);
      ranges = joined_ranges(backing_.mappings());
    }
    const RealDriver& driver = real_driver();
    CUmemAccessDesc access = read_write_for(accessor);
    if (!enabled) access.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // for this device alone
    for (const auto& [base, size] : ranges) {
      const CUresult result = driver.cuMemSetAccess(static_cast<CUdeviceptr>(base), size, &access, 1);
      if (result == CUDA_SUCCESS) continue;
      if (enabled) {
        log::at(LogLevel::warn, "device {}: the driver refused device {} access to the arena's memory (error {}); "
                "that device cannot reach the blocks of this context", device_, accessor, static_cast<int>(result));
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // what was granted goes back, and later mappings ask nothing
        for (const auto& [granted_base, granted_size] : ranges) {
          if (granted_base == base) break;
          driver.cuMemSetAccess(static_cast<CUdeviceptr>(granted_base), granted_size, &access, 1);
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
                                      ipc::VmmExport& out) const noexcept {
  const RealDriver& driver = real_driver();
  const std::uintptr_t block_end = block_base + block_size;
  out = ipc::VmmExport{};
  try {
    std::vector<ipc::VmmPieceRef> pieces;
    const MutexLock lock(pieces_mutex_);
    // The mappings the block overlaps, from the one holding its first byte on; back-to-back mappings
    // of one piece at consecutive offsets are one stretch of it.
    std::optional<Backing::Mapping> mapping = backing_.mapping_at(block_base);
    for (; mapping && mapping->base < block_end; mapping = backing_.mapping_at(mapping->base + mapping->size)) {
      const auto info = piece_info_.find(mapping->piece);
      if (info == piece_info_.end() || !info->second.exportable || driver.cuMemExportToShareableHandle == nullptr) {
        log::at(LogLevel::error, "cuIpcGetMemHandle: {:#x} lies in arena memory the driver could not make "
                "exportable; it cannot be shared", block_base);
        return CUDA_ERROR_INVALID_VALUE;
      }
      const Backing::Piece& piece = backing_.piece(mapping->piece);
      if (!info->second.exported_once) {
        int fd = -1;
        const CUresult exported = driver.cuMemExportToShareableHandle(
            &fd, static_cast<CUmemGenericAllocationHandle>(piece.handle), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (exported != CUDA_SUCCESS) {
          log::at(LogLevel::error, "cuIpcGetMemHandle: the driver refused to export the memory under {:#x} "
                  "(error {})", block_base, static_cast<int>(exported));
          return exported;
        }
        close(fd);  // kept by nobody: the descriptor service exports it again when an importer asks
        info->second.exported_once = true;
      }
      if (pieces.empty()) out.span.offset = block_base - mapping->base;
      ipc::VmmPieceRef* previous = pieces.empty() ? nullptr : &pieces.back();
      if (previous != nullptr && previous->piece == mapping->piece &&
          previous->stretch.offset + previous->stretch.size == mapping->offset) {
        previous->stretch.size += mapping->size;  // the same piece, next to the stretch before
        continue;
      }
      if (pieces.size() == ipc::kMaxVmmPieces) {
        log::at(LogLevel::error, "cuIpcGetMemHandle: the {}-byte block at {:#x} lies over more than {} stretches of "
                "the arena's memory; it cannot be shared", block_size, block_base, ipc::kMaxVmmPieces);
        return CUDA_ERROR_INVALID_VALUE;
      }
      pieces.push_back(ipc::VmmPieceRef{piece.handle, mapping->piece, 0, ipc::VmmStretch{mapping->size, mapping->offset}});
    }
    if (pieces.empty()) return CUDA_ERROR_INVALID_VALUE;
    out.span.piece_count = static_cast<std::uint32_t>(pieces.size());
    out.source = this;
    out.pieces = std::move(pieces);
  } catch (...) {  // the lock failed, or no host memory for the list
    out = ipc::VmmExport{};
    return CUDA_ERROR_UNKNOWN;
  }
  return CUDA_SUCCESS;
}

CUresult VmmRegionSource::export_pieces(std::span<const ipc::VmmPieceRef> refs, std::span<int> fds) const noexcept {
  const RealDriver& driver = real_driver();
  std::size_t made = 0;
  const auto fail = [&](CUresult result) {
    for (std::size_t i = 0; i < made; ++i) close(fds[i]);
    for (int& fd : fds) fd = -1;
    return result;
  };
  if (fds.size() < refs.size() || driver.cuMemExportToShareableHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  try {
    // Held while the driver exports: a piece found live here cannot be released meanwhile (it leaves
    // the backing under this lock first).
    const MutexLock lock(pieces_mutex_);
    for (; made < refs.size(); ++made) {
      const ipc::VmmPieceRef& ref = refs[made];
      if (ref.piece >= backing_.piece_count() || !backing_.piece(ref.piece).live ||
          backing_.piece(ref.piece).handle != ref.handle || !piece_info_.contains(ref.piece)) {
        return fail(CUDA_ERROR_NOT_FOUND);  // released since: its record may be another piece's now
      }
      int fd = -1;
      const CUresult exported = driver.cuMemExportToShareableHandle(
          &fd, static_cast<CUmemGenericAllocationHandle>(ref.handle), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (exported != CUDA_SUCCESS) return fail(exported);
      fcntl(fd, F_SETFD, FD_CLOEXEC);  // the program's children get none of the arena's memory
      fds[made] = fd;
    }
  } catch (...) {  // the lock failed
    return fail(CUDA_ERROR_UNKNOWN);
  }
  return CUDA_SUCCESS;
}

}  // namespace gpumem::shim
