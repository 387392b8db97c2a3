// RegionSource implementations without a device: plain host memory (blocks can be written and read
// back) and a fake that hands out non-dereferenceable addresses, for tests and benchmarks. Both can
// be told to refuse requests above a size or beyond a capacity, to exercise back-off and limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "region_source.h"

namespace gpumem {

// What a test source refuses. Invariant: a reservation succeeds only if bytes <= max_region_bytes
// and the live total stays <= capacity_bytes.
struct RegionSourceLimits {
  std::size_t max_region_bytes = std::numeric_limits<std::size_t>::max();
  std::size_t capacity_bytes = std::numeric_limits<std::size_t>::max();
};

// Counts what happened at a source; `requests` logs every reserve size asked for, in order.
struct RegionSourceLog {
  std::vector<std::size_t> requests;
  std::uint64_t reservations = 0;
  std::uint64_t refusals = 0;
  std::uint64_t releases = 0;
  std::size_t live_bytes = 0;
  std::size_t live_regions = 0;
};

// Host memory from aligned_alloc (aligned to the arena's 256-byte granule), freed on release.
class HostRegionSource final : public RegionSource {
 public:
  explicit HostRegionSource(RegionSourceLimits limits = {}) : limits_(limits) {}
  const RegionSourceLog& log() const noexcept { return log_; }

 private:
  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;

  RegionSourceLimits limits_;
  RegionSourceLog log_;
};

// Addresses from a bump pointer in a non-canonical x86-64 range, so any access faults; the memory
// does not exist. Regions are handed out back to back (adjacent), which lets tests check that
// coalescing never crosses a region boundary.
class FakeRegionSource final : public RegionSource {
 public:
  static constexpr std::uintptr_t kBase = std::uintptr_t{1} << 60;

  explicit FakeRegionSource(RegionSourceLimits limits = {}) : limits_(limits) {}
  const RegionSourceLog& log() const noexcept { return log_; }
  void set_limits(RegionSourceLimits limits) noexcept { limits_ = limits; }

 private:
  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;

  RegionSourceLimits limits_;
  RegionSourceLog log_;
  std::uintptr_t next_ = kBase;
};

}  // namespace gpumem
