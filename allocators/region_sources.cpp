// Region sources without a device (host memory, fake addresses, their resizable kinds).
#include "region_sources.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
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

// A resizable source's request of `bytes`, of which `fresh` are new memory: logged, and checked
// against the limits (the request's size, and the new memory against the capacity).
bool admit_resizable(const RegionSourceLimits& limits, RegionSourceLog& log, std::size_t bytes, std::size_t fresh) {
  if (bytes == 0 || bytes > limits.max_region_bytes || fresh > limits.capacity_bytes ||
      log.live_bytes > limits.capacity_bytes - fresh) {
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
  ++log_.calls.allocs;
  return Status::ok;
}

bool HostRegionSource::do_release(const Region& region) {
  std::free(reinterpret_cast<void*>(region.base));
  record_release(log_, region.size);
  ++log_.calls.frees;
  return true;
}

Status FakeRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  out = Region{next_, bytes};
  next_ += detail::round_up(bytes);
  record_reservation(log_, bytes);
  ++log_.calls.allocs;
  return Status::ok;
}

bool FakeRegionSource::do_release(const Region& region) {
  record_release(log_, region.size);
  ++log_.calls.frees;
  return true;
}

ResizableRegionSource::ResizableRegionSource(std::size_t range_bytes, std::size_t granule,
                                             RegionSourceLimits limits, std::size_t largest_piece, bool lends,
                                             std::size_t slab_bytes)
    : granule_(granule),
      range_bytes_(range_bytes > std::numeric_limits<std::size_t>::max() - granule
                       ? 0
                       : (range_bytes + granule - 1) / granule * granule),
      lends_(lends),
      backing_(0, granule, largest_piece, slab_bytes),
      limits_(limits) {}

void ResizableRegionSource::set_range_base(std::uintptr_t base) noexcept {
  range_base_ = base;
  backing_.set_range_base(base);
}

void ResizableRegionSource::note_held() noexcept {
  log_.live_bytes = backing_.held_bytes();
  peak_held_ = std::max(peak_held_, log_.live_bytes);
}

bool ResizableRegionSource::holds(const Region& region) const noexcept {
  return held_bytes_ != 0 && region.base == range_base_ && region.size == held_bytes_;
}

bool ResizableRegionSource::granules_are(const Region& region, std::uintptr_t at, std::size_t bytes,
                                         bool unbacked) const {
  if (!holds(region) || bytes == 0 || at % granule_ != 0 || bytes % granule_ != 0 || at < range_base_ ||
      at - range_base_ > held_bytes_ || bytes > held_bytes_ - (at - range_base_)) {
    return false;
  }
  for (std::uintptr_t granule = at; granule < at + bytes; granule += granule_) {
    if (backing_.mapping_at(granule).has_value() == unbacked) return false;
  }
  return true;
}

bool ResizableRegionSource::back(std::uintptr_t at, std::size_t bytes, Backing::Kind kind) {
  if (kind != Backing::Kind::laid_out && backing_.held_bytes() + bytes > fine_above_) kind = Backing::Kind::fine;
  Backing::Plan plan;
  if (!backing_.plan_map(at, bytes, kind, plan)) return false;
  const auto fresh_of = [](const Backing::Plan& planned) {
    std::size_t fresh = 0;
    for (const std::size_t piece : planned.new_pieces) fresh += piece;
    return fresh;
  };
  log_.requests.push_back(bytes);
  if (!admit_resizable(limits_, log_, bytes, fresh_of(plan))) {
    // A whole slab does not fit: no more than the request needs, as the shim's source asks again.
    if (kind != Backing::Kind::slabs || !backing_.plan_map(at, bytes, kind, plan, 0) ||
        !admit_resizable(limits_, log_, bytes, fresh_of(plan))) {
      return false;
    }
  }
  if (!backing_.reserve_for(plan) || !commit(at, bytes)) {
    backing_.abandon(plan);
    ++log_.refusals;
    return false;
  }
  backing_.commit_map(plan, {});
  // The calls the shim's source makes for the plan: each piece created, each mapping made, the
  // stretch opened to the device at once.
  log_.calls.creates += plan.new_pieces.size();
  log_.calls.maps += plan.mappings.size();
  ++log_.calls.access_sets;
  log_.pieces += plan.new_pieces.size();
  note_held();
  return true;
}

Status ResizableRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (range_base_ == 0 || held_bytes_ != 0 || bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_) {
    log_.requests.push_back(bytes);
    ++log_.refusals;
    return Status::out_of_memory;
  }
  held_bytes_ = bytes;  // so that back() sees the region
  if (!back(range_base_, bytes, Backing::Kind::laid_out)) {
    held_bytes_ = 0;
    return Status::out_of_memory;
  }
  out = Region{range_base_, bytes};
  ++log_.reservations;
  ++log_.live_regions;
  if (!range_reserved_) ++log_.calls.range_reserves;  // the shim reserves its range at the first region
  range_reserved_ = true;
  return Status::ok;
}

bool ResizableRegionSource::do_release(const Region& region) {
  if (!holds(region)) return false;
  // One unmap for each stretch of mappings that lie back to back; each piece's handle released.
  std::vector<Backing::Mapping> mappings;
  try {
    mappings = backing_.mappings();
  } catch (...) {  // no host memory for the list: the region stays
    return false;
  }
  for (std::size_t i = 0; i < mappings.size(); ++i) {
    if (i + 1 == mappings.size() || mappings[i + 1].base != mappings[i].base + mappings[i].size) ++log_.calls.unmaps;
  }
  for (Backing::PieceId id = 0; id < backing_.piece_count(); ++id) log_.calls.releases += backing_.piece(id).live ? 1 : 0;
  decommit(region.base, region.size);
  backing_.clear();
  held_bytes_ = 0;
  ++log_.releases;
  --log_.live_regions;
  log_.live_bytes = 0;
  return true;
}

Region ResizableRegionSource::do_piece_at(const Region& region, std::uintptr_t at) const {
  if (!holds(region)) return Region{};
  const std::optional<Backing::Mapping> mapping = backing_.mapping_at(at);
  return !mapping ? Region{} : Region{mapping->base, mapping->size};
}

std::size_t ResizableRegionSource::do_unmap(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!granules_are(region, at, bytes, false)) return 0;
  std::vector<Backing::Mapping> mappings;
  std::vector<Backing::Piece> gone;
  try {
    mappings = backing_.mappings_from(at, bytes);
    gone.reserve(mappings.size());
  } catch (...) {  // no host memory for the lists: nothing given back
    return 0;
  }
  // A lender's memory goes only once its loans have ended.
  if (backing_.strands_a_loan(mappings)) return 0;
  std::size_t given = 0;
  for (const Backing::Mapping& mapping : mappings) given += mapping.size;
  if (given == 0) return 0;
  backing_.unmap(mappings, gone);
  decommit(at, given);
  ++log_.unmaps;
  ++log_.calls.unmaps;  // mappings back to back: one call
  log_.calls.releases += gone.size();
  note_held();
  return given;
}

std::size_t ResizableRegionSource::do_release_idle() {
  std::vector<Backing::Piece> gone;
  try {
    gone.reserve(backing_.piece_count());
  } catch (...) {  // no host memory for the list: nothing given back
    return 0;
  }
  const std::size_t released = backing_.release_idle(gone);
  log_.calls.releases += gone.size();
  note_held();
  return released;
}

Status ResizableRegionSource::do_grow_unbacked(Region& region, std::size_t bytes) {
  if (!lends_ || !holds(region) || bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_ - held_bytes_) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  held_bytes_ += bytes;
  region.size = held_bytes_;
  ++log_.grows;
  return Status::ok;
}

Status ResizableRegionSource::do_lend(const Region& region, std::uintptr_t from, std::uintptr_t at) {
  if (!lends_ || !granules_are(region, at, granule_, true) || !granules_are(region, from, granule_, false)) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  const Backing::Mapping loan = backing_.plan_loan(from, at);
  if (loan.piece == Backing::kNoPiece || !backing_.reserve_for_loan(loan) || !commit(at, granule_)) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  backing_.commit_loan(loan);
  ++log_.loans;
  // The lender's piece mapped a second time and the granule opened to the device.
  ++log_.calls.maps;
  ++log_.calls.access_sets;
  return Status::ok;
}

Status ResizableRegionSource::do_map(const Region& region, std::uintptr_t at, std::size_t bytes) {
  if (!granules_are(region, at, bytes, true)) {
    log_.requests.push_back(bytes);
    ++log_.refusals;
    return Status::out_of_memory;
  }
  if (!back(at, bytes, Backing::Kind::slabs)) return Status::out_of_memory;
  ++log_.maps;
  return Status::ok;
}

Status ResizableRegionSource::do_grow(Region& region, std::size_t bytes) {
  if (!holds(region) || bytes == 0 || bytes % granule_ != 0 || bytes > range_bytes_ - held_bytes_) {
    log_.requests.push_back(bytes);
    ++log_.refusals;
    return Status::out_of_memory;
  }
  held_bytes_ += bytes;  // so that back() sees the new granules
  if (!back(range_base_ + held_bytes_ - bytes, bytes, Backing::Kind::slabs)) {
    held_bytes_ -= bytes;
    return Status::out_of_memory;
  }
  region.size = held_bytes_;
  ++log_.grows;
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
                                                     bool lends, std::size_t slab_bytes)
    : ResizableRegionSource(range_bytes, granule, limits, largest_piece, lends, slab_bytes) {
  set_range_base(FakeRegionSource::kBase);
}

}  // namespace gpumem
