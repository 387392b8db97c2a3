#include "region_sources.h"

#include <cstdlib>
#include <limits>

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

}  // namespace gpumem
