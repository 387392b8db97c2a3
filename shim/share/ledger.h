// Membership of a GPU's ledger (docs/sharing.md): one Member per device this process shares. The
// ledger is a file every process using that GPU with GPUMEM_SHARE=auto maps shared; a member
// reserves there before its budget takes memory from the driver, and gives back when the memory
// goes. Shares are recomputed from the slots at every visit (fair_share.h).
//
// Locking: ProcessLock::share_ledger (the threads of one process; base/fork_safe_lock.h), then an OFD write lock on the
// file's first byte (the processes), held only while the slots are read and written: never across a
// driver call, a log line or a sleep. Each member holds an OFD lock on its own slot's byte for its
// whole life; the kernel drops it however the process ends, which is how the dead are told from the
// living (at every join and every refusal) without polling pids.
//
// Fork: a child is not its parent's member; its copy of the file and the mapping are dropped, and it
// joins afresh if it uses CUDA.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "share/fair_share.h"
#include "share/ledger_format.h"

namespace gpumem::shim::share {

inline constexpr int kMaxDevices = 64;
// A member that reserved or waited within this long is growing: its demand is unbounded.
inline constexpr std::uint64_t kGrowingWindowNs = 2'000'000'000;
// The room kept free for one more process's context is at most the device's total over this.
inline constexpr std::uint64_t kHeadroomDivisor = 32;
// How often a waiting member looks at the ledger again.
inline constexpr std::uint64_t kWaitPollNs = 1'000'000;
// How long a request to give back holds without the waiter renewing it (it renews at every look).
inline constexpr std::uint64_t kReclaimRequestNs = 50'000'000;
// How long every estimate of the memory outside the ledger must read lower before the ledger lowers
// it: one estimate can read low while a member's driver call is under way (docs/sharing.md).
inline constexpr std::uint64_t kOutsideSettleNs = 500'000'000;
// How long a visit waits for another process to finish its update (microseconds, normally) before
// it gives up: a member stopped under the lock (a debugger, SIGSTOP) must not hang the others.
inline constexpr std::uint64_t kLockPatienceNs = 2'000'000'000;

std::uint64_t monotonic_ns() noexcept;

// The driver's free memory, read just before a visit to the ledger, with the ledger's generation
// read just before it (generation(): no change was made between the two if it is the same at the
// visit). A reading without a generation is never taken as quiet.
struct FreeReading {
  static constexpr std::uint64_t kNoGeneration = ~std::uint64_t{0};
  FreeReading(std::uint64_t free_bytes, std::uint64_t generation_before = kNoGeneration) noexcept  // NOLINT: a plain figure reads as one
      : free(free_bytes), generation(generation_before) {}
  std::uint64_t free;
  std::uint64_t generation;
};

struct JoinRequest {
  int device = 0;
  std::uint8_t uuid[16] = {};
  std::uint64_t device_total = 0;
  // The driver's free memory now (nullopt: unknown), read by join() itself after the ledger's
  // generation, so that the reading can be told coherent (FreeReading).
  std::optional<std::uint64_t> (*read_device_free)(int device) = nullptr;
  // Else a reading taken before (never coherent: it can only lower the estimate, after the window).
  std::optional<std::uint64_t> device_free;
  std::string dir;                           // GPUMEM_SHARE_DIR (empty: the default)
  std::uint32_t weight_milli = 1000;
  std::uint64_t min_bytes = 0;
  std::uint64_t cap_bytes = 0;  // GPUMEM_LIMIT or a cluster's bound, else 0: the device's total
  std::uint64_t outside_settle_ns = kOutsideSettleNs;
  // How long join() waits for another process's update to end (kLockPatienceNs; a retry waits less).
  std::uint64_t lock_patience_ns = kLockPatienceNs;
};

// What this member may have, as of its last visit.
struct Terms {
  std::uint64_t guarantee = 0;
  std::uint64_t allowance = 0;
  std::uint64_t held = 0;
  std::uint64_t capacity = 0;
};

enum class Outcome : std::uint8_t {
  reserved,          // held += bytes (provisionally, inside the guarantee, while the ledger is locked)
  within_guarantee,  // not now, but inside the guarantee: borrowers can be asked to give back
  lendable,          // beyond the guarantee, but others hold memory idle (their reclaim threads can give
                     // it back) enough for it, and no one waits inside a guarantee: it can be lent
  refused,           // beyond the guarantee and nothing free or lendable: no one owes it
  unavailable,       // the ledger could not be locked in time
};

struct Reservation {
  Outcome outcome = Outcome::refused;
  Terms terms;
};

// The member's figures for the exit statistics and gpumem-top.
struct MemberFigures {
  Terms terms;
  std::uint64_t peak_borrowed = 0;
  std::uint64_t given_back = 0;        // on request
  std::uint64_t refusals_after_wait = 0;
  std::uint64_t waits = 0;
  std::uint64_t ledger_updates = 0;    // locked visits to the ledger
  std::uint64_t join_ns = 0;
  std::uint64_t members_at_join = 0;
};

// A process stopped while it updates the ledger (SIGSTOP, a debugger) holds its lock until it runs
// again. No member depends on that: a visit waits at most kLockPatienceNs for the lock, and once one
// has waited that long the member's later visits try once, without waiting, until one gets the lock.
// Meanwhile a reservation inside the member's guarantee (as of its last visit) is granted
// provisionally and entered at the next visit, as memory given back is; beyond it, the answer is
// Outcome::unavailable. A process that could not join for the same reason retries (budgets.cpp).
class Member {
 public:
  // Joins the ledger of request.uuid's GPU. Null, with one line saying why in `error`, when it cannot;
  // `locked_out` then says whether only another process's update in progress kept it out (worth
  // trying again later).
  static Member* join(const JoinRequest& request, std::string& error, bool* locked_out = nullptr) noexcept;

  int device() const noexcept { return device_; }
  // Reserves `bytes`; `device_free` (the driver's free memory now, if known) refreshes the estimate of
  // memory outside the ledger.
  Reservation reserve(std::uint64_t bytes, std::optional<FreeReading> device_free) noexcept;
  // The ledger's generation now (one load of a mapped word), for a FreeReading.
  std::uint64_t generation() const noexcept {
    return std::atomic_ref<std::uint64_t>(header_->generation).load(std::memory_order_acquire);
  }
  // Waits, at most `wait_ns`, for `bytes` inside the guarantee, or lent from idle memory (Outcome::lendable):
  // asks the others to give back (fair_share.h, reclaim_requests: borrowers what they owe, idle memory
  // lent for the rest) as much as `need` (>= bytes: what the caller will reserve piece by piece, so that
  // the others are asked once for all of it), wakes their reclaim threads, and looks again every
  // kWaitPollNs. Reserved, or refused (in time, or because neither the guarantee nor idle memory
  // holds it any more: answered requests publish what is really idle).
  Reservation wait_and_reserve(std::uint64_t bytes, std::uint64_t wait_ns, std::uint64_t need = 0) noexcept;
  // The driver answered (either way) the call a reservation of `bytes` was made for: they no longer
  // count as reserved but not yet on the device. One atomic update of a mapped word, no lock.
  void answered(std::uint64_t bytes) noexcept;
  // Memory the process holds whatever the shares say (a free that failed: the block is still there).
  void force_reserve(std::uint64_t bytes) noexcept;
  // The memory went back to the driver. Never below zero (a mismatch is logged once).
  void give_back(std::uint64_t bytes) noexcept;
  // Looks at the ledger again (others came, went or changed): terms() is current afterwards.
  void refresh() noexcept;
  // Bytes others asked this process to give back (0: none): one relaxed load of a mapped word.
  std::uint64_t reclaim_requested() const noexcept {
    return std::atomic_ref<std::uint64_t>(own_slot_->reclaim_request).load(std::memory_order_relaxed);
  }
  // Whether the request still holds (a waiter renewed it lately); a stale one is only cleared.
  bool reclaim_current() const noexcept {
    return monotonic_ns() < std::atomic_ref<std::uint64_t>(own_slot_->reclaim_until_ns).load(std::memory_order_relaxed);
  }
  // `given` bytes went back for the request: it shrinks by that much (it stays while nothing could go
  // back, so that memory the process frees meanwhile goes back rather than to its own next block),
  // and a stale one is cleared.
  void reclaim_served(std::uint64_t given) noexcept;
  // Live bytes in this process's blocks (informational; written without the lock).
  void note_in_use(std::uint64_t bytes) noexcept {
    std::atomic_ref<std::uint64_t>(own_slot_->in_use).store(bytes, std::memory_order_relaxed);
  }

  // --- The reclaim thread (budget/reclaim_thread.h): requests answered without the program ---
  // The slot says that a reclaim thread answers its requests, so others may count its idle memory as
  // lendable and expect answers (kSlotReclaims).
  void enable_reclaim_thread() noexcept;
  // The slot's futex word now: a member that raises this one's request bumps it and wakes the thread.
  std::uint32_t reclaim_wake() const noexcept {
    return std::atomic_ref<std::uint32_t>(own_slot_->reclaim_wake).load(std::memory_order_acquire);
  }
  // Sleeps until the futex word is no longer `seen` (a request came), at most `timeout_ns`
  // (FUTEX_WAIT on the shared mapping: no polling). Signals interrupt it early, harmlessly.
  void wait_for_reclaim_wake(std::uint32_t seen, std::uint64_t timeout_ns) const noexcept;
  // Bytes held unused that the reclaim thread can give back (for others' lending; without the lock).
  void note_idle(std::uint64_t bytes) noexcept {
    std::atomic_ref<std::uint64_t>(own_slot_->idle_bytes).store(bytes, std::memory_order_relaxed);
  }
  // The reclaim thread answered the request it found at futex word `wake`: `given` bytes went back
  // (reclaim_served), and `idle` is what it still holds unused (nullopt: not known now).
  void reclaim_answered(std::uint64_t given, std::optional<std::uint64_t> idle, std::uint32_t wake) noexcept;
  Terms terms() const noexcept;
  MemberFigures figures() const noexcept;
  // One line naming the processes holding the GPU and what each holds, for a refusal: each by its pid,
  // command and identity (share/member_identity.h), its pid namespace where it is not this process's.
  std::string holders() noexcept;
  const std::string& path() const noexcept { return path_; }

  // In a forked child: the parent's memberships are not the child's.
  static void drop_all_in_child() noexcept;

  // The live members as the fair shares see them (ledger.cpp).
  struct View;

 private:
  Member() = default;
  // Runs change(view) with both locks held and the generation bumped around it; false when the
  // ledger could not be locked before `deadline_ns`.
  template <typename Change>
  bool locked(std::uint64_t deadline_ns, Change&& change) noexcept;
  void compute(View& view, std::uint64_t now_ns) noexcept;
  // compute(), then takes `bytes` if they fit the allowance and the device; else whether they lie
  // inside the guarantee.
  Outcome try_take(View& view, std::uint64_t now_ns, std::uint64_t bytes) noexcept;
  // The driver's free memory now: refreshes the estimate of what lies outside the ledger.
  void note_device_free(const FreeReading& reading, std::uint64_t now_ns) noexcept;
  std::size_t sweep_dead() noexcept;
  // reserve() when the ledger cannot be locked: `bytes` inside the guarantee are reserved until the
  // next visit enters them; else Outcome::unavailable.
  Outcome reserve_provisionally(std::uint64_t bytes) noexcept;
  void publish(View& view) noexcept;

  int device_ = 0;
  int fd_ = -1;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;  // kLedgerFileWithIdentityBytes, or kLedgerFileBytes where the file could not grow
  MemberIdentity* identities_ = nullptr;  // the identity table (null: the file has none)
  std::uint64_t pid_namespace_ = 0;       // this process's (/proc/self/ns/pid), to name others by
  LedgerHeader* header_ = nullptr;
  LedgerSlot* slots_ = nullptr;
  LedgerSlot* own_slot_ = nullptr;
  std::uint32_t own_index_ = 0;
  std::uint64_t device_total_ = 0;
  std::uint64_t outside_settle_ns_ = kOutsideSettleNs;
  std::uint64_t generation_at_visit_ = 0;  // the generation the current visit found (under the lock)
  std::string path_;
  std::atomic<std::uint64_t> guarantee_{0};
  std::atomic<std::uint64_t> allowance_{0};
  std::atomic<std::uint64_t> held_{0};
  std::atomic<std::uint64_t> capacity_{0};
  std::atomic<std::uint64_t> pending_give_back_{0};  // given back while the ledger could not be locked
  std::atomic<std::uint64_t> pending_reserve_{0};    // reserved provisionally meanwhile
  std::atomic<std::uint64_t> provisional_unanswered_{0};  // of those, not answered(): never "reserving"
  std::atomic<bool> lock_stuck_{false};  // a visit waited its whole patience: later ones try once
  std::atomic<std::uint64_t> peak_borrowed_{0};
  std::atomic<std::uint64_t> given_back_{0};
  std::atomic<std::uint64_t> refusals_after_wait_{0};
  std::atomic<std::uint64_t> waits_{0};
  std::atomic<std::uint64_t> ledger_updates_{0};
  std::atomic<bool> underflow_reported_{false};
  std::uint64_t join_ns_ = 0;
  std::uint64_t members_at_join_ = 0;
};

// The member of `device`, or null (not shared, or not joined yet).
Member* member(int device) noexcept;
// Records the member of `device` (the budget joins; the first join of a device wins).
Member* adopt(int device, Member* joined) noexcept;

void sleep_for_ns(std::uint64_t ns) noexcept;

}  // namespace gpumem::shim::share
