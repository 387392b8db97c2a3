// The process's device budgets, their limits from the policy, and the ledger of blocks freed by pointer.
#include "budget/budgets.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/fork_safe_lock.h"
#include "base/refusal_limiter.h"
#include "base/log.h"
#include "budget/pool_reserve.h"
#include "budget/reclaim_thread.h"
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
  CUmemoryPool pool;  // the stream-ordered pool it came from (pool_reserve.h), or null
};
std::unordered_map<std::uintptr_t, LedgerEntry>* g_ledger = nullptr;  // leaked; under ProcessLock::budget_ledger

std::array<std::atomic<bool>, kMaxDevices> g_below_granule_reported{};

std::atomic<Reclaimer> g_reclaimer{nullptr};


// What the driver says is free on `device` now; nullopt without a context there to ask.
std::optional<std::size_t> device_free(CUdevice device) noexcept {
  if (current_device() != device) return std::nullopt;
  std::size_t free = 0;
  std::size_t total = 0;
  if (real_driver().cuMemGetInfo_v2(&free, &total) != CUDA_SUCCESS) return std::nullopt;
  return free;
}

// The limit the policy gives `device`, as ContextRegistry computes it for a manager; 0: unmanaged.
std::size_t limit_of_device(CUdevice device) noexcept {
  const RealDriver& driver = real_driver();
  std::size_t total = 0;
  if (!driver.available || driver.cuDeviceTotalMem_v2 == nullptr ||
      driver.cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS) {
    return 0;
  }
  // Without a context on the device, "free" reads as the whole device.
  const std::size_t free = device_free(device).value_or(total);
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

// The most this process may hold of `device` (of `total` bytes) whatever its share gives it:
// GPUMEM_LIMIT or a cluster's bound (DeviceLimit::cap); the device's total when none applies.
std::size_t share_cap(CUdevice device, std::size_t total) noexcept {
  try {
    const Policy& policy = *process_policy().policy;
    const DeviceView view{device, total, total,
                          policy.ranks_sharing_gpu(visible_gpus(), static_cast<std::size_t>(device))};
    const std::size_t cap = policy.device_limit(view).cap;
    return cap == 0 ? total : cap;
  } catch (...) {  // no host memory for the device list: the device's total
    return total;
  }
}

// Joining a device's ledger: once, or until a process stopped inside an update lets it in.
enum JoinState : int {
  kJoinNotTried,
  kJoining,     // others wait (the first attempt), or go on unshared this once (a retry)
  kJoinDone,    // joined, or not to be joined
  kLockedOut,   // the ledger stayed locked: retried every kJoinRetryEveryNs
};
std::array<std::atomic<int>, kMaxDevices> g_join_state{};
std::array<std::atomic<std::uint64_t>, kMaxDevices> g_join_retry_at{};
// A process locked out of the ledger looks again this often, at its next charge, waiting this long.
constexpr std::uint64_t kJoinRetryEveryNs = 100'000'000;
constexpr std::uint64_t kJoinRetryPatienceNs = 10'000'000;
// Until when (CLOCK_MONOTONIC) a refused charge does not wait again: a wait that ran out is not
// repeated for every smaller size a caller then tries (the arena's back-off), only after as long again.
std::array<std::atomic<std::uint64_t>, kMaxDevices> g_no_wait_until{};
std::array<std::atomic<bool>, kMaxDevices> g_serving_reclaim{};
thread_local std::uint64_t t_last_share_wait_ms = 0;
// ExpectedNeed: what this thread's charges of the device are expected to take in all, less what they took.
thread_local CUdevice t_need_device = -1;
thread_local std::size_t t_need_bytes = 0;

// One attempt to join `device`'s ledger, waiting `patience_ns` at most for another process's update.
share::Member* attempt_join(CUdevice device, std::uint64_t patience_ns, bool& locked_out, std::string& error) noexcept {
  const RealDriver& driver = real_driver();
  const Policy& policy = *process_policy().policy;
  share::JoinRequest request;
  request.device = device;
  request.lock_patience_ns = patience_ns;
  CUuuid uuid{};
  std::size_t total = 0;
  locked_out = false;
  if (driver.cuDeviceGetUuid_v2 == nullptr || driver.cuDeviceGetUuid_v2(&uuid, device) != CUDA_SUCCESS ||
      driver.cuDeviceTotalMem_v2 == nullptr || driver.cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS) {
    error = "the driver does not say the device's UUID and size";
    return nullptr;
  }
  std::memcpy(request.uuid, uuid.bytes, sizeof request.uuid);
  request.device_total = total;
  request.read_device_free = [](int reading_device) { return device_free(reading_device); };
  request.dir = policy.share_dir;
  request.weight_milli = policy.share_weight_milli;
  request.min_bytes = policy.share_min_bytes;
  request.cap_bytes = share_cap(device, total);
  share::Member* joined = share::Member::join(request, error, &locked_out);
  if (joined == nullptr) return nullptr;
  share::adopt(device, joined);
  start_reclaim_thread(device, *joined);
  const share::Terms terms = joined->terms();
  log::at(LogLevel::info, "device {}: sharing the GPU through \"{}\" with {} other process(es): guarantee {} "
          "bytes, allowance {} bytes (joined in {} us)", device, joined->path(), joined->figures().members_at_join - 1,
          terms.guarantee, terms.allowance, joined->figures().join_ns / 1000);
  return joined;
}

// Joins the ledger of `device`'s GPU when the policy shares it. Never called with a lock held: the
// ledger takes a fork-safe one. Says once, at warn, why a device is not shared after all, or not yet.
share::Member* join_ledger(CUdevice device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  const Policy& policy = *process_policy().policy;
  if (!policy.share) return nullptr;
  std::atomic<int>& state = g_join_state[static_cast<std::size_t>(device)];
  int expected = kJoinNotTried;
  if (!state.compare_exchange_strong(expected, kJoining, std::memory_order_acq_rel)) {
    while (state.load(std::memory_order_acquire) == kJoining) share::sleep_for_ns(100'000);
    return share::member(device);
  }
  std::string error;
  bool locked_out = false;
  attempt_join(device, share::kLockPatienceNs, locked_out, error);
  if (locked_out) {
    log::at(LogLevel::warn, "device {}: GPUMEM_SHARE=auto, but {}; this process uses the device on a provisional "
            "limit (what the device has free, at most its own limit) and joins as soon as the ledger is free", device,
            error);
    g_join_retry_at[static_cast<std::size_t>(device)].store(share::monotonic_ns() + kJoinRetryEveryNs,
                                                            std::memory_order_relaxed);
    state.store(kLockedOut, std::memory_order_release);
    return nullptr;
  }
  if (!error.empty()) {
    log::at(LogLevel::warn, "device {}: GPUMEM_SHARE=auto, but {}; this process uses the device as if "
            "GPUMEM_SHARE were unset", device, error);
  }
  state.store(kJoinDone, std::memory_order_release);
  return share::member(device);
}

}  // namespace

// A process locked out of the ledger at its first try joins at a later call (one load when not).
// What it holds by then is entered in the ledger, and its budget becomes its allowance.
void retry_join(CUdevice device) noexcept {
  if (device < 0 || device >= kMaxDevices) return;
  DeviceBudget& budget = g_budgets[static_cast<std::size_t>(device)];
  const auto index = static_cast<std::size_t>(device);
  std::atomic<int>& state = g_join_state[index];
  if (state.load(std::memory_order_relaxed) != kLockedOut) return;
  const std::uint64_t now = share::monotonic_ns();
  if (now < g_join_retry_at[index].load(std::memory_order_relaxed)) return;
  int expected = kLockedOut;
  if (!state.compare_exchange_strong(expected, kJoining, std::memory_order_acq_rel)) return;
  std::string error;
  bool locked_out = false;
  if (share::Member* joined = attempt_join(device, kJoinRetryPatienceNs, locked_out, error)) {
    joined->force_reserve(budget.charged());
    budget.update_limit(joined->terms().allowance);
    log::at(LogLevel::info, "device {}: joined the GPU's ledger once it was free; {} bytes held so far entered",
            device, budget.charged());
    state.store(kJoinDone, std::memory_order_release);
    return;
  }
  if (locked_out) {
    g_join_retry_at[index].store(share::monotonic_ns() + kJoinRetryEveryNs, std::memory_order_relaxed);
    state.store(kLockedOut, std::memory_order_release);
    return;
  }
  log::at(LogLevel::warn, "device {}: GPUMEM_SHARE=auto, but {}; this process uses the device as if GPUMEM_SHARE "
          "were unset", device, error);
  state.store(kJoinDone, std::memory_order_release);
}

namespace {

void reset_in_child() noexcept {
  for (DeviceBudget& budget : g_budgets) budget.reset();
  // The ledger's own fork handler dropped the parent's memberships: the child joins afresh.
  for (std::atomic<int>& state : g_join_state) state.store(kJoinNotTried, std::memory_order_relaxed);
  for (std::atomic<std::uint64_t>& until : g_no_wait_until) until.store(0, std::memory_order_relaxed);
  for (std::atomic<bool>& serving : g_serving_reclaim) serving.store(false, std::memory_order_relaxed);
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
    static std::atomic<bool> missing_devices_said{false};  // a limit for a device not there: said once
    if (!visible.empty() && !missing_devices_said.exchange(true, std::memory_order_relaxed)) {
      for (const std::string& line : policy.limits_for_missing_devices(static_cast<int>(visible.size()))) {
        messages.add(LogLevel::warn, "{}", line);
      }
    }
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
    if (share::Member* member = join_ledger(device)) {
      budget->update_limit(member->terms().allowance);  // the budget is the allowance from now on
    } else if (g_join_state[static_cast<std::size_t>(device)].load(std::memory_order_acquire) == kLockedOut) {
      // Not a member yet: what is free, so that nothing the members hold is taken meanwhile.
      budget->set_limit(std::max<std::size_t>(std::min(limit, device_free(device).value_or(limit)), 1));
    } else {
      budget->set_limit(limit);
    }
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

// What a program refused by the budget can change: the knob of the device's limit (`limit`, as
// limit_advice says it). Growing on demand helps only an arena that preallocated a region it cannot
// give back in part (classic regions); one that grows already (or maps virtual memory, whose idle
// granules go back) has given back what it could.
std::string refusal_advice(bool arena_holds_memory, bool arena_preallocated, const std::string& limit) {
  if (!arena_holds_memory) return "the limit was " + limit;
  if (arena_preallocated) {
    return "the arena's preallocated region holds memory it cannot give back while blocks live in it: set "
           "GPUMEM_PREALLOCATE=false (XLA_PYTHON_CLIENT_PREALLOCATE=false) so that it grows only as needed; "
           "the limit was " + limit;
  }
  return "the arena already grows only as needed and has given back the memory it could (the rest holds live "
         "blocks): free blocks; the limit was " + limit;
}

// The device's limit as the policy gives it now (for a refusal's advice); nullopt when the driver
// does not say the device's size.
std::optional<DeviceLimit> device_limit_now(CUdevice device) {
  std::size_t total = 0;
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuDeviceTotalMem_v2 == nullptr ||
      driver.cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS) {
    return std::nullopt;
  }
  const Policy& policy = *process_policy().policy;
  const DeviceView view{device, total, device_free(device).value_or(total), ranks_sharing(device)};
  return policy.device_limit(view);
}

}  // namespace

void set_reclaimer(Reclaimer reclaimer) noexcept { g_reclaimer.store(reclaimer, std::memory_order_release); }

namespace {
thread_local RefusalCause t_refusal_cause = RefusalCause::none;
}  // namespace

RefusalCause last_refusal_cause() noexcept { return t_refusal_cause; }
void clear_refusal_cause() noexcept { t_refusal_cause = RefusalCause::none; }
void note_driver_refusal(CUresult result) noexcept {
  if (result == CUDA_ERROR_OUT_OF_MEMORY) t_refusal_cause = RefusalCause::driver;
}

std::string limit_advice(CUdevice device) {
  const std::optional<DeviceLimit> limit = device_limit_now(device);
  return limit ? limit->advice : std::string("raise GPUMEM_LIMIT or the memory fraction");
}

std::string cap_advice(CUdevice device) {
  const std::optional<DeviceLimit> limit = device_limit_now(device);
  return limit ? limit->cap_advice : std::string();
}

namespace {

// charge() on a shared device: the ledger decides (docs/sharing.md). First as it stands; then, for a
// path other than the arena, after this process's own managers gave back what they hold unused;
// then, inside the guarantee, waiting at most GPUMEM_SHARE_WAIT for borrowers to give back.
bool charge_shared(share::Member& member, DeviceBudget& budget, CUdevice device, BudgetPath path, std::size_t bytes,
                   std::string_view call) noexcept {
  const auto granted = [&](const share::Reservation& reservation) {
    budget.update_limit(reservation.terms.allowance);
    if (reservation.outcome != share::Outcome::reserved) return false;
    budget.force_charge(path, bytes);
    g_no_wait_until[static_cast<std::size_t>(device)].store(0, std::memory_order_relaxed);
    if (t_need_device == device) t_need_bytes -= std::min(t_need_bytes, bytes);
    return true;
  };
  // What the driver says is free, at every reservation: a process starting beside the members needs
  // the room kept for its context to be known at once.
  const std::uint64_t generation = member.generation();  // before the reading: tells a quiet one
  std::optional<share::FreeReading> reading;
  if (const std::optional<std::size_t> free = device_free(device)) reading = share::FreeReading(*free, generation);
  share::Reservation reservation = member.reserve(bytes, reading);
  if (granted(reservation)) return true;
  // Asked again once this process holds less than when it was refused, whoever gave back meanwhile:
  // this thread, or the reclaim thread answering another process (then this thread's own trim finds
  // nothing left to give, yet the holding that was refused is gone).
  const auto holds_less_now = [&] { return member.terms().held < reservation.terms.held; };
  if (reservation.outcome != share::Outcome::unavailable) {
    trim_pools(device);  // pools' unused memory
    if (holds_less_now()) {
      reservation = member.reserve(bytes, std::nullopt);
      if (granted(reservation)) return true;
    }
  }
  if (path != BudgetPath::arena && reservation.outcome != share::Outcome::unavailable) {
    if (const Reclaimer reclaim = g_reclaimer.load(std::memory_order_acquire); reclaim != nullptr) {
      reclaim(device);
      settle_pools(device);  // a manager's trim may have emptied its pool (frees it kept back included)
      if (holds_less_now()) {
        reservation = member.reserve(bytes, std::nullopt);
        if (granted(reservation)) return true;
      }
    }
  }
  const Policy& policy = *process_policy().policy;
  std::atomic<std::uint64_t>& no_wait_until = g_no_wait_until[static_cast<std::size_t>(device)];
  const std::uint64_t now = share::monotonic_ns();
  const std::uint64_t wait_ns = policy.share_wait_ms * 1'000'000;
  t_last_share_wait_ms = 0;
  const bool may_wait = reservation.outcome == share::Outcome::within_guarantee ||
                        reservation.outcome == share::Outcome::lendable;
  if (may_wait && wait_ns > 0 && now >= no_wait_until.load(std::memory_order_relaxed)) {
    // The others are asked once for all that this thread's allocation needs (ExpectedNeed).
    const std::size_t need = t_need_device == device ? std::max(bytes, t_need_bytes) : bytes;
    const std::uint64_t began = share::monotonic_ns();
    reservation = member.wait_and_reserve(bytes, wait_ns, need);
    if (granted(reservation)) return true;
    // Only a wait that ran out keeps the device's next charges from waiting (the arena's smaller sizes):
    // one that ended early (idle memory no longer lendable, another member now waiting) says nothing of
    // the next request, which may lie inside the guarantee.
    if (share::monotonic_ns() - began >= wait_ns) {
      t_last_share_wait_ms = policy.share_wait_ms;
      no_wait_until.store(share::monotonic_ns() + wait_ns, std::memory_order_relaxed);
    }
  }
  // The reclaim thread may have given back this process's own idle memory since the last look.
  if (reservation.outcome == share::Outcome::refused && holds_less_now()) {
    reservation = member.reserve(bytes, std::nullopt);
    if (granted(reservation)) return true;
  }
  // The cause: the most this process may hold (GPUMEM_LIMIT, a cluster's bound), or the share.
  const share::Terms terms = reservation.terms;
  std::size_t total = 0;
  const bool at_cap = real_driver().cuDeviceTotalMem_v2(&total, device) == CUDA_SUCCESS &&
                      !fits_under(terms.held, bytes, share_cap(device, total));
  t_refusal_cause = at_cap ? RefusalCause::share_cap : RefusalCause::share;
  if (path == BudgetPath::arena) return false;  // the arena backs off and reports its own refusal
  if (!log::enabled(LogLevel::warn)) return false;
  std::string repeated;
  if (!observe::report_refusal(observe::RefusalKind::over_budget, bytes, repeated)) return false;
  if (at_cap) {
    log::at(LogLevel::warn, "device {}: {} of {} bytes refused{}: the GPU is shared, and this process holds {} bytes "
            "of the {} it may hold at most: that bound is {}", device, call, bytes, repeated, terms.held,
            share_cap(device, total), cap_advice(device));
    return false;
  }
  log::at(LogLevel::warn, "device {}: {} of {} bytes refused{}: the GPU is shared{}: this process holds {} bytes of "
          "its {}-byte guarantee (allowance {}); {}; free memory in the others, or raise GPUMEM_SHARE_WEIGHT or "
          "GPUMEM_SHARE_MIN", device, call, bytes, repeated,
          t_last_share_wait_ms > 0 ? fmt::format(" (this request waited {} ms for borrowed memory)", t_last_share_wait_ms)
                                   : std::string(),
          terms.held, terms.guarantee, terms.allowance, member.holders());
  return false;
}

}  // namespace

namespace {
thread_local bool t_last_charge_refused = false;

bool charge_device(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call) noexcept;
}  // namespace

bool charge(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call) noexcept {
  const bool charged = charge_device(device, path, bytes, call);
  t_last_charge_refused = !charged;
  return charged;
}

bool last_charge_refused() noexcept { return t_last_charge_refused; }

namespace {

bool charge_device(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call) noexcept {
  DeviceBudget* budget = of_device(device);
  if (budget == nullptr) return true;
  retry_join(device);
  if (share::Member* member = shared(device)) return charge_shared(*member, *budget, device, path, bytes, call);
  if (budget->try_charge(path, bytes)) return true;
  // What stream-ordered pools hold unused goes back first (pool_reserve.h).
  if (trim_pools(device) > 0 && budget->try_charge(path, bytes)) return true;
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
    settle_pools(device);  // a manager's trim may have emptied its pool
    if (budget->try_charge(path, bytes)) return true;
  }
  t_refusal_cause = RefusalCause::limit;
  if (path == BudgetPath::arena) return false;  // the arena backs off and reports its own refusal
  if (!log::enabled(LogLevel::warn)) return false;
  // Limited as the out-of-memory report is (once per size per second).
  std::string repeated;
  if (!observe::report_refusal(observe::RefusalKind::over_budget, bytes, repeated)) return false;
  log::at(LogLevel::warn, "device {}: {} of {} bytes refused{}: over this process's budget ({} of {} bytes charged: arena {}, "
            "driver {}, async_pool {}, program_pool {}, vmm {}, managed {}, arrays {}, pool_reserve {}); {}",
            device, call, bytes,
            repeated,
            budget->charged(), budget->limit(), budget->charged(BudgetPath::arena),
            budget->charged(BudgetPath::driver), budget->charged(BudgetPath::async_pool),
            budget->charged(BudgetPath::program_pool), budget->charged(BudgetPath::vmm),
            budget->charged(BudgetPath::managed), budget->charged(BudgetPath::arrays),
            budget->charged(BudgetPath::pool_reserve),
            refusal_advice(budget->charged(BudgetPath::arena) > 0, arena_preallocated, limit_advice(device)));
  return false;
}

}  // namespace

bool beyond_device(CUdevice device, std::size_t bytes) noexcept {
  const DeviceBudget* budget = existing(device);
  if (budget == nullptr || bytes <= budget->limit()) return false;
  const RealDriver& driver = real_driver();
  std::size_t total = 0;
  const bool beyond = driver.cuDeviceTotalMem_v2 != nullptr &&
                      driver.cuDeviceTotalMem_v2(&total, device) == CUDA_SUCCESS && bytes > total;
  if (beyond) t_last_charge_refused = false;  // nothing is charged: a refusal is the driver's
  return beyond;
}

void refund(CUdevice device, BudgetPath path, std::size_t bytes) noexcept {
  DeviceBudget* budget = existing(device);
  if (budget == nullptr) return;
  budget->refund(path, bytes);
  if (share::Member* member = shared(device)) {
    member->give_back(bytes);
    budget->update_limit(member->terms().allowance);
  }
}

void answered(CUdevice device, std::size_t bytes) noexcept {
  if (share::Member* member = shared(device)) member->answered(bytes);
}

std::uint64_t last_share_wait_ms() noexcept { return t_last_share_wait_ms; }

ExpectedNeed::ExpectedNeed(CUdevice device, std::size_t bytes) noexcept
    : saved_device_(t_need_device), saved_bytes_(t_need_bytes) {
  t_need_device = device;
  t_need_bytes = bytes;
}

ExpectedNeed::~ExpectedNeed() {
  t_need_device = saved_device_;
  t_need_bytes = saved_bytes_;
}

void serve_reclaim_request(CUdevice device) noexcept {
  share::Member* member = shared(device);
  DeviceBudget* budget = existing(device);
  const Reclaimer reclaim = g_reclaimer.load(std::memory_order_acquire);
  if (member == nullptr || budget == nullptr || reclaim == nullptr || member->reclaim_requested() == 0) return;
  if (!member->reclaim_current()) {  // no one waits for it any more
    member->reclaim_served(0);
    return;
  }
  std::atomic<bool>& serving = g_serving_reclaim[static_cast<std::size_t>(device)];
  if (serving.exchange(true, std::memory_order_acquire)) return;  // another thread is at it
  const std::uint64_t asked = member->reclaim_requested();
  const std::size_t before = budget->charged();
  trim_pools(device);
  reclaim(device);
  settle_pools(device);
  const std::size_t after = budget->charged();
  const std::size_t given = before > after ? before - after : 0;
  member->reclaim_served(given);
  budget->update_limit(member->terms().allowance);
  serving.store(false, std::memory_order_release);
  log::at(LogLevel::debug, "device {}: asked to give back {} bytes for another process, gave back {}", device,
          asked, given);
}

std::optional<ShareTerms> share_terms(CUdevice device) noexcept {
  if (!policy_is_active() || of_device(device) == nullptr) return std::nullopt;
  share::Member* member = shared(device);
  if (member == nullptr) return std::nullopt;
  std::size_t total = 0;
  if (real_driver().cuDeviceTotalMem_v2(&total, device) != CUDA_SUCCESS) return std::nullopt;
  const share::Terms terms = member->terms();
  return ShareTerms{terms.guarantee, terms.allowance, share_cap(device, total)};
}

void refresh_share(CUdevice device) noexcept {
  retry_join(device);
  DeviceBudget* budget = existing(device);
  share::Member* member = shared(device);
  if (member == nullptr || budget == nullptr) return;
  member->refresh();
  budget->update_limit(member->terms().allowance);
}

void remember_block(std::uintptr_t key, CUdevice device, BudgetPath path, std::size_t bytes,
                    CUmemoryPool pool) noexcept {
  if (existing(device) == nullptr) return;  // nothing was charged
  try {
    const auto lock = lock_fork_safely(ProcessLock::budget_ledger);
    if (g_ledger == nullptr) g_ledger = new std::unordered_map<std::uintptr_t, LedgerEntry>();
    CUcontext context = nullptr;
    if (real_driver().cuCtxGetCurrent(&context) != CUDA_SUCCESS) context = nullptr;
    (*g_ledger)[key] = LedgerEntry{context, device, path, bytes, pool};
  } catch (...) {  // no host memory: the block stays charged until the process ends
  }
}

Forgotten unlink_block(std::uintptr_t key) noexcept {
  Forgotten block;
  const auto lock = lock_fork_safely(ProcessLock::budget_ledger);
  if (g_ledger == nullptr) return block;
  const auto found = g_ledger->find(key);
  if (found == g_ledger->end()) return block;
  block = Forgotten{true, key, found->second.device, found->second.path, found->second.bytes, found->second.pool};
  g_ledger->erase(found);
  return block;
}

void release_block(const Forgotten& block) noexcept {
  if (block.found) pool_block_freed(block.device, block.pool, block.path, block.bytes);  // or kept by its pool
}

Forgotten take_block(std::uintptr_t key) noexcept {
  const Forgotten block = unlink_block(key);
  release_block(block);
  return block;
}

bool forget_block(std::uintptr_t key) noexcept { return take_block(key).found; }

void forget_context(CUcontext context) noexcept {
  const auto lock = lock_fork_safely(ProcessLock::budget_ledger);
  if (g_ledger == nullptr) return;
  for (auto entry = g_ledger->begin(); entry != g_ledger->end();) {
    if (entry->second.context == context) {
      pool_block_gone(entry->second.device, entry->second.pool, entry->second.path, entry->second.bytes);
      entry = g_ledger->erase(entry);
    } else {
      ++entry;
    }
  }
}

void restore_block(const Forgotten& block) noexcept {
  if (!block.found) return;
  if (block.pool != nullptr) {
    pool_block_freed(block.device, block.pool, block.path, block.bytes, /*undo=*/true);
  } else if (DeviceBudget* budget = existing(block.device)) {
    budget->force_charge(block.path, block.bytes);
    if (share::Member* member = shared(block.device)) member->force_reserve(block.bytes);
  }
  remember_block(block.key, block.device, block.path, block.bytes, block.pool);
}

}  // namespace gpumem::shim::budget
