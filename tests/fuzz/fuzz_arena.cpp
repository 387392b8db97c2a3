// Arena operation sequences, checked against a reference model after every step.
//
// The input chooses the arena's options (preallocated or growing, limit, head, garbage collection)
// and then a sequence of operations: allocate (a size, with or without a stream), free one of the
// live blocks (with or without a fence), resolve fences, release wholly free regions. After every
// step: the arena's own validate(); live blocks never overlap and each lies inside one region;
// find() reports each live block as the arena handed it out (size, requested bytes, stream order);
// bytes in use equal the model's sum of live chunk sizes; reserved bytes never pass the limit; a
// free of a block gets ok, a second free of it does not; an allocation that fails says why in a
// status the contract allows (out_of_memory, or fences_pending only while fences are pending).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "bfc_arena.h"
#include "fuzz_input.h"
#include "region_sources.h"

namespace {

using gpumem::fuzz::check;

struct LiveBlock {
  std::size_t requested = 0;
  std::size_t size = 0;  // the chunk's rounded size, as find() reported it at allocation
  bool ordered = false;
};

void check_blocks(const gpumem::BfcArena& arena, const std::map<std::uintptr_t, LiveBlock>& live) {
  std::uintptr_t previous_end = 0;
  std::size_t in_use = 0;
  for (const auto& [base, block] : live) {
    check(base >= previous_end);  // sorted by base: no overlap
    const auto info = arena.find(base);
    check(info.has_value());
    check(info->base == base && info->in_use);
    check(info->size == block.size && info->requested == block.requested && info->ordered == block.ordered);
    check(base >= info->region.base && base + block.size <= info->region.base + info->region.size);
    previous_end = base + block.size;
    in_use += block.size;
  }
  const gpumem::ArenaStats stats = arena.stats();
  check(stats.bytes_in_use == in_use);
  check(stats.bytes_reserved <= arena.options().limit);
  check(stats.peak_bytes_in_use >= stats.bytes_in_use);
  check(stats.peak_bytes_reserved >= stats.bytes_reserved);
  check(stats.bytes_in_use + stats.bytes_fenced <= stats.bytes_reserved);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gpumem::fuzz::Input in(data, size);
  gpumem::ArenaOptions options;
  const std::uint8_t flags = in.take<std::uint8_t>();
  options.preallocate = (flags & 1) != 0;
  options.garbage_collection = (flags & 2) != 0;
  // 256 bytes to 64 MiB, so that refusals and growth both happen within a short input.
  options.limit = std::max<std::size_t>(256, (std::size_t{in.take<std::uint16_t>()} + 1) << (8 + in.below(11)));
  if ((flags & 4) != 0) options.preallocation_head_bytes = std::size_t{in.below(64)} << 12;
  gpumem::RegionSourceLimits limits;
  if ((flags & 8) != 0) limits.capacity_bytes = options.limit / 2 + 256;  // the driver runs out first
  gpumem::FakeRegionSource source(limits);
  gpumem::BfcArena arena(source, options);
  std::map<std::uintptr_t, LiveBlock> live;
  std::vector<std::uintptr_t> freed;  // freed blocks, for double-free checks
  gpumem::FenceId next_fence = 1;
  gpumem::FenceId resolved = 0;

  for (int step = 0; step < 2000 && !in.empty(); ++step) {
    switch (in.below(6)) {
      case 0:
      case 1: {  // allocate
        const std::size_t bytes = 1 + (std::size_t{in.take<std::uint16_t>()} << in.below(14));
        const std::uintptr_t stream = in.below(3);  // 0: synchronous
        std::uintptr_t out = 0;
        const gpumem::Status status = arena.allocate(bytes, out, stream);
        if (status == gpumem::Status::ok) {
          check(out != 0 && out % 256 == 0);
          check(live.count(out) == 0);
          const auto info = arena.find(out);
          check(info.has_value() && info->size >= bytes && info->size % 256 == 0);
          live[out] = LiveBlock{bytes, info->size, stream != 0};
          std::erase(freed, out);
        } else {
          check(status == gpumem::Status::out_of_memory ||
                (status == gpumem::Status::fences_pending && arena.has_pending_fences()));
        }
        break;
      }
      case 2:
      case 3: {  // free one live block, fenced or not
        if (live.empty()) break;
        auto it = live.begin();
        std::advance(it, static_cast<long>(in.below(live.size())));
        const bool fenced = in.below(2) == 1;
        const gpumem::Fence fence = fenced ? gpumem::Fence{next_fence++, in.below(3)} : gpumem::Fence{};
        check(arena.deallocate(it->first, fence) == gpumem::Status::ok);
        freed.push_back(it->first);
        live.erase(it);
        break;
      }
      case 4: {  // resolve some fences, or free a block a second time (which must be refused)
        if (in.below(4) == 0 && !freed.empty()) {
          const std::uintptr_t again = freed[in.below(freed.size())];
          if (live.count(again) == 0) check(arena.deallocate(again) != gpumem::Status::ok);
        } else {
          resolved = std::min<gpumem::FenceId>(next_fence - 1, resolved + 1 + in.below(4));
          arena.resolve_fences_through(resolved);
        }
        break;
      }
      default: {  // give back wholly free regions
        const std::size_t before = arena.stats().bytes_reserved;
        const std::size_t released = arena.release_free_regions();
        check(arena.stats().bytes_reserved == before - released);
        break;
      }
    }
    check(arena.validate());
    check_blocks(arena, live);
  }
  for (const auto& [base, block] : live) check(arena.deallocate(base) == gpumem::Status::ok);
  check(arena.stats().bytes_in_use == 0);
  check(arena.validate());
  return 0;
}
