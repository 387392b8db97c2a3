// The table of process-wide locks and the fork handlers that take them all (fork_safe_lock.h).
#include "base/fork_safe_lock.h"

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>

namespace gpumem::shim {
namespace {

constexpr std::size_t kLocks = static_cast<std::size_t>(ProcessLock::count);
static_assert(kLocks <= 32, "held_mask is 32 bits");

using ChildReset = void (*)() noexcept;
constexpr std::size_t kChildResets = 8;

std::array<std::mutex, kLocks> g_locks;  // constant-initialised: usable before any constructor runs
std::array<std::atomic<ChildReset>, kChildResets> g_child_resets{};
pthread_once_t g_handlers_once = PTHREAD_ONCE_INIT;

void lock_all_before_fork() noexcept {
  for (std::mutex& lock : g_locks) lock.lock();
}
void unlock_all_in_parent() noexcept {
  for (auto lock = g_locks.rbegin(); lock != g_locks.rend(); ++lock) lock->unlock();
}
void unlock_all_in_child() noexcept {
  unlock_all_in_parent();
  for (const auto& reset : g_child_resets) {
    if (const ChildReset function = reset.load(std::memory_order_acquire)) function();
  }
}
// Each thread registers (or waits for the registration) before its first lock, so every lock held
// when a fork begins was taken after the handlers existed; no lock is held while they are registered.
void register_handlers() noexcept { pthread_atfork(lock_all_before_fork, unlock_all_in_parent, unlock_all_in_child); }

#ifndef NDEBUG
// Which locks this thread holds, one bit per ProcessLock (initial-exec: no allocation in any hook).
thread_local std::uint32_t t_held __attribute__((tls_model("initial-exec"))) = 0;

void check_order(ProcessLock which) noexcept {
  const auto rank = static_cast<unsigned>(which);
  if ((t_held >> rank) == 0) return;
  // A lock listed before one this thread holds: fork's handler could deadlock against this thread.
  char line[] = "gpumem: [error] ProcessLock ?? taken while one listed after it is held\n";
  line[28] = static_cast<char>('0' + rank / 10);
  line[29] = static_cast<char>('0' + rank % 10);
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, sizeof line - 1);
  std::abort();
}
#endif

}  // namespace

bool reset_in_forked_child(void (*reset)() noexcept) noexcept {
  pthread_once(&g_handlers_once, register_handlers);  // before any lock is taken, or done already
  for (auto& slot : g_child_resets) {
    ChildReset expected = nullptr;
    if (slot.compare_exchange_strong(expected, reset, std::memory_order_acq_rel) || expected == reset) return true;
  }
  return false;
}

std::mutex& process_mutex(ProcessLock which) noexcept { return g_locks[static_cast<std::size_t>(which)]; }

ProcessLockGuard::ProcessLockGuard(ProcessLock which) : which_(which) {
  pthread_once(&g_handlers_once, register_handlers);
#ifndef NDEBUG
  check_order(which);
#endif
  process_mutex(which).lock();
#ifndef NDEBUG
  t_held |= 1u << static_cast<unsigned>(which);
#endif
}

ProcessLockGuard::~ProcessLockGuard() {
#ifndef NDEBUG
  t_held &= ~(1u << static_cast<unsigned>(which_));
#endif
  process_mutex(which_).unlock();
}

}  // namespace gpumem::shim
