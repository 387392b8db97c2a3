// Fences keep freed memory from being reused while the device may still be using it.
#pragma once

#include <cstdint>

namespace gpumem {

// Identifies the moment a chunk was freed. Ids are handed out by the arena's user in increasing order
// (0 = no fence), so "every fence up to X is resolved" is one comparison.
using FenceId = std::uint64_t;

// A freed chunk may carry a fence. `stream` is an opaque ordering domain (0 = none): a chunk fenced on
// stream S may be reused at once by an allocation made on the same stream S, because work on S is
// ordered after the free. Any other reuse waits until the fence is resolved.
struct Fence {
  FenceId id = 0;
  std::uintptr_t stream = 0;

  [[nodiscard]] constexpr bool empty() const noexcept { return id == 0; }
};

// Answers whether a fence is resolved (the device is done with the memory). Called with the arena's lock
// held: it must be quick and must not call back into the arena. It must not throw (implementations
// should be noexcept); the arena takes an exception as "not resolved" rather than let it escape.
class FenceOracle {
 public:
  virtual ~FenceOracle() = default;
  virtual bool is_resolved(const Fence& fence) = 0;
};

}  // namespace gpumem
