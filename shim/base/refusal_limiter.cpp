// The process's refusal reports: a RefusalLimiter per kind of report, on the monotonic clock.
#include "base/refusal_limiter.h"

#include <fmt/format.h>

#include <chrono>

#include "base/fork_safe_lock.h"

namespace gpumem::shim::observe {
namespace {

RefusalLimiter g_out_of_memory;  // under ProcessLock::oom_reports
RefusalLimiter g_over_budget;    // under ProcessLock::budget_refusals

std::uint64_t monotonic_ns() noexcept {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

RefusalLimiter::Verdict refuse(ProcessLock lock_of, RefusalLimiter& limiter, std::size_t bytes) {
  const auto lock = lock_fork_safely(lock_of);
  return limiter.refuse(bytes, monotonic_ns());
}

}  // namespace

bool report_refusal(RefusalKind kind, std::size_t bytes, std::string& note) noexcept {
  try {
    const RefusalLimiter::Verdict verdict = kind == RefusalKind::out_of_memory
                                                ? refuse(ProcessLock::oom_reports, g_out_of_memory, bytes)
                                                : refuse(ProcessLock::budget_refusals, g_over_budget, bytes);
    if (!verdict.report) return false;
    note = verdict.suppressed == 0
               ? std::string()
               : fmt::format(" ({} more refusals of this size since the last report)", verdict.suppressed);
    return true;
  } catch (...) {  // a mutex or the note's memory failing: report without the note
    note.clear();
    return true;
  }
}

}  // namespace gpumem::shim::observe
