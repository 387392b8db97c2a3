// What stream-ordered pools hold from the device beyond their live blocks.
//
// A pool keeps the memory of the blocks freed into it (up to its release threshold, until trimmed):
// the device holds it for the process although no block uses it. The budget charges each live block
// to its path (async_pool, program_pool, driver) and what a pool holds beyond them to pool_reserve,
// so that the budget's total is what the pools really hold, whatever the release threshold:
// - a block freed into its pool moves its charge from its path to pool_reserve (the pool keeps it);
// - a block allocated from a pool is charged before the driver call as if the pool had to grow by
//   whole 2 MiB steps for it (what the pool holds idle may be a block freed on another stream, which
//   this one cannot have yet); where the step does not fit but the block does, by its own bytes;
//   what it did not need is refunded after the call;
// - after every pool allocation, and before cuMemGetInfo answers, the pool's charge is settled to
//   what the driver says it holds (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT); a pool that grew beyond the
//   memory it was charged for is trimmed if that takes the budget over its limit;
// - a charge that does not fit trims the device's pools (cuMemPoolTrimTo: only unused memory goes)
//   and tries again before it is refused.
//
// Every function is thread-safe and never throws; the driver is called outside ProcessLock::pool_reserve,
// except the reserved-bytes query of a settlement, which never blocks.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <optional>
#include <string_view>

#include "budget/device_budget.h"

namespace gpumem::shim::budget {

// The pool the driver served `ptr` from; null when it is no pool's (or the driver cannot say).
CUmemoryPool pool_of(CUdeviceptr ptr) noexcept;
// The device's current pool, which cuMemAllocAsync allocates from; null when the driver cannot say.
CUmemoryPool current_pool(CUdevice device) noexcept;

// Before a block of `bytes` is allocated from `pool` on `device`: charges `path` for the pool's
// growth by whole steps where that fits, else for `bytes` (budget::charge, which trims the pools
// before it refuses: nullopt then, nothing charged). Returns what it charged.
std::optional<std::size_t> charge_pool_block(CUdevice device, CUmemoryPool pool, BudgetPath path,
                                             std::size_t bytes, std::string_view call) noexcept;
// After the allocation: the block lives (`allocated`; what was charged beyond its bytes is refunded
// once the pool is settled), or the charge is undone (it failed).
void pool_block_allocated(CUdevice device, CUmemoryPool pool, BudgetPath path, std::size_t bytes,
                          std::size_t charged, bool allocated) noexcept;
// A live block of `bytes` charged to `path` went back to `pool` (freed): its charge moves to
// pool_reserve. `undo`: the free failed after all, and the charge moves back.
void pool_block_freed(CUdevice device, CUmemoryPool pool, BudgetPath path, std::size_t bytes,
                      bool undo = false) noexcept;
// A live block's memory went with its context: its charge is refunded, nothing stays in the pool.
void pool_block_gone(CUdevice device, CUmemoryPool pool, BudgetPath path, std::size_t bytes) noexcept;

// What pool_reserve is charged on `device`: what its pools hold beyond their live blocks, as last
// settled. Free for any path: a charge that does not fit trims the pools first.
std::size_t pools_idle(CUdevice device) noexcept;

// Settles every pool of `device` to what it holds now.
void settle_pools(CUdevice device) noexcept;
// Trims every pool of `device` to its live blocks and settles them; the bytes their charge fell by.
std::size_t trim_pools(CUdevice device) noexcept;

// In a forked child: the parent's pools are not the child's.
void forget_pools_in_child() noexcept;

}  // namespace gpumem::shim::budget
