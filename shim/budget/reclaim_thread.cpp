// The reclaim thread of a shared device: asked through the ledger, it gives back idle memory.
#include "budget/reclaim_thread.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "base/background_threads.h"
#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "budget/budgets.h"
#include "budget/pool_reserve.h"
#include "context/capture_state.h"

namespace gpumem::shim::budget {
namespace {

std::atomic<IdleReclaimer> g_idle_reclaimer{nullptr};
// One thread per device; true once started (or tried) in this process.
std::array<std::atomic<bool>, kMaxDevices> g_started{};
std::atomic<bool> g_start_failure_said{false};
std::atomic<bool> g_handlers_registered{false};

// The hold-off: a step counts itself in g_steps, then looks at g_holds; a hold counts itself in
// g_holds, then waits for g_steps. Both sequentially consistent, so that at least one of the two sees
// the other: no step runs while a hold is in force.
std::atomic<int> g_steps{0};
std::atomic<int> g_holds{0};
std::atomic<bool> g_exiting{false};

// While a request stands, a step that found the arena busy or memory fenced looks again after
// this, doubling up to the most.
constexpr std::uint64_t kRetryFirstNs = 1'000'000;
constexpr std::uint64_t kRetryMostNs = 16'000'000;

bool enter_step() noexcept {
  g_steps.fetch_add(1, std::memory_order_seq_cst);
  if (g_holds.load(std::memory_order_seq_cst) == 0 && !capture_state::active()) return true;
  g_steps.fetch_sub(1, std::memory_order_seq_cst);
  return false;
}

void leave_step() noexcept { g_steps.fetch_sub(1, std::memory_order_seq_cst); }

// Waits for the steps under way to end, at most kExitPatienceNs.
void wait_for_steps() noexcept {
  const std::uint64_t deadline = share::monotonic_ns() + kExitPatienceNs;
  for (unsigned spins = 0; g_steps.load(std::memory_order_seq_cst) > 0; ++spins) {
    if (share::monotonic_ns() >= deadline) return;
    if (spins < 64) {
      sched_yield();
    } else {
      share::sleep_for_ns(50'000);
    }
  }
}

// At exit, before the libraries' destructors: no step starts any more, and the one under way ends first.
void stop_at_exit() noexcept {
  g_exiting.store(true, std::memory_order_seq_cst);
  g_holds.fetch_add(1, std::memory_order_seq_cst);
  wait_for_steps();
}

// A forked child has no reclaim thread, and none of its parent's steps or holds.
void reset_in_child() noexcept {
  for (std::atomic<bool>& started : g_started) started.store(false, std::memory_order_relaxed);
  g_steps.store(0, std::memory_order_relaxed);
  g_holds.store(0, std::memory_order_relaxed);
}

struct Answer {
  bool retry = false;  // busy or fenced: look again shortly
};

// One answer to the request found at futex word `wake`: the pools' and the managers' idle memory, up
// to what was asked. Outside a step only the figures are read.
Answer answer_request(CUdevice device, share::Member& member, std::uint64_t asked, std::uint32_t wake) noexcept {
  if (!enter_step()) return Answer{true};  // a capture or a context's destruction: shortly
  const IdleReclaimer reclaim = g_idle_reclaimer.load(std::memory_order_acquire);
  const std::size_t from_pools = trim_pools(device);
  const std::size_t want = asked > from_pools ? static_cast<std::size_t>(asked - from_pools) : 0;
  IdleReclaimed reclaimed;
  if (reclaim != nullptr) reclaimed = reclaim(device, want);
  settle_pools(device);
  leave_step();
  const std::size_t given = reclaimed.bytes + from_pools;
  const std::optional<std::uint64_t> idle =
      reclaimed.busy ? std::nullopt : std::optional<std::uint64_t>(reclaimed.idle + pools_idle(device));
  member.reclaim_answered(given, idle, wake);
  if (!reclaimed.busy) member.note_in_use(reclaimed.in_use);
  if (DeviceBudget* budget = existing(device)) budget->update_limit(member.terms().allowance);
  log::at(LogLevel::debug, "device {}: asked to give back {} bytes for another process, the reclaim thread gave "
          "back {}{}{}", device, asked, given, reclaimed.busy ? " (an arena was busy)" : "",
          reclaimed.fences_pending ? " (memory waits for the device)" : "");
  return Answer{given < asked && (reclaimed.busy || reclaimed.fences_pending)};
}

[[noreturn]] void park() noexcept {
  while (true) pause();  // every signal is blocked here: sleeps until the process ends
}

void* run(void* argument) {
  const auto device = static_cast<CUdevice>(reinterpret_cast<std::intptr_t>(argument));
  share::Member* member = share::member(device);
  if (member == nullptr) return nullptr;
  std::uint64_t figures_at_calls = ~std::uint64_t{0};
  std::uint64_t retry_ns = 0;
  while (true) {
    if (g_exiting.load(std::memory_order_acquire)) park();
    const std::uint32_t wake = member->reclaim_wake();
    std::uint64_t timeout_ns = kIdleFigureEveryNs;
    const std::uint64_t asked = member->reclaim_requested();
    if (asked != 0 && !member->reclaim_current()) {
      member->reclaim_served(0);  // no one waits for it any more
      retry_ns = 0;
    } else if (asked != 0) {
      if (answer_request(device, *member, asked, wake).retry) {
        retry_ns = std::clamp(retry_ns * 2, kRetryFirstNs, kRetryMostNs);
        timeout_ns = retry_ns;
      } else {
        // What could go back went: the next look when the request is raised (a wake), or while its
        // waiter still renews it, before it lapses.
        retry_ns = 0;
        timeout_ns = share::kReclaimRequestNs;
      }
      figures_at_calls = ~std::uint64_t{0};
    } else if (const IdleReclaimer reclaim = g_idle_reclaimer.load(std::memory_order_acquire)) {
      // No request: what is idle, for the others' lending, once the program has moved since the last look.
      const IdleReclaimed figures = reclaim(device, 0);
      if (!figures.busy && figures.calls != figures_at_calls) {
        figures_at_calls = figures.calls;
        member->note_idle(figures.idle + pools_idle(device));
        member->note_in_use(figures.in_use);
      }
    }
    member->wait_for_reclaim_wake(wake, timeout_ns);
    // Every thread of the program ended (its main thread called pthread_exit): so does this one, so
    // that the process ends as it would have without it.
    if (only_background_threads_left()) return nullptr;
  }
}

}  // namespace

void set_idle_reclaimer(IdleReclaimer reclaimer) noexcept {
  g_idle_reclaimer.store(reclaimer, std::memory_order_release);
}

bool start_reclaim_thread(CUdevice device, share::Member& member) noexcept {
  if (device < 0 || device >= kMaxDevices) return false;
  bool expected = false;
  if (!g_started[static_cast<std::size_t>(device)].compare_exchange_strong(expected, true)) return true;
  if (!g_handlers_registered.exchange(true)) {
    reset_in_forked_child(&reset_in_child);
    std::atexit([] { stop_at_exit(); });
  }
  pthread_attr_t attributes;
  if (pthread_attr_init(&attributes) != 0) return false;
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 256 * 1024);
  // Every signal blocked in the new thread (it inherits this thread's mask): the program's handlers
  // run on its own threads only.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  pthread_t thread{};
  const int error = pthread_create(&thread, &attributes, &run,
                                   reinterpret_cast<void*>(static_cast<std::intptr_t>(device)));
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  pthread_attr_destroy(&attributes);
  if (error != 0) {
    if (!g_start_failure_said.exchange(true)) {
      log::at(LogLevel::warn, "device {}: no reclaim thread could be started ({}); memory other processes ask "
              "back goes back at this program's own allocations and frees", device, error);
    }
    return false;
  }
  pthread_setname_np(thread, "gpumem-reclaim");  // kBackgroundThreadPrefix
  member.enable_reclaim_thread();
  return true;
}

ReclaimHold::ReclaimHold() noexcept {
  g_holds.fetch_add(1, std::memory_order_seq_cst);
  wait_for_steps();
}

ReclaimHold::~ReclaimHold() { g_holds.fetch_sub(1, std::memory_order_seq_cst); }

bool reclaim_should_yield() noexcept { return g_holds.load(std::memory_order_relaxed) > 0; }

}  // namespace gpumem::shim::budget
