// The registry of contexts and their memory managers.
#include "managers/context_registry.h"

#include "context/capture_state.h"
#include "context/context_sync.h"

#include <algorithm>
#include <memory>
#include <new>
#include <optional>
#include <utility>

#include "managers/bfc_manager.h"
#include "budget/budgets.h"
#include "budget/reclaim_thread.h"
#include "managers/cuda_async_manager.h"
#include "context/peer_access.h"
#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "managers/platform_manager.h"
#include "policy/process_policy.h"
#include "policy/value_parsers.h"
#include "driver/real_driver.h"

namespace gpumem::shim {
namespace {

// The registry is reached from the fork handler, which takes no argument.
std::atomic<ContextRegistry*> g_registry{nullptr};
// Whether this process said, at notice level, that gpumem took over a device: once, at the first.
std::atomic<bool> g_takeover_said{false};

// `never_wait`: skip a manager another thread holds (at exit it may never let go).
void log_summary(const MemoryManager& manager, bool never_wait = false) noexcept {
  try {
    const std::string line = manager.summary(never_wait);
    if (!line.empty()) log::write(LogLevel::info, line);
  } catch (...) {  // no host memory for the line: drop it
  }
}

// `share`: the device is shared with other processes (docs/sharing.md); `limit` is then the most this
// process may ever hold, and `preallocation` the policy's fraction of its guaranteed share.
std::unique_ptr<MemoryManager> make_manager(CUcontext context, CUdevice device, const Policy& policy,
                                            std::size_t limit, const std::optional<budget::ShareTerms>& share,
                                            std::size_t preallocation, log::Pending& messages) {
  const RealDriver& driver = real_driver();
  switch (policy.mode) {
    case Mode::bfc: {
      CUmemoryPool default_pool = nullptr;
      if (driver.cuDeviceGetDefaultMemPool == nullptr ||
          driver.cuDeviceGetDefaultMemPool(&default_pool, device) != CUDA_SUCCESS) {
        default_pool = nullptr;
      }
      // Other paths (VMM, managed memory, arrays, ...) already hold part of the budget: a region of the
      // whole limit cannot be had, and would leave them nothing later; the arena grows instead.
      const DeviceBudget* budget = budget::existing(device);
      const bool others_hold_memory = budget != nullptr && budget->charged() > 0;
      if (policy.preallocate && others_hold_memory) {
        messages.add(LogLevel::info,
                     "device {}: other allocation paths hold {} bytes of the budget: the arena grows on demand "
                     "instead of preallocating", device, budget->charged());
      }
      return std::make_unique<BfcManager>(context, device, policy, limit, default_pool,
                                          policy.preallocate && !others_hold_memory && (!share || preallocation > 0),
                                          preallocation,
                                          share ? std::optional<std::size_t>(share->guarantee) : std::nullopt);
    }
    case Mode::cuda_async:
      if (auto manager = CudaAsyncManager::create(context, device, policy, limit, messages)) return manager;
      return std::make_unique<PlatformManager>(context, device, policy, limit);
    case Mode::platform:
      return std::make_unique<PlatformManager>(context, device, policy, limit);
    case Mode::off:
      break;
  }
  return nullptr;
}

// The budget's reclaimer (budget::set_reclaimer): the device's live managers give back what they hold
// wholly unused, so that a charge of another path can fit.
budget::Reclaimed reclaim_device(CUdevice device) noexcept {
  budget::Reclaimed reclaimed;
  const ContextRegistry* registry = ContextRegistry::existing();
  if (registry == nullptr) return reclaimed;
  try {
    registry->for_each_manager([&](MemoryManager& manager, bool live) {
      if (!live || manager.device() != device) return;
      reclaimed.bytes += manager.trim();
      reclaimed.preallocated = reclaimed.preallocated || manager.keeps_preallocation();
    });
  } catch (...) {  // no host memory while trimming: what was released so far stands
  }
  return reclaimed;
}

// The reclaim thread's (budget::set_idle_reclaimer): the device's live managers give back, without
// waiting for the program or the device, what they hold unused, and say what they still hold.
budget::IdleReclaimed give_back_idle_on_device(CUdevice device, std::size_t want) noexcept {
  budget::IdleReclaimed reclaimed;
  const ContextRegistry* registry = ContextRegistry::existing();
  if (registry == nullptr) return reclaimed;
  try {
    registry->for_each_manager([&](MemoryManager& manager, bool live) {
      if (!live || manager.device() != device) return;
      const ManagerCounters counters = manager.counters();
      reclaimed.calls += counters.allocs + counters.frees;
      const MemoryManager::IdleGiveBack given =
          manager.give_back_idle(want > reclaimed.bytes ? want - reclaimed.bytes : 0);
      reclaimed.bytes += given.bytes;
      reclaimed.idle += given.idle;
      reclaimed.in_use += given.in_use;
      reclaimed.busy = reclaimed.busy || given.busy;
      reclaimed.fences_pending = reclaimed.fences_pending || given.fences_pending || given.device_busy;
    });
  } catch (...) {  // no host memory: what was given back so far stands
  }
  return reclaimed;
}

}  // namespace

ContextRegistry& ContextRegistry::instance() {
  static ContextRegistry* const registry = [] {
    auto* created = new ContextRegistry();  // leaked on purpose
    g_registry.store(created, std::memory_order_release);
    budget::set_reclaimer(&reclaim_device);
    budget::set_idle_reclaimer(&give_back_idle_on_device);
    reset_in_forked_child(&ContextRegistry::reset_in_child);
    return created;
  }();
  return *registry;
}

ContextRegistry::ContextRegistry() = default;

const ContextRegistry* ContextRegistry::existing() noexcept { return g_registry.load(std::memory_order_acquire); }

bool ContextRegistry::is_live(const MemoryManager* manager) const noexcept {
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (slots_[i].manager.load(std::memory_order_acquire) == manager &&
        slots_[i].context.load(std::memory_order_acquire) != nullptr) {
      return true;
    }
  }
  return false;
}

MemoryManager* ContextRegistry::current(bool create) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuCtxGetCurrent == nullptr) return nullptr;
  CUcontext context = nullptr;
  if (driver.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) return nullptr;
  if (MemoryManager* manager = find(context)) return manager;
  if (!create || !policy_is_active()) return nullptr;
  // A shared device joins its GPU's ledger first, with no lock held (the ledger takes a fork-safe one).
  std::optional<budget::ShareTerms> share;
  if (CUdevice device = -1; process_policy().policy->share && driver.cuCtxGetDevice(&device) == CUDA_SUCCESS) {
    share = budget::share_terms(device);
  }
  log::Pending messages;
  MemoryManager* manager = nullptr;
  bool created = false;
  {
    const auto lock = lock_fork_safely(ProcessLock::registry);
    manager = find(context);  // made by another thread meanwhile?
    if (manager == nullptr) {
      manager = create_locked(context, share, messages);
      created = manager != nullptr;
    }
  }
  messages.flush();
  // Peer access the program enabled before the context's first allocation applies to its memory too.
  if (created) manager->refresh_peer_access();
  return manager;
}

MemoryManager* ContextRegistry::find(CUcontext context) const noexcept {
  if (context == nullptr) return nullptr;
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (slots_[i].context.load(std::memory_order_acquire) == context) {
      return slots_[i].manager.load(std::memory_order_acquire);
    }
  }
  return nullptr;
}

MemoryManager* ContextRegistry::first_on_device(CUdevice device) const noexcept {
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (slots_[i].context.load(std::memory_order_acquire) == nullptr) continue;
    MemoryManager* manager = slots_[i].manager.load(std::memory_order_acquire);
    if (manager != nullptr && manager->device() == device) return manager;
  }
  return nullptr;
}

MemoryManager* ContextRegistry::owner_of(CUdeviceptr ptr) const {
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (slots_[i].context.load(std::memory_order_acquire) == nullptr) continue;
    MemoryManager* manager = slots_[i].manager.load(std::memory_order_acquire);
    if (manager != nullptr && manager->owns(ptr)) return manager;
  }
  return nullptr;
}

void ContextRegistry::forget(CUcontext context) {
  if (context == nullptr) return;
  MemoryManager* forgotten = nullptr;
  {
    const auto lock = lock_fork_safely(ProcessLock::registry);
    const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < used; ++i) {
      if (slots_[i].context.load(std::memory_order_acquire) == context) {
        slots_[i].context.store(nullptr, std::memory_order_release);
        forgotten = slots_[i].manager.load(std::memory_order_acquire);
      }
    }
  }
  budget::forget_context(context);
  forget_peer_access(context);
  if (forgotten == nullptr) return;
  forgotten->retire();
  // gpumem-top's in-use figure: what the device's other contexts still hold, not the retired one's.
  if (share::Member* member = budget::shared(forgotten->device())) {
    std::uint64_t in_use = 0;
    for_each_manager([&](const MemoryManager& manager, bool live) {
      ManagerStats stats;
      if (live && manager.device() == forgotten->device() && manager.stats_snapshot(stats, /*never_wait=*/true)) {
        in_use += stats.bytes_in_use;
      }
    });
    member->note_in_use(in_use);
  }
  log::at(LogLevel::debug, "context {}: forgotten with its memory", static_cast<const void*>(context));
  if (log::enabled(LogLevel::info)) log_summary(*forgotten);
}

void ContextRegistry::forget_peer_access(CUcontext context) const {
  try {
    // The driver ends peer access to and from a destroyed context: the memory it could reach is closed
    // to its device again, unless another context of that device keeps the access.
    for (const CUcontext peer : peer_access::forget(context)) {
      if (MemoryManager* manager = find(peer)) manager->refresh_peer_access();
    }
  } catch (...) {  // no host memory: the access stays as it was
  }
}

void ContextRegistry::log_live_summaries() const noexcept {
  if (!log::enabled(LogLevel::info)) return;
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (slots_[i].context.load(std::memory_order_acquire) == nullptr) continue;
    if (const MemoryManager* manager = slots_[i].manager.load(std::memory_order_acquire)) {
      log_summary(*manager, /*never_wait=*/true);
    }
  }
}

void ContextRegistry::forget_primary_context(CUdevice device) {
  if (!real_driver().available) return;
  CUcontext primary = nullptr;
  if (name_primary_context(device, primary)) {
    if (primary != nullptr) forget(primary);
    return;
  }
  // The driver cannot say which context is the primary (no entry points, or they fail): every context
  // of the device is forgotten, safer than keeping an arena whose memory the reset frees. Their arenas
  // and pools go back before the driver's reset runs, which would first wait for the primary's queued
  // work: each waits for its own here (none was named to the caller's wait), but not during a graph
  // capture, which a synchronisation would end.
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used && !capture_state::active(); ++i) {
    const MemoryManager* manager = slots_[i].manager.load(std::memory_order_acquire);
    const CUcontext context = slots_[i].context.load(std::memory_order_acquire);
    if (manager != nullptr && context != nullptr && manager->device() == device) synchronize_context(context);
  }
  const auto lock = lock_fork_safely(ProcessLock::registry);
  for (std::size_t i = 0; i < used; ++i) {
    MemoryManager* manager = slots_[i].manager.load(std::memory_order_acquire);
    if (manager != nullptr && manager->device() == device) {
      const CUcontext context = slots_[i].context.exchange(nullptr, std::memory_order_acq_rel);
      if (context != nullptr) {
        budget::forget_context(context);
        forget_peer_access(context);
        manager->retire();
      }
    }
  }
  log::at(LogLevel::debug, "device {}: its primary context could not be named at a reset; every context of the "
          "device forgotten with its memory", device);
}

MemoryManager* ContextRegistry::create_locked(CUcontext context, const std::optional<budget::ShareTerms>& share,
                                              log::Pending& messages) {
  const RealDriver& driver = real_driver();
  const Policy& policy = *process_policy().policy;
  CUdevice device = 0;
  std::size_t total = 0;
  std::size_t free = 0;
  std::size_t total_seen_by_context = 0;
  if (driver.cuCtxGetDevice(&device) != CUDA_SUCCESS ||
      driver.cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS ||
      driver.cuMemGetInfo_v2(&free, &total_seen_by_context) != CUDA_SUCCESS) {
    messages.add(LogLevel::error, "context {}: could not query its device; its memory is not managed",
                 static_cast<const void*>(context));
    return nullptr;
  }
  std::size_t limit = budget::policy_limit(device, total, free, messages);
  if (limit == 0) return nullptr;  // below one granule: no pool, no budget, the driver's answers
  std::size_t preallocation = 0;
  if (share) {
    // The budget is the allowance the ledger gives; the arena may grow to the cap, and the policy's
    // fraction (or GPUMEM_LIMIT) applies to the guaranteed share: that is what it preallocates.
    limit = share->cap;
    preallocation = policy.limit_for_device(share->guarantee, std::min(free, share->guarantee));
  } else if (DeviceBudget* budget = budget::slot(device)) {
    // Every context of the device shares one budget, whose limit the first one (or another path) set.
    limit = budget->set_limit(limit);
  }

  std::size_t slot = kMaxContexts;
  const std::size_t used = slots_in_use_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used && slot == kMaxContexts; ++i) {
    if (slots_[i].context.load(std::memory_order_acquire) == nullptr) slot = i;
  }
  if (slot == kMaxContexts && used < kMaxContexts) slot = used;
  if (slot == kMaxContexts) {
    messages.add(LogLevel::error, "more than {} contexts in use; the memory of context {} is not managed",
                 kMaxContexts, static_cast<const void*>(context));
    return nullptr;
  }

  std::unique_ptr<MemoryManager> made;
  try {
    made = make_manager(context, device, policy, limit, share, preallocation, messages);
  } catch (const std::bad_alloc&) {
    made = nullptr;
  }
  if (!made) return nullptr;
  MemoryManager* manager = made.release();  // never deleted: see the invariant
  slots_[slot].manager.store(manager, std::memory_order_release);
  slots_[slot].context.store(context, std::memory_order_release);
  if (slot == used) slots_in_use_.store(used + 1, std::memory_order_release);
  const std::size_t made_before = managers_made_.load(std::memory_order_relaxed);
  if (made_before < kMaxManagersKept) made_[made_before].store(manager, std::memory_order_release);
  managers_made_.store(made_before + 1, std::memory_order_release);
  messages.add(LogLevel::info, "context {} (device {}): {} mode, limit {} bytes of {} total ({} free){}; {}",
               static_cast<const void*>(context), device, manager->mode_name(), limit, total, free,
               share ? fmt::format(", shared: guarantee {} bytes, preallocation {} bytes", share->guarantee, preallocation)
                     : std::string(),
               policy.describe());
  if (log::enabled(LogLevel::notice) && !g_takeover_said.exchange(true, std::memory_order_relaxed)) {
    const std::string origin =
        share ? fmt::format("shared: guarantee {}, GPUMEM_SHARE", human_byte_size(share->guarantee))
              : policy.device_limit(DeviceView{device, total, free, budget::ranks_sharing(device)}).summary;
    messages.add(LogLevel::notice, "device {}: {}, limit {} ({})", device, manager->serving(), human_byte_size(limit),
                 origin);
  }
  return manager;
}

void ContextRegistry::reset_in_child() noexcept {
  ContextRegistry* registry = g_registry.load(std::memory_order_acquire);
  if (registry == nullptr) return;
  // The child starts fresh: the parent's contexts and arenas are not the child's, nor are their locks
  // (fork_safe_lock.h). The forking thread is the child's only thread.
  for (Slot& slot : registry->slots_) slot.context.store(nullptr, std::memory_order_relaxed);
  registry->slots_in_use_.store(0, std::memory_order_release);
  registry->managers_made_.store(0, std::memory_order_release);  // the parent's figures are the parent's
}

}  // namespace gpumem::shim
