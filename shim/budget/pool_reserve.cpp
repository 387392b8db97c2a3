// What stream-ordered pools hold beyond their live blocks, charged to pool_reserve.
#include "budget/pool_reserve.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "budget/budgets.h"
#include "checked_size.h"
#include "driver/real_driver.h"

namespace gpumem::shim::budget {
namespace {

// One pool this process allocated from. `live`: what its live blocks are charged (to their paths);
// `idle`: what pool_reserve is charged for it. Both under ProcessLock::pool_reserve.
struct PoolCharge {
  CUmemoryPool pool = nullptr;
  CUdevice device = 0;
  std::size_t live = 0;
  std::size_t idle = 0;
};
std::vector<PoolCharge>* g_pools = nullptr;  // leaked, as the other ledgers

void forget_in_child() noexcept { forget_pools_in_child(); }

// The pool's entry, made when missing; null without host memory. Needs the lock.
PoolCharge* entry_locked(CUmemoryPool pool, CUdevice device) {
  if (g_pools == nullptr) {
    g_pools = new std::vector<PoolCharge>();
    reset_in_forked_child(&forget_in_child);
  }
  for (PoolCharge& entry : *g_pools) {
    if (entry.pool == pool) return &entry;
  }
  g_pools->push_back(PoolCharge{pool, device, 0, 0});
  return &g_pools->back();
}

// What a pool may grow by to serve `bytes`: whole steps of 2 MiB, as CUDA's pools (and the
// simulator's) take memory from the device.
constexpr std::size_t kPoolGrowthStep = std::size_t{2} << 20;
std::size_t pool_growth(std::size_t bytes) noexcept {
  return checked_round_up(bytes, kPoolGrowthStep).value_or(bytes);
}

// What the driver says `pool` holds from the device; nullopt when it cannot say (a destroyed pool).
std::optional<std::size_t> reserved_by(CUmemoryPool pool) noexcept {
  const RealDriver& driver = real_driver();
  cuuint64_t reserved = 0;
  if (driver.cuMemPoolGetAttribute == nullptr ||
      driver.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(reserved);
}

// Charges (or refunds) pool_reserve by `delta` on `device`, the GPU's ledger included when shared.
void charge_idle(CUdevice device, std::ptrdiff_t delta) noexcept {
  if (delta < 0) {
    refund(device, BudgetPath::pool_reserve, static_cast<std::size_t>(-delta));
  } else if (delta > 0) {
    DeviceBudget* budget = existing(device);
    if (budget == nullptr) return;
    budget->force_charge(BudgetPath::pool_reserve, static_cast<std::size_t>(delta));
    if (share::Member* member = shared(device)) member->force_reserve(static_cast<std::size_t>(delta));
  }
}

// Brings the charge of `pool` to what it holds; the bytes the charge fell by. The charge changes
// under the lock: a thread that settles after another (one refused, after the reclaim thread trimmed)
// finds the budget and the ledger already holding less, not a settlement half done.
std::size_t settle(CUmemoryPool pool) noexcept {
  std::ptrdiff_t delta = 0;
  try {
    const auto lock = lock_fork_safely(ProcessLock::pool_reserve);
    if (g_pools == nullptr) return 0;
    const auto found = std::find_if(g_pools->begin(), g_pools->end(),
                                    [pool](const PoolCharge& entry) { return entry.pool == pool; });
    if (found == g_pools->end()) return 0;
    const CUdevice device = found->device;
    const std::optional<std::size_t> reserved = reserved_by(pool);
    const std::size_t target = reserved && *reserved > found->live ? *reserved - found->live : 0;
    delta = static_cast<std::ptrdiff_t>(target) - static_cast<std::ptrdiff_t>(found->idle);
    found->idle = target;
    if (!reserved && found->live == 0) g_pools->erase(found);  // destroyed: nothing of it is left
    charge_idle(device, delta);
  } catch (...) {  // the lock failed: nothing changed
    return 0;
  }
  return delta < 0 ? static_cast<std::size_t>(-delta) : 0;
}

std::vector<CUmemoryPool> pools_of(CUdevice device) {
  std::vector<CUmemoryPool> pools;
  const auto lock = lock_fork_safely(ProcessLock::pool_reserve);
  if (g_pools == nullptr) return pools;
  for (const PoolCharge& entry : *g_pools) {
    if (entry.device == device) pools.push_back(entry.pool);
  }
  return pools;
}

}  // namespace

CUmemoryPool pool_of(CUdeviceptr ptr) noexcept {
  const RealDriver& driver = real_driver();
  CUmemoryPool pool = nullptr;
  if (driver.cuPointerGetAttribute == nullptr ||
      driver.cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr) != CUDA_SUCCESS) {
    return nullptr;
  }
  return pool;
}

CUmemoryPool current_pool(CUdevice device) noexcept {
  const RealDriver& driver = real_driver();
  CUmemoryPool pool = nullptr;
  if (driver.cuDeviceGetMemPool == nullptr || driver.cuDeviceGetMemPool(&pool, device) != CUDA_SUCCESS) return nullptr;
  return pool;
}

std::optional<std::size_t> charge_pool_block(CUdevice device, CUmemoryPool /*pool*/, BudgetPath path,
                                             std::size_t bytes, std::string_view call) noexcept {
  // Charged as if the pool had to grow, by whole steps: what it holds idle may be a block freed on
  // another stream that this one cannot have yet, and then the pool does grow. Where the step does
  // not fit but the block does, the block's own bytes (a pool that then grows by a whole step is
  // trimmed after, if that passed the limit). Where nothing fits, charge() trims the pools (what they
  // hold unused goes back) before it refuses. The block is not live in its pool's entry before the
  // driver served it: a settlement meanwhile must not take its bytes out of what the pool holds idle.
  // The step beyond the block is charged to pool_reserve (what the pool holds unused), so that the
  // block's path never reads more in use than its live blocks, even for a moment.
  std::size_t charged = pool_growth(bytes);
  if (const DeviceBudget* budget = existing(device); budget != nullptr && budget->available() < charged) {
    charged = bytes;
  }
  if (!charge(device, BudgetPath::pool_reserve, charged, call)) return std::nullopt;
  if (DeviceBudget* budget = existing(device)) budget->attribute(BudgetPath::pool_reserve, path, bytes);
  return charged;
}

void pool_block_allocated(CUdevice device, CUmemoryPool pool, BudgetPath path, std::size_t bytes, std::size_t charged,
                          bool allocated) noexcept {
  answered(device, charged);
  // Charged beyond the block's bytes, to pool_reserve (charge_pool_block).
  const std::size_t step_rest = charged > bytes ? charged - bytes : 0;
  if (!allocated) {
    refund(device, path, bytes);
    if (step_rest > 0) refund(device, BudgetPath::pool_reserve, step_rest);
    if (pool != nullptr) settle(pool);  // a refusal by the driver may follow a trim
    return;
  }
  if (pool == nullptr) {
    if (step_rest > 0) refund(device, BudgetPath::pool_reserve, step_rest);
    return;
  }
  try {
    const auto lock = lock_fork_safely(ProcessLock::pool_reserve);
    entry_locked(pool, device)->live += bytes;
  } catch (...) {  // no host memory for the entry: its settlement charges nothing for the pool
  }
  // Settled first, then the rest of the step refunded: the budget never reads less than the pool holds.
  settle(pool);
  if (step_rest > 0) refund(device, BudgetPath::pool_reserve, step_rest);
  // The pool grew by more than was charged: what the pools hold unused goes back if that took the
  // budget over its limit.
  const DeviceBudget* budget = existing(device);
  if (budget != nullptr && budget->over_limit()) {
    const std::size_t trimmed = trim_pools(device);
    log::at(LogLevel::debug, "device {}: a {}-byte pool block took the budget over its limit; the pools gave "
            "back {} idle bytes", device, bytes, trimmed);
  }
}

void pool_block_freed(CUdevice device, CUmemoryPool pool, BudgetPath path, std::size_t bytes, bool undo) noexcept {
  if (pool == nullptr) {
    if (undo) {
      if (DeviceBudget* budget = existing(device)) budget->force_charge(path, bytes);
    } else {
      refund(device, path, bytes);
    }
    return;
  }
  try {
    const auto lock = lock_fork_safely(ProcessLock::pool_reserve);
    PoolCharge* entry = entry_locked(pool, device);
    if (undo) {
      entry->idle -= std::min(entry->idle, bytes);
      entry->live += bytes;
    } else {
      entry->live -= std::min(entry->live, bytes);
      entry->idle += bytes;
    }
  } catch (...) {  // no host memory: refunded, as a block of no pool
    if (!undo) refund(device, path, bytes);
    return;
  }
  if (DeviceBudget* budget = existing(device)) {
    if (undo) {
      budget->move(BudgetPath::pool_reserve, path, bytes);
    } else {
      budget->move(path, BudgetPath::pool_reserve, bytes);
    }
  }
}

void pool_block_gone(CUdevice device, CUmemoryPool pool, BudgetPath path, std::size_t bytes) noexcept {
  if (pool != nullptr) {
    try {
      const auto lock = lock_fork_safely(ProcessLock::pool_reserve);
      PoolCharge* entry = entry_locked(pool, device);
      entry->live -= std::min(entry->live, bytes);
    } catch (...) {
    }
  }
  refund(device, path, bytes);
}

std::size_t pools_idle(CUdevice device) noexcept {
  std::size_t idle = 0;
  try {
    const auto lock = lock_fork_safely(ProcessLock::pool_reserve);
    if (g_pools == nullptr) return 0;
    for (const PoolCharge& entry : *g_pools) {
      if (entry.device == device) idle += entry.idle;
    }
  } catch (...) {  // the lock failed
  }
  return idle;
}

void settle_pools(CUdevice device) noexcept {
  try {
    for (const CUmemoryPool pool : pools_of(device)) settle(pool);
  } catch (...) {  // no host memory for the list: left as charged
  }
}

std::size_t trim_pools(CUdevice device) noexcept {
  std::size_t given_back = 0;
  try {
    const RealDriver& driver = real_driver();
    for (const CUmemoryPool pool : pools_of(device)) {
      if (driver.cuMemPoolTrimTo != nullptr) driver.cuMemPoolTrimTo(pool, 0);  // only unused memory goes
      given_back += settle(pool);
    }
  } catch (...) {  // no host memory for the list: nothing trimmed
  }
  return given_back;
}

void forget_pools_in_child() noexcept {
  if (g_pools != nullptr) g_pools->clear();  // the child's only thread; the budgets reset themselves
}

}  // namespace gpumem::shim::budget
