// What a region source asked of its platform, call by call. Each field is named after the CUDA driver
// call the shim's sources make for it; the sources without a device count the calls they would make,
// so that the replay and the benchmarks can say what an arena costs in driver calls, and (with a
// latency per call, cudasim/driver_latency.h) in time spent in the driver.
#pragma once

#include <cstdint>

namespace gpumem {

struct PlatformCalls {
  std::uint64_t allocs = 0;          // cuMemAlloc: a classic region
  std::uint64_t frees = 0;           // cuMemFree: a classic region given back
  std::uint64_t range_reserves = 0;  // cuMemAddressReserve: a resizable source's address range
  std::uint64_t range_frees = 0;     // cuMemAddressFree
  std::uint64_t creates = 0;         // cuMemCreate: one piece of physical memory
  std::uint64_t maps = 0;            // cuMemMap: a piece mapped (a lent granule: a piece mapped again)
  std::uint64_t access_sets = 0;     // cuMemSetAccess: the pieces mapped by one request opened to the device
  std::uint64_t unmaps = 0;          // cuMemUnmap: a stretch of whole pieces unmapped at once
  std::uint64_t releases = 0;        // cuMemRelease: a piece's handle dropped (its memory goes when unmapped)
  std::uint64_t retains = 0;         // cuMemRetainAllocationHandle: a mapped piece's handle, to map it again

  std::uint64_t total() const noexcept {
    return allocs + frees + range_reserves + range_frees + creates + maps + access_sets + unmaps + releases + retains;
  }
  PlatformCalls& operator+=(const PlatformCalls& other) noexcept {
    allocs += other.allocs;
    frees += other.frees;
    range_reserves += other.range_reserves;
    range_frees += other.range_frees;
    creates += other.creates;
    maps += other.maps;
    access_sets += other.access_sets;
    unmaps += other.unmaps;
    releases += other.releases;
    retains += other.retains;
    return *this;
  }
};

}  // namespace gpumem
