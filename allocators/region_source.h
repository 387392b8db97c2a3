// The platform contract of the allocation core: where large address ranges come from. The arena only
// ever asks a RegionSource for whole regions and gives whole regions back. Implemented by real CUDA
// (cuMemAlloc/cuMemFree in the shim), by plain host memory and by a fake that hands out
// non-dereferenceable addresses (tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "status.h"

namespace gpumem {

// A contiguous address range owned by one RegionSource. Invariant: base != 0 and size > 0 for a live
// region; the arena never reads or writes the memory behind it.
struct Region {
  std::uintptr_t base = 0;
  std::size_t size = 0;
};

class RegionSource {
 public:
  virtual ~RegionSource() = default;

  // Reserves exactly `bytes` bytes, aligned to at least 256. Status::ok and `out` filled, or
  // Status::out_of_memory (any refusal) with `out` untouched. Should not throw: the arena counts an
  // exception as a refusal.
  Status reserve(std::size_t bytes, Region& out) { return do_reserve(bytes, out); }

  // Gives back a region obtained from reserve(), whole. True once it is given back; false if the
  // platform refused (the region is then still held, and the arena keeps it). Must not throw (the
  // arena calls it from noexcept members).
  bool release(const Region& region) { return do_release(region); }

 private:
  virtual Status do_reserve(std::size_t bytes, Region& out) = 0;
  virtual bool do_release(const Region& region) = 0;
};

}  // namespace gpumem
