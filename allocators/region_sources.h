// RegionSource implementations without a device: plain host memory (blocks can be written and read
// back) and a fake that hands out non-dereferenceable addresses, for tests and benchmarks; and the
// resizable kind of each (one reserved address range whose region grows at its end and whose granules
// can be unbacked and backed again, as CUDA's virtual memory management allows). All can be told to refuse requests above a size or
// beyond a capacity, to exercise back-off and limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "backing.h"
#include "platform_calls.h"
#include "region_source.h"

namespace gpumem {

// What a test source refuses. Invariant: a reservation succeeds only if bytes <= max_region_bytes
// and the live total stays <= capacity_bytes.
struct RegionSourceLimits {
  std::size_t max_region_bytes = std::numeric_limits<std::size_t>::max();
  std::size_t capacity_bytes = std::numeric_limits<std::size_t>::max();
};

// Counts what happened at a source; `requests` logs every reserve (and grow) size asked for, in order.
// `calls`: the driver calls the shim's source of the same kind would make for the same requests
// (platform_calls.h).
struct RegionSourceLog {
  PlatformCalls calls;
  std::vector<std::size_t> requests;
  std::uint64_t reservations = 0;
  std::uint64_t refusals = 0;
  std::uint64_t releases = 0;
  std::uint64_t grows = 0;    // resizable sources: successful grow calls
  std::uint64_t unmaps = 0;   // resizable sources: unmap calls (memory given back inside the region)
  std::uint64_t maps = 0;     // resizable sources: successful map calls (memory back under it)
  std::uint64_t pieces = 0;   // resizable sources: pieces backed (what a driver maps in one call each)
  std::uint64_t loans = 0;    // lending sources: granules backed by lent memory (lend calls that succeeded)
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

// One address range of `range_bytes` (rounded up to the granule) holding at most one region, at
// the range's start, that grows at its end, and whose granules can be unbacked (unmap) and backed
// again (map) inside it, the memory behind it held as the shim's virtual-memory source holds it
// (backing.h): the first reservation in pieces laid out as piece_layout.h says, at most
// `largest_piece` bytes each (0: one granule each), given back only whole; growth and memory mapped
// again in slabs of at least `slab_bytes` (0: one granule), mapped a granule at a time, whose idle
// granules are mapped again before any new memory is taken, and beyond set_fine_above() in slabs of
// one granule. log().live_bytes is the memory held (pieces and slabs, mapped or idle), log().calls the
// driver calls the shim would make. Derived classes make the bytes usable (commit) and give them
// back (decommit). A source built to lend (`lends`) backs granules with lent memory too: each
// borrowed granule is a mapping of its own, holding no memory. Calls that break the contract
// (unmapping what is unbacked or part of a mapping, or a piece whose memory is lent out; mapping what
// is backed; lending from a borrowed granule or a slab; ranges outside the region) are refused, so
// tests catch an arena that makes them.
class ResizableRegionSource : public RegionSource {
 public:
  std::size_t granule() const noexcept { return granule_; }
  const RegionSourceLog& log() const noexcept { return log_; }
  void set_limits(RegionSourceLimits limits) noexcept { limits_ = limits; }
  // New memory beyond this many bytes held is taken in slabs of one granule, so that it can go back
  // granule by granule (a shared GPU's memory beyond the guarantee).
  void set_fine_above(std::size_t bytes) noexcept { fine_above_ = bytes; }
  // The most memory held at once.
  std::size_t peak_held_bytes() const noexcept { return peak_held_; }
  const Backing& backing() const noexcept { return backing_; }

 protected:
  // `granule`: a power of two, a multiple of 256; `largest_piece`: 0 or a power of two.
  ResizableRegionSource(std::size_t range_bytes, std::size_t granule, RegionSourceLimits limits,
                        std::size_t largest_piece, bool lends = false, std::size_t slab_bytes = 0);
  // Sets the range's base (a multiple of the granule); 0 when the range could not be had.
  void set_range_base(std::uintptr_t base) noexcept;
  std::size_t range_bytes() const noexcept { return range_bytes_; }

 private:
  virtual bool commit(std::uintptr_t base, std::size_t bytes) = 0;
  virtual void decommit(std::uintptr_t base, std::size_t bytes) = 0;

  Status do_reserve(std::size_t bytes, Region& out) override;
  bool do_release(const Region& region) override;
  std::size_t do_resize_granule() const noexcept override { return granule_; }
  Status do_grow(Region& region, std::size_t bytes) override;
  std::size_t do_unmap(const Region& region, std::uintptr_t at, std::size_t bytes) override;
  Status do_map(const Region& region, std::uintptr_t at, std::size_t bytes) override;
  Region do_piece_at(const Region& region, std::uintptr_t at) const override;
  bool do_lends() const noexcept override { return lends_; }
  Status do_grow_unbacked(Region& region, std::size_t bytes) override;
  Status do_lend(const Region& region, std::uintptr_t from, std::uintptr_t at) override;
  std::size_t do_idle_bytes() const noexcept override { return backing_.idle_bytes(); }
  std::size_t do_release_idle() override;
  // Whether region `region` is the one held now.
  bool holds(const Region& region) const noexcept;
  // Backs [at, at + bytes) (unbacked now): plans, admits the new memory against the limits, commits
  // and records; false (nothing changed) if refused.
  bool back(std::uintptr_t at, std::size_t bytes, Backing::Kind kind);
  // Whether [at, at + bytes) is whole granules of the held region, each unbacked (`unbacked`) or
  // each backed (!`unbacked`).
  bool granules_are(const Region& region, std::uintptr_t at, std::size_t bytes, bool unbacked) const;
  void note_held() noexcept;

  const std::size_t granule_;
  const std::size_t range_bytes_;
  const bool lends_;
  Backing backing_;
  std::uintptr_t range_base_ = 0;
  bool range_reserved_ = false;  // a first region was reserved (the shim's source reserves its range then)
  std::size_t held_bytes_ = 0;   // the region's size; 0 when none is held
  std::size_t fine_above_ = std::numeric_limits<std::size_t>::max();
  std::size_t peak_held_ = 0;
  RegionSourceLimits limits_;
  RegionSourceLog log_;
};

// Host memory: the range is mapped inaccessible, the region's bytes readable and writable; unmapping
// granules gives their pages back to the system.
class HostResizableRegionSource final : public ResizableRegionSource {
 public:
  HostResizableRegionSource(std::size_t range_bytes, std::size_t granule, RegionSourceLimits limits = {},
                            std::size_t largest_piece = 0);
  ~HostResizableRegionSource() override;
  HostResizableRegionSource(const HostResizableRegionSource&) = delete;
  HostResizableRegionSource& operator=(const HostResizableRegionSource&) = delete;

 private:
  bool commit(std::uintptr_t base, std::size_t bytes) override;
  void decommit(std::uintptr_t base, std::size_t bytes) override;

  std::uintptr_t mapping_ = 0;  // what mmap returned (the range starts at the next granule boundary)
};

// Addresses in FakeRegionSource's non-canonical range: nothing behind them, so it can lend (`lends`)
// as a driver maps one allocation at two addresses.
class FakeResizableRegionSource final : public ResizableRegionSource {
 public:
  FakeResizableRegionSource(std::size_t range_bytes, std::size_t granule, RegionSourceLimits limits = {},
                            std::size_t largest_piece = 0, bool lends = false, std::size_t slab_bytes = 0);

 private:
  bool commit(std::uintptr_t, std::size_t) override { return true; }
  void decommit(std::uintptr_t, std::size_t) override {}
};

}  // namespace gpumem
