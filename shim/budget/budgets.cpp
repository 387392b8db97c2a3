// The process's device budgets, their limits from the policy, and the ledger of blocks freed by pointer.
#include "budget/budgets.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <unordered_map>

#include "base/fork_safe_lock.h"
#include "base/refusal_limiter.h"
#include "base/log.h"
#include "policy/process_policy.h"
#include "driver/real_driver.h"

namespace gpumem::shim::budget {
namespace {

std::array<DeviceBudget, kMaxDevices> g_budgets;

struct LedgerEntry {
  CUcontext context;
  CUdevice device;
  BudgetPath path;
  std::size_t bytes;
};
std::unordered_map<std::uintptr_t, LedgerEntry>* g_ledger = nullptr;  // leaked; under ProcessLock::budget_ledger

std::array<std::atomic<bool>, kMaxDevices> g_below_granule_reported{};

std::atomic<Reclaimer> g_reclaimer{nullptr};


// The limit the policy gives `device`, as ContextRegistry computes it for a manager; 0: unmanaged.
std::size_t limit_of_device(CUdevice device) noexcept {
  const RealDriver& driver = real_driver();
  std::size_t total = 0;
  if (!driver.available || driver.cuDeviceTotalMem_v2 == nullptr ||
      driver.cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS) {
    return 0;
  }
  std::size_t free = total;  // without a context on the device, "free" reads as the whole device
  if (current_device() == device) {
    std::size_t context_total = 0;
    if (driver.cuMemGetInfo_v2(&free, &context_total) != CUDA_SUCCESS) free = total;
  }
  const std::size_t limit = process_policy().policy->limit_for_device(total, free);
  if (limit == 0 && first_below_granule(device)) {
    log::at(LogLevel::error, "{}", process_policy().policy->limit_below_granule_error(device, total, free));
  }
  return limit;
}


void reset_in_child() noexcept {
  for (DeviceBudget& budget : g_budgets) budget.reset();
  // The parent's blocks are not the child's. No thread held the ledger's lock at the fork
  // (fork_safe_lock.h).
  if (g_ledger != nullptr) g_ledger->clear();
}

__attribute__((constructor)) void register_fork_handler() { pthread_atfork(nullptr, nullptr, reset_in_child); }

}  // namespace

bool any() noexcept {
  for (const DeviceBudget& budget : g_budgets) {
    if (budget.limit() != 0) return true;
  }
  return false;
}

bool first_below_granule(CUdevice device) noexcept {
  if (device < 0 || device >= kMaxDevices) return false;
  return !g_below_granule_reported[static_cast<std::size_t>(device)].exchange(true, std::memory_order_relaxed);
}

DeviceBudget* slot(CUdevice device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return &g_budgets[static_cast<std::size_t>(device)];
}

DeviceBudget* existing(CUdevice device) noexcept {
  DeviceBudget* budget = slot(device);
  return budget != nullptr && budget->limit() != 0 ? budget : nullptr;
}

DeviceBudget* of_device(CUdevice device) noexcept {
  if (!policy_is_active()) return nullptr;
  DeviceBudget* budget = slot(device);
  if (budget == nullptr) return nullptr;
  if (budget->limit() == 0) {
    const std::size_t limit = limit_of_device(device);
    if (limit == 0) return nullptr;
    budget->set_limit(limit);
  }
  return budget;
}

CUdevice current_device() noexcept {
  const RealDriver& driver = real_driver();
  CUcontext context = nullptr;
  CUdevice device = -1;
  if (!driver.available || driver.cuCtxGetCurrent == nullptr || driver.cuCtxGetCurrent(&context) != CUDA_SUCCESS ||
      context == nullptr || driver.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    return -1;
  }
  return device;
}

namespace {

// What a program refused by the budget can change. Growing on demand helps only an arena that preallocated
// a region it cannot give back in part (classic regions); one that grows already (or maps virtual memory,
// whose idle granules go back) has given back what it could.
const char* refusal_advice(bool arena_holds_memory, bool arena_preallocated) {
  if (!arena_holds_memory) return "raise GPUMEM_LIMIT or the memory fraction";
  if (arena_preallocated) {
    return "the arena's preallocated region holds memory it cannot give back while blocks live in it: set "
           "GPUMEM_PREALLOCATE=false (XLA_PYTHON_CLIENT_PREALLOCATE=false) so that it grows only as needed, "
           "or raise GPUMEM_LIMIT or the memory fraction";
  }
  return "the arena already grows only as needed and has given back the memory it could (the rest holds live "
         "blocks): free blocks, or raise GPUMEM_LIMIT or the memory fraction";
}

}  // namespace

void set_reclaimer(Reclaimer reclaimer) noexcept { g_reclaimer.store(reclaimer, std::memory_order_release); }

bool charge(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call) noexcept {
  DeviceBudget* budget = of_device(device);
  if (budget == nullptr) return true;
  if (budget->try_charge(path, bytes)) return true;
  // Whether an arena of the device keeps a preallocated region (what the advice below depends on).
  bool arena_preallocated = false;
  if (path != BudgetPath::arena) {
    // Memory the arenas hold but do not use goes back to the driver, so another path can have it.
    if (const Reclaimer reclaim = g_reclaimer.load(std::memory_order_acquire)) {
      const Reclaimed reclaimed = reclaim(device);
      arena_preallocated = reclaimed.preallocated;
      if (reclaimed.bytes > 0) {
        log::at(LogLevel::debug, "device {}: the arena gave back {} bytes for {} of {} bytes", device, reclaimed.bytes,
                call, bytes);
      }
    }
    if (budget->try_charge(path, bytes)) return true;
  }
  if (path == BudgetPath::arena) return false;  // the arena backs off and reports its own refusal
  if (!log::enabled(LogLevel::warn)) return false;
  // Limited as the out-of-memory report is (once per size per second).
  std::string repeated;
  if (!observe::report_refusal(observe::RefusalKind::over_budget, bytes, repeated)) return false;
  log::at(LogLevel::warn, "device {}: {} of {} bytes refused{}: over this process's budget ({} of {} bytes charged: arena {}, "
            "driver {}, async_pool {}, program_pool {}, vmm {}, managed {}, arrays {}); {}",
            device, call, bytes,
            repeated,
            budget->charged(), budget->limit(), budget->charged(BudgetPath::arena),
            budget->charged(BudgetPath::driver), budget->charged(BudgetPath::async_pool),
            budget->charged(BudgetPath::program_pool), budget->charged(BudgetPath::vmm),
            budget->charged(BudgetPath::managed), budget->charged(BudgetPath::arrays),
            refusal_advice(budget->charged(BudgetPath::arena) > 0, arena_preallocated));
  return false;
}

void refund(CUdevice device, BudgetPath path, std::size_t bytes) noexcept {
  if (DeviceBudget* budget = existing(device)) budget->refund(path, bytes);
}

void remember_block(std::uintptr_t key, CUdevice device, BudgetPath path, std::size_t bytes) noexcept {
  if (existing(device) == nullptr) return;  // nothing was charged
  try {
    const auto lock = lock_fork_safely(ProcessLock::budget_ledger);
    if (g_ledger == nullptr) g_ledger = new std::unordered_map<std::uintptr_t, LedgerEntry>();
    CUcontext context = nullptr;
    if (real_driver().cuCtxGetCurrent(&context) != CUDA_SUCCESS) context = nullptr;
    (*g_ledger)[key] = LedgerEntry{context, device, path, bytes};
  } catch (...) {  // no host memory: the block stays charged until the process ends
  }
}

Forgotten take_block(std::uintptr_t key) noexcept {
  Forgotten block;
  {
    const auto lock = lock_fork_safely(ProcessLock::budget_ledger);
    if (g_ledger == nullptr) return block;
    const auto found = g_ledger->find(key);
    if (found == g_ledger->end()) return block;
    block = Forgotten{true, key, found->second.device, found->second.path, found->second.bytes};
    g_ledger->erase(found);
  }
  refund(block.device, block.path, block.bytes);
  return block;
}

bool forget_block(std::uintptr_t key) noexcept { return take_block(key).found; }

void forget_context(CUcontext context) noexcept {
  const auto lock = lock_fork_safely(ProcessLock::budget_ledger);
  if (g_ledger == nullptr) return;
  for (auto entry = g_ledger->begin(); entry != g_ledger->end();) {
    if (entry->second.context == context) {
      refund(entry->second.device, entry->second.path, entry->second.bytes);
      entry = g_ledger->erase(entry);
    } else {
      ++entry;
    }
  }
}

void restore_block(const Forgotten& block) noexcept {
  if (!block.found) return;
  if (DeviceBudget* budget = existing(block.device)) budget->force_charge(block.path, block.bytes);
  remember_block(block.key, block.device, block.path, block.bytes);
}

}  // namespace gpumem::shim::budget
