// The fair shares of one GPU's memory among the processes sharing it: weighted max-min (water-filling)
// over what each asks for, with floors first, and what each may borrow on top of its guarantee.
//
// Pure (no CUDA, no files, no locks, no allocation): the ledger computes it under its lock from the
// slots it just read, and the unit tests from hand-computed cases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gpumem::shim::share {

// A demand with no bound: the member is growing (or waiting), so it would take all it can have.
inline constexpr std::uint64_t kUnbounded = UINT64_MAX;
// The most members one GPU's ledger holds.
inline constexpr std::size_t kMaxMembers = 256;

// One live member as the computation sees it.
struct Claim {
  std::uint32_t weight_milli = 1000;   // GPUMEM_SHARE_WEIGHT in thousandths; 0 is taken as 1
  std::uint64_t floor = 0;             // GPUMEM_SHARE_MIN: guaranteed whatever it asks for now
  std::uint64_t cap = kUnbounded;      // GPUMEM_LIMIT: never more than this
  std::uint64_t demand = kUnbounded;   // what it would like to hold
  std::uint64_t held = 0;              // what it holds now
  std::uint64_t idle = 0;              // of held, what it holds unused and can give back on request (<= held)
  bool waiting = false;                // it waits for memory inside its guarantee
};

struct Share {
  std::uint64_t guarantee = 0;  // its water-filled share: what it can always have back
  std::uint64_t allowance = 0;  // its budget now: the guarantee, or what it holds plus what is free
};

struct SharesSummary {
  std::uint64_t held = 0;        // what the members hold, summed (at most the capacity... or more)
  std::uint64_t free = 0;        // capacity less what they hold (0 when they hold more)
  bool floors_scaled = false;    // the floors asked for exceed the capacity: scaled down proportionally
  bool someone_waits = false;
};

// Fills shares[i] for claims[i] (both of the same size, at most kMaxMembers; extra entries are left
// alone). Guarantees: floors first (min(floor, cap) each; scaled in proportion when they exceed the
// capacity), then the rest water-filled by weight up to each demand (min(demand, cap)); the
// guarantees never sum to more than the capacity, and to exactly the capacity when some demand is
// unbounded. Allowance: the guarantee, or the member's holding plus what is free if larger, never
// above its cap; while any member waits, every other member's allowance is its guarantee alone (a
// borrower may not grow while memory it borrowed is asked back).
SharesSummary fair_shares(std::uint64_t capacity, std::span<const Claim> claims, std::span<Share> shares) noexcept;

// What each member is asked to give back so that member `waiter` can take `wanted` bytes more, `owed`
// of them inside its guarantee (owed <= wanted; 0 when the waiter is beyond its guarantee):
// 1. borrowers (held > guarantee) owe the shortfall of `owed` (held by all + owed - capacity), split in
//    proportion to what each borrowed, rounded up, never more than it borrowed;
// 2. what those asks leave of the shortfall of `wanted`, counting only what the borrowers hold idle
//    (Claim::idle) towards it, is asked of the idle memory the others hold (lent: their guarantees stay
//    theirs), split in proportion to the idle memory each has left, rounded up, never more than it;
//    never of a member that waits itself.
// requests[i] is 0 for the waiter. Returns the total asked.
std::uint64_t reclaim_requests(std::uint64_t capacity, std::span<const Claim> claims, std::span<const Share> shares,
                               std::size_t waiter, std::uint64_t owed, std::uint64_t wanted,
                               std::span<std::uint64_t> requests) noexcept;

}  // namespace gpumem::shim::share
