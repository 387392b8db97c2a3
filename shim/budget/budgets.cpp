// The process's device budgets, their limits from the policy, and the ledger of blocks freed by pointer.
#include "budget/budgets.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

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
  log::Pending messages;
  const std::size_t limit = policy_limit(device, total, free, messages);
  messages.flush();
  return limit;
}

// What policy_limit found per device, for the exit statistics. A UUID is written once, by the thread
// that moved `uuid_state` from unknown to writing; readers read it only once it is known.
enum UuidState : int { kUuidUnknown, kUuidWriting, kUuidKnown };
struct DeviceIdentity {
  std::array<char, 48> uuid{};
  std::atomic<int> uuid_state{kUuidUnknown};
  std::atomic<unsigned> ranks_sharing{1};
  std::atomic<bool> limit_reported{false};
};
std::array<DeviceIdentity, kMaxDevices> g_identities;

std::string format_uuid(const GpuId& id) {
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
                     "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12],
                     id[13], id[14], id[15]);
}

// The UUIDs of the devices this process sees, by ordinal. A device whose UUID cannot be read gets an
// identity of its own (its ordinal), so it is never taken for another.
std::vector<GpuId> visible_gpus() {
  const RealDriver& driver = real_driver();
  std::vector<GpuId> visible;
  int count = 0;
  if (driver.cuDeviceGetCount == nullptr || driver.cuDeviceGetCount(&count) != CUDA_SUCCESS) return visible;
  for (int ordinal = 0; ordinal < count && ordinal < kMaxDevices; ++ordinal) {
    GpuId id{};
    CUdevice handle = 0;
    CUuuid uuid{};
    if (driver.cuDeviceGetUuid_v2 != nullptr && driver.cuDeviceGet(&handle, ordinal) == CUDA_SUCCESS &&
        driver.cuDeviceGetUuid_v2(&uuid, handle) == CUDA_SUCCESS) {
      static_assert(sizeof uuid.bytes == std::tuple_size_v<GpuId>);
      for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(uuid.bytes[i]);
    } else {
      id.fill(0xff);
      id[0] = static_cast<std::uint8_t>(ordinal);
    }
    visible.push_back(id);
  }
  return visible;
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

std::size_t policy_limit(CUdevice device, std::size_t total, std::size_t free, log::Pending& messages) noexcept {
  if (device < 0 || device >= kMaxDevices) return 0;
  const Policy& policy = *process_policy().policy;
  try {
    const std::vector<GpuId> visible = visible_gpus();
    const auto index = static_cast<std::size_t>(device);
    const DeviceView view{device, total, free, policy.ranks_sharing_gpu(visible, index)};
    const DeviceLimit limit = policy.device_limit(view);
    DeviceIdentity& identity = g_identities[index];
    identity.ranks_sharing.store(view.ranks_sharing, std::memory_order_relaxed);
    int unknown = kUuidUnknown;
    if (index < visible.size() &&
        identity.uuid_state.compare_exchange_strong(unknown, kUuidWriting, std::memory_order_acquire)) {
      const std::string uuid = format_uuid(visible[index]);
      uuid.copy(identity.uuid.data(), identity.uuid.size() - 1);
      identity.uuid_state.store(kUuidKnown, std::memory_order_release);
    }
    if (!identity.limit_reported.exchange(true, std::memory_order_relaxed)) {
      const std::string uuid = device_uuid(device);
      messages.add(LogLevel::info, "{}{}{}", limit.derivation, uuid.empty() ? uuid : " (" + uuid + ")",
                   policy.ranks.launcher == Launcher::none ? std::string()
                                                           : "; launcher " + policy.ranks.describe());
    }
    if (limit.bytes == 0 && !g_below_granule_reported[index].exchange(true, std::memory_order_relaxed)) {
      messages.add(LogLevel::error, "{}", policy.limit_below_granule_error(view));
    }
    return limit.bytes;
  } catch (...) {  // no host memory for the device list: the device is left unmanaged this time
    return 0;
  }
}

std::string device_uuid(CUdevice device) {
  if (device < 0 || device >= kMaxDevices) return {};
  const DeviceIdentity& identity = g_identities[static_cast<std::size_t>(device)];
  return identity.uuid_state.load(std::memory_order_acquire) == kUuidKnown ? std::string(identity.uuid.data())
                                                                           : std::string();
}

unsigned ranks_sharing(CUdevice device) noexcept {
  if (device < 0 || device >= kMaxDevices) return 1;
  return g_identities[static_cast<std::size_t>(device)].ranks_sharing.load(std::memory_order_relaxed);
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
