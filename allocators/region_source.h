// The platform contract of the allocation core: where large address ranges come from. The arena asks
// a RegionSource for whole regions and gives whole regions back. Implemented by real CUDA
// (cuMemAlloc/cuMemFree in the shim), by plain host memory and by a fake that hands out
// non-dereferenceable addresses (tests).
//
// A source may also be resizable (resize_granule() > 0): its regions lie in one reserved address
// range and grow at their end in place (CUDA's virtual memory management: memory mapped
// under a reserved range). The arena then holds one region and grows it by the shortfall, so chunks
// coalesce across growth steps. Inside the region it can give back the memory of whole granules
// that lie in free chunks (unmap) and have them backed again when a block needs them (map): the
// address range stays the arena's, only the memory behind it comes and goes. Such a source may back
// its memory in pieces larger than a granule (a few large physical allocations instead of one per
// granule): each piece is given back only whole, and the arena asks piece_at() where they lie.
//
// A resizable source may also lend (lends() true): back unbacked granules of the region with the
// memory already behind idle granules of a larger piece, mapped a second time (CUDA: cuMemMap of
// the piece's handle at an offset). An idle granule of a piece that also holds live blocks cannot go
// back alone; lent, it serves a block elsewhere without new memory, while the arena keeps its first
// addresses out of use until the loan ends (the borrowed granule is unmapped).
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

  // 0: regions have a fixed size (grow, unmap and map are never called). Otherwise the unit, a power
  // of two and a multiple of 256, of every size this source is given: reserve, grow, unmap and map bytes,
  // and the region bases it hands out are multiples of it. Constant for the source's lifetime.
  std::size_t resize_granule() const noexcept { return do_resize_granule(); }

  // Resizable sources only: makes the `bytes` after `region`'s end part of it (the region grows in
  // place; `region` is the arena's record, updated on success). Status::out_of_memory (any refusal)
  // leaves it as it was. Must not throw.
  Status grow(Region& region, std::size_t bytes) { return do_grow(region, bytes); }

  // Resizable sources only: unbacks [at, at + bytes), whole granules inside `region` that are backed
  // now; the addresses stay part of the region, unbacked, and their memory goes back or waits for
  // the next map() (idle_bytes()). Returns the bytes unbacked: all, or where the platform refused
  // part way, the granules from `at` up to there (0: nothing changed). Must not throw.
  std::size_t unmap(const Region& region, std::uintptr_t at, std::size_t bytes) {
    return do_unmap(region, at, bytes);
  }

  // Resizable sources only: backs [at, at + bytes) (whole granules inside `region`, unbacked now,
  // given back by unmap()) with memory again. Status::out_of_memory (any refusal) leaves it unbacked.
  // Must not throw.
  Status map(const Region& region, std::uintptr_t at, std::size_t bytes) { return do_map(region, at, bytes); }

  // Resizable sources only: whether lend() and grow_unbacked() are supported. Constant for the
  // source's lifetime.
  bool lends() const noexcept { return do_lends(); }

  // Lending sources only: makes the `bytes` after `region`'s end part of it, unbacked, as unmap()
  // leaves granules (`region` is the arena's record, updated on success). Status::out_of_memory (any
  // refusal) leaves it as it was. Must not throw.
  Status grow_unbacked(Region& region, std::size_t bytes) { return do_grow_unbacked(region, bytes); }

  // Lending sources only: backs the granule at `at` (unbacked, inside `region`) with the memory
  // behind the granule at `from` (backed, inside `region`, in a piece not itself borrowed), which
  // stays mapped at `from` too. No memory is added: the borrowed granule is a piece of its own, and
  // unmap() of it gives no memory back. Status::out_of_memory (any refusal) leaves it unbacked. Must
  // not throw.
  Status lend(const Region& region, std::uintptr_t from, std::uintptr_t at) { return do_lend(region, from, at); }

  // Resizable sources only: the piece of backed memory holding `at` (a backed byte of `region`), the
  // smallest stretch unmap() gives back: whole granules around `at`. {0, 0} when `at` is not backed.
  // Default: the granule holding `at`. Must not throw.
  Region piece_at(const Region& region, std::uintptr_t at) const { return do_piece_at(region, at); }

  // Resizable sources only: memory the source holds that backs no granule now, kept for the next
  // map() or grow() (unmap() may keep memory rather than give it back). Default 0.
  std::size_t idle_bytes() const noexcept { return do_idle_bytes(); }
  // Resizable sources only: gives back what of that memory it can (whole pieces); returns the bytes.
  // Must not throw.
  std::size_t release_idle() { return do_release_idle(); }

 private:
  virtual Status do_reserve(std::size_t bytes, Region& out) = 0;
  virtual bool do_release(const Region& region) = 0;
  virtual std::size_t do_resize_granule() const noexcept { return 0; }
  virtual Status do_grow(Region&, std::size_t) { return Status::out_of_memory; }
  virtual std::size_t do_unmap(const Region&, std::uintptr_t, std::size_t) { return 0; }
  virtual Status do_map(const Region&, std::uintptr_t, std::size_t) { return Status::out_of_memory; }
  virtual bool do_lends() const noexcept { return false; }
  virtual Status do_grow_unbacked(Region&, std::size_t) { return Status::out_of_memory; }
  virtual Status do_lend(const Region&, std::uintptr_t, std::uintptr_t) { return Status::out_of_memory; }
  virtual std::size_t do_idle_bytes() const noexcept { return 0; }
  virtual std::size_t do_release_idle() { return 0; }
  virtual Region do_piece_at(const Region&, std::uintptr_t at) const {
    const std::size_t granule = do_resize_granule();
    return granule == 0 ? Region{} : Region{at / granule * granule, granule};
  }
};

}  // namespace gpumem
