#include "region_sources.h"

#include <cstdlib>

namespace gpumem {
namespace {

// Applies the limits and logs the request; true when the source may reserve `bytes`.
bool admit(const RegionSourceLimits& limits, RegionSourceLog& log, std::size_t bytes) {
  log.requests.push_back(bytes);
  if (bytes == 0 || bytes > limits.max_region_bytes || bytes > limits.capacity_bytes - log.live_bytes ||
      log.live_bytes > limits.capacity_bytes) {
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

constexpr std::size_t kAlignment = 256;

}  // namespace

Status HostRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  const std::size_t padded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* memory = std::aligned_alloc(kAlignment, padded);
  if (memory == nullptr) {
    ++log_.refusals;
    return Status::out_of_memory;
  }
  out = Region{reinterpret_cast<std::uintptr_t>(memory), bytes};
  record_reservation(log_, bytes);
  return Status::ok;
}

void HostRegionSource::do_release(const Region& region) {
  std::free(reinterpret_cast<void*>(region.base));
  record_release(log_, region.size);
}

Status FakeRegionSource::do_reserve(std::size_t bytes, Region& out) {
  if (!admit(limits_, log_, bytes)) return Status::out_of_memory;
  out = Region{next_, bytes};
  next_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  record_reservation(log_, bytes);
  return Status::ok;
}

void FakeRegionSource::do_release(const Region& region) { record_release(log_, region.size); }

}  // namespace gpumem
