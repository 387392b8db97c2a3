// The shim's process-wide locks, which fork() never leaves held in the child.
//
// Every lock the shim takes on process-wide state is one of ProcessLock, all kept in one table. One
// set of pthread_atfork handlers (registered at the first lock) takes every one of them before fork,
// in the order listed, and releases them in the parent and in the child: a child never finds one
// held by a thread it does not have, and the state each guards is never caught half-changed. Taking
// them all is deadlock-free because a thread holding several took them in that same order
// (outermost first); a build with assertions aborts, with one line, on a lock taken out of order.
// The state a lock guards that is the parent's alone (its contexts, its trace rows, its links) is
// reset in the child by a function its owner gives reset_in_forked_child(). No other fork handler is
// registered while the shim runs: pthread_atfork waits for a fork under way, whose handler may be
// waiting for a lock the registering thread holds.
//
// A context's own locks (its manager's, its regions', its fences') are not here: a forked child
// forgets its parent's contexts (managers/context_registry.cpp) and never reaches them. The only ones
// taken while such a lock is wanted are `registry`, the first, and `descriptor_service` (its thread
// exports a batch of pieces under a region source's piece lock), and a thread holding a piece lock
// takes only locks listed after `descriptor_service` (the log, a refund's budget and ledger): no
// thread waits for a context's lock while holding one that fork's handler could be waiting for.
#pragma once

#include <cstdint>
#include <mutex>

namespace gpumem::shim {

// Outermost first: a thread holding one of these takes only those listed after it.
enum class ProcessLock : std::uint8_t {
  registry,         // managers/context_registry: making and forgetting managers (may trim others)
  trace_start,      // base/trace_log: opening the trace (logs)
  peer_links,       // context/peer_access: the peer access the program enabled
  opened_blocks,    // services/ipc_service: blocks opened from other processes' handles
  imported_pools,   // ipc/pool_blocks: pools imported from other processes
  descriptor_service,  // exports/descriptor_service: its socket and connections, and descriptors being sent
  export_table,     // exports/export_table: this process's exported blocks
  vmm_ledger,       // services/other_paths: cuMemCreate handles and their mappings
  budget_ledger,    // budget/budgets: blocks charged by pointer (a refund reaches share_ledger)
  pool_reserve,     // budget/pool_reserve: what each stream-ordered pool holds (a refund reaches share_ledger)
  share_ledger,     // share/ledger: this process's side of the GPU ledgers, before their file locks
  budget_refusals,  // base/refusal_limiter: the budget's refusal lines
  oom_reports,      // base/refusal_limiter: the out-of-memory report's rate limit
  trace,            // base/trace_log: the trace's buffered rows and its file
  hook_table,       // hooks/hook_table: the driver's addresses of hooked names
  real_driver,      // driver/real_driver: resolving the driver's entry points
  log,              // base/log: the log's sink
  count
};

// The mutex behind `which`, for the rare caller that only tries it (a signal handler).
std::mutex& process_mutex(ProcessLock which) noexcept;

// Holds one ProcessLock; released when destroyed.
class ProcessLockGuard {
 public:
  explicit ProcessLockGuard(ProcessLock which);
  ~ProcessLockGuard();
  ProcessLockGuard(const ProcessLockGuard&) = delete;
  ProcessLockGuard& operator=(const ProcessLockGuard&) = delete;

 private:
  ProcessLock which_;
};

// Use: `const auto lock = lock_fork_safely(ProcessLock::budget_ledger);`.
[[nodiscard]] inline ProcessLockGuard lock_fork_safely(ProcessLock which) { return ProcessLockGuard(which); }

// Runs `reset` in every child forked from now on, after the locks are released there (the child's
// only thread). Lock-free, so callable with any lock held; a function given twice runs once. Room for
// a handful: false when full (the caller then says so).
bool reset_in_forked_child(void (*reset)() noexcept) noexcept;

}  // namespace gpumem::shim
