// Region sources without a device (host memory, fake addresses, their resizable kinds).
#include "region_sources.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "piece_layout.h"
#include "size_class.h"

namespace gpumem {
namespace {

using detail::kGranule;

// Applies the limits and logs the request; true when the source may reserve `bytes`.
bool admit(const RegionSourceLimits& limits, RegionSourceLog& log, std::size_t bytes) {
  log.requests.push_back(bytes);
  // The last clause keeps rounding up to the granule from overflowing.
  if (bytes == 0 || bytes > limits.max_region_bytes || bytes > limits.capacity_bytes - log.live_bytes ||
      log.live_bytes > limits.capacity_bytes || bytes > std::numeric_limits<std::size_t>::max() - kGranule) {
    ++log.refusals;
    return false;
  }
  return true;
}

void record_reservation(RegionSourceLog& log, std::size_t bytes) {
  ++log.reservations;
  ++log.live_regions;
  log.live_bytes += bytes;
}

void record_release(RegionSourceLog& log, std::size_t bytes) {
  ++log.releases;
  --log.live_regions;
  log.live_bytes -= bytes;
}

}  // namespace

Status HostRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  // aligned_alloc wants a multiple of the alignment; the arena's granule is the alignment promised.
  void* memory = std::aligned_alloc(kGranule, detail::round_up(bytes));
  if (memory == nullptr) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  out = Region{reinterpret_cast<std::uintptr_t>(memory), bytes};
  record_reservation(log_, bytes);
  return Status::ok;
}

bool HostRegionSource::do_release(const Region& region) {
  std::free(reinterpret_cast<void*>(region.base));
  record_release(log_, region.size);
  return true;
}

Status FakeRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  out = Region{next_, bytes};
  next_ += detail::round_up(bytes);
  record_reservation(log_, bytes);
  return Status::ok;
}

bool FakeRegionSource::do_release(const Region& region) {
  record_release(log_, region.size);
  return true;
}

ResizableRegionSource::ResizableRegionSource(std::size_t range_bytes, std::size_t granule,
                                             RegionSourceLimits limits, std::size_t largest_piece, bool lends)
    : granule_(granule),
      largest_piece_(largest_piece < granule ? granule : largest_piece),
      range_bytes_(range_bytes > std::numeric_limits<std::size_t>::max() - granule
                       ? 0
                       : (range_bytes + granule - 1) / granule * granule),
      lends_(lends),
      limits_(limits) {}

Status ResizableRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  if (range_base_ == 0 || held_bytes_ != 0 || bytes % granule_ != 0 || bytes > range_bytes_ ||
      !back(range_base_, bytes, true)) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  held_bytes_ = bytes;
  out = Region{range_base_, bytes};
  record_reservation(log_, bytes);
  return Status::ok;
}

bool ResizableRegionSource::do_release(const Region& region) {
  decommit(region.base, region.size);
  held_bytes_ = 0;
  pieces_.clear();
  // Borrowed granules hold no memory of their own: like unbacked ones, they were never in live_bytes.
  std::size_t unbacked = borrowed_.size();
  borrowed_.clear();
  for (std::size_t index = 0; index < unbacked_.size(); ++index) {
    if (unbacked_[index]) ++unbacked;
  }
  unbacked_.clear();
  record_release(log_, region.size);
  log_.live_bytes += unbacked * granule_;  // those bytes left live_bytes when they were unmapped
  return true;
}

bool ResizableRegionSource::granules_are(const Region& region, std::uintptr_t at, std::size_t bytes,
                                         bool unbacked) const {
  if (held_bytes_ == 0 || region.base != range_base_ || region.size != held_bytes_ || bytes == 0 ||
      at % granule_ != 0 || bytes % granule_ != 0 || at < range_base_ || at - range_base_ > held_bytes_ ||
      bytes > held_bytes_ - (at - range_base_)) {
    return false;
  }
  for (std::size_t index = (at - range_base_) / granule_, end = index + bytes / granule_; index < end; ++index) {
    const bool is_unbacked = index < unbacked_.size() && unbacked_[index];
    if (is_unbacked != unbacked) return false;
  }
  return true;
}

void ResizableRegionSource::mark(std::uintptr_t at, std::size_t bytes, bool unbacked) {
  const std::size_t first = (at - range_base_) / granule_;
  const std::size_t end = first + bytes / granule_;
  if (unbacked_.size() < end) unbacked_.resize(range_bytes_ / granule_, false);
  for (std::size_t index = first; index < end; ++index) unbacked_[index] = unbacked;
}

bool ResizableRegionSource::back(std::uintptr_t at, std::size_t bytes, bool laid_out) {
  std::map<std::uintptr_t, std::size_t> added;
  try {
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t piece = std::min(
          bytes - done, laid_out ? piece_bytes_at(at + done - range_base_, granule_, largest_piece_) : granule_);
      added.emplace(at + done, piece);
      done += piece;
    }
  } catch (...) {  // no host memory for the records
    return false;
  }
  if (!commit(at, bytes)) return false;
  log_.pieces += added.size();
  pieces_.merge(added);
  return true;
}

Region ResizableRegionSource::do_piece_at(const Region& region, std::uintptr_t at) const {
  if (held_bytes_ == 0 || region.base != range_base_) return Region{};
  auto found = pieces_.upper_bound(at);
  if (found == pieces_.begin()) return Region{};
  --found;
  return at - found->first < found->second ? Region{found->first, found->second} : Region{};
}

std::size_t ResizableRegionSource::do_unmap(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!granules_are(region, at, bytes, false)) return 0;
  // Whole pieces from `at` on: the first that reaches past the range stops it.
  std::size_t given = 0;
  for (auto piece = pieces_.find(at); piece != pieces_.end() && piece->first == at + given &&
                                      piece->second <= bytes - given;) {
    given += piece->second;
    if (given == bytes) break;
    piece = pieces_.find(at + given);
  }
  if (given == 0) return 0;
  // A lender's memory goes only once its loans have ended.
  for (const auto& [borrower, lender] : borrowed_) {
    if (lender >= at && lender - at < given && !(borrower >= at && borrower - at < given)) return 0;
  }
  std::size_t borrowed = 0;
  for (auto loan = borrowed_.lower_bound(at); loan != borrowed_.end() && loan->first < at + given; ++loan) {
    borrowed += granule_;
  }
  try {
    mark(at, given, true);
  } catch (...) {  // no host memory for the record: nothing given back
    return 0;
  }
  pieces_.erase(pieces_.lower_bound(at), pieces_.lower_bound(at + given));
  borrowed_.erase(borrowed_.lower_bound(at), borrowed_.lower_bound(at + given));
  decommit(at, given);
  ++log_.unmaps;
  log_.live_bytes -= given - borrowed;
  return given;
}

bool ResizableRegionSource::holds(const Region& region) const noexcept {
  return held_bytes_ != 0 && region.base == range_base_ && region.size == held_bytes_;
}

Status ResizableRegionSource::do_grow_unbacked(Region& region, std::size_t bytes) {
  if (!lends_ || !holds(region) || bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_ - held_bytes_) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  try {
    mark(range_base_ + held_bytes_, bytes, true);
  } catch (...) {  // no host memory for the record
    return Status::out_of_memory;
  }
  held_bytes_ += bytes;
  region.size = held_bytes_;
  ++log_.grows;
  return Status::ok;
}

Status ResizableRegionSource::do_lend(const Region& region, std::uintptr_t from, std::uintptr_t at) {
  const Region lender = do_piece_at(region, from);
  if (!lends_ || !granules_are(region, at, granule_, true) || !granules_are(region, from, granule_, false) ||
      lender.size == 0 || borrowed_.count(lender.base) != 0) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  try {
    pieces_.emplace(at, granule_);
    borrowed_.emplace(at, from);
  } catch (...) {  // no host memory for the records
    pieces_.erase(at);
    return Status::out_of_memory;
  }
  mark(at, granule_, false);  // the granule's flag exists: it was unbacked
  ++log_.loans;
  return Status::ok;
}

Status ResizableRegionSource::do_map(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  if (!granules_are(region, at, bytes, true) || !back(at, bytes, false)) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  mark(at, bytes, false);
  ++log_.maps;
  log_.live_bytes += bytes;
  return Status::ok;
}

Status ResizableRegionSource::do_grow(Region& region, std::size_t bytes) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  if (held_bytes_ == 0 || region.base != range_base_ || region.size != held_bytes_ || bytes % granule_ != 0 ||
      bytes > range_bytes_ - held_bytes_ || !back(range_base_ + held_bytes_, bytes, false)) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  held_bytes_ += bytes;
  region.size = held_bytes_;
  ++log_.grows;
  log_.live_bytes += bytes;
  return Status::ok;
}

HostResizableRegionSource::HostResizableRegionSource(std::size_t range_bytes, std::size_t granule,
                                                     RegionSourceLimits limits, std::size_t largest_piece)
    : ResizableRegionSource(range_bytes, granule, limits, largest_piece) {
  if (this->range_bytes() == 0) return;
  // Over-reserve by a granule so that the range can start on a granule boundary.
  void* range = ::mmap(nullptr, this->range_bytes() + granule, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return;
  const auto start = reinterpret_cast<std::uintptr_t>(range);
  set_range_base((start + granule - 1) / granule * granule);
  mapping_ = start;
}

HostResizableRegionSource::~HostResizableRegionSource() {
  if (mapping_ != 0) ::munmap(reinterpret_cast<void*>(mapping_), range_bytes() + granule());
}

bool HostResizableRegionSource::commit(std::uintptr_t base, std::size_t bytes) {
  return ::mprotect(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE) == 0;
}

void HostResizableRegionSource::decommit(std::uintptr_t base, std::size_t bytes) {
  ::madvise(reinterpret_cast<void*>(base), bytes, MADV_DONTNEED);
  ::mprotect(reinterpret_cast<void*>(base), bytes, PROT_NONE);
}

FakeResizableRegionSource::FakeResizableRegionSource(std::size_t range_bytes, std::size_t granule,
                                                     RegionSourceLimits limits, std::size_t largest_piece,
                                                     bool lends)
    : ResizableRegionSource(range_bytes, granule, limits, largest_piece, lends) {
  set_range_base(FakeRegionSource::kBase);
}

}  // namespace gpumem
