// Helpers shared by the arena's unit tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "bfc_arena.h"
#include "region_sources.h"

namespace gpumem::test {

inline constexpr std::size_t kKiB = std::size_t{1} << 10;

// Options for a preallocated arena of `limit` bytes with everything else at its default.
inline ArenaOptions preallocated(std::size_t limit) {
  ArenaOptions options;
  options.limit = limit;
  options.preallocate = true;
  return options;
}

// Options for a growing arena of `limit` bytes.
inline ArenaOptions growing(std::size_t limit, bool garbage_collection = false) {
  ArenaOptions options;
  options.limit = limit;
  options.preallocate = false;
  options.garbage_collection = garbage_collection;
  options.min_growth_bytes = 2 * kMiB;  // small regions, so that tests see several
  return options;
}

// Allocates and requires success.
inline std::uintptr_t must_allocate(BfcArena& arena, std::size_t bytes, std::uintptr_t stream = 0) {
  std::uintptr_t ptr = 0;
  REQUIRE(to_string(arena.allocate(bytes, ptr, stream)) == std::string("ok"));
  REQUIRE(ptr != 0);
  return ptr;
}

// Allocates `bytes` followed by a live 256-byte guard, so the block never coalesces to the right.
inline std::uintptr_t allocate_guarded(BfcArena& arena, std::size_t bytes) {
  const std::uintptr_t ptr = must_allocate(arena, bytes);
  must_allocate(arena, 256);
  return ptr;
}

inline void must_free(BfcArena& arena, std::uintptr_t ptr, Fence fence = {}) {
  REQUIRE(to_string(arena.deallocate(ptr, fence)) == std::string("ok"));
}

// The size of the chunk starting at `ptr` (0 if `ptr` is not a chunk start).
inline std::size_t chunk_size(const BfcArena& arena, std::uintptr_t ptr) {
  const auto info = arena.find(ptr);
  return info && info->base == ptr ? info->size : 0;
}

// An oracle that reports fences up to `resolved_through` as resolved and logs every question.
class ThresholdOracle final : public FenceOracle {
 public:
  FenceId resolved_through = 0;
  std::vector<FenceId> asked;

  bool is_resolved(const Fence& fence) override {
    asked.push_back(fence.id);
    return fence.id <= resolved_through;
  }
};

}  // namespace gpumem::test
