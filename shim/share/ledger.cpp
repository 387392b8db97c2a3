// A GPU's ledger: joining it, reserving and giving back under its lock, waiting for borrowed memory.
#include "share/ledger.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "base/fork_safe_lock.h"
#include "checked_size.h"
#include "base/log.h"
#include "share/member_identity.h"
#include "share/share_dir.h"

namespace gpumem::shim::share {
namespace {

std::array<std::atomic<Member*>, kMaxDevices> g_members{};

constexpr std::uint64_t kGiveBackPatienceNs = 100'000'000;

struct flock byte_lock(short type, long byte) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = byte;
  lock.l_len = 1;
  return lock;
}

bool try_lock_byte(int fd, long byte) {
  struct flock lock = byte_lock(F_WRLCK, byte);
  return fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

void unlock_byte(int fd, long byte) {
  struct flock lock = byte_lock(F_UNLCK, byte);
  fcntl(fd, F_OFD_SETLK, &lock);
}

// Takes the ledger lock, retrying with growing pauses (the holder keeps it for microseconds).
bool lock_until(int fd, std::uint64_t deadline_ns) {
  std::uint64_t pause = 2'000;
  while (true) {
    if (try_lock_byte(fd, kLedgerLockByte)) return true;
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) return false;
    if (monotonic_ns() >= deadline_ns) return false;
    sleep_for_ns(pause);
    pause = std::min<std::uint64_t>(pause * 2, 1'000'000);
  }
}

// Whether another open file (another process) holds `byte`: the slot's owner lives.
bool held_by_another(int fd, long byte) {
  struct flock lock = byte_lock(F_WRLCK, byte);
  if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return true;  // cannot tell: taken as alive
  return lock.l_type != F_UNLCK;
}

std::uint64_t process_start_time() {
  char text[1024];
  const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return 0;
  text[got] = '\0';
  const char* at = std::strrchr(text, ')');  // the command may hold spaces and parentheses
  if (at == nullptr) return 0;
  // After ") " come fields 3, 4, ...; starttime is field 22.
  int field = 2;
  for (const char* p = at + 1; *p != '\0'; ++p) {
    if (*p == ' ' && ++field == 22) return std::strtoull(p + 1, nullptr, 10);
  }
  return 0;
}

void read_comm(char (&comm)[16]) {
  std::memset(comm, 0, sizeof comm);
  const int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t got = read(fd, comm, sizeof comm - 1);
  close(fd);
  for (ssize_t i = 0; i < got; ++i) {
    if (comm[i] == '\n') comm[i] = '\0';
  }
}

std::atomic_ref<std::uint64_t> word(std::uint64_t& field) { return std::atomic_ref<std::uint64_t>(field); }

// Wakes the reclaim thread of `slot` (its futex word was bumped under the lock). A slot without one,
// or whose process is gone, has no waiter: the call returns at once.
void wake_reclaim_thread(LedgerSlot& slot) {
  syscall(SYS_futex, &slot.reclaim_wake, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace

void sleep_for_ns(std::uint64_t ns) noexcept {
  timespec duration{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (nanosleep(&duration, &duration) != 0 && errno == EINTR) {
  }
}

std::uint64_t monotonic_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000 + static_cast<std::uint64_t>(now.tv_nsec);
}

// The live members as the fair shares see them. One per process is enough: every visit holds
// ProcessLock::share_ledger.
struct Member::View {
  std::uint64_t capacity = 0;
  std::size_t count = 0;
  std::size_t self = 0;
  std::array<std::uint32_t, kMaxMembers> slot_of{};
  std::array<Claim, kMaxMembers> claims{};
  std::array<Share, kMaxMembers> shares{};
  std::array<std::uint64_t, kMaxMembers> requests{};
  SharesSummary summary;
};

namespace {
Member::View* view_storage() {
  static Member::View* view = new Member::View();  // leaked: used until the very end
  return view;
}
}  // namespace

void Member::compute(View& view, std::uint64_t now_ns) noexcept {
  view.count = 0;
  view.self = 0;
  for (std::uint32_t i = 0; i < kLedgerSlots; ++i) {
    LedgerSlot& slot = slots_[i];
    if (i == own_index_ && slot.state != kSlotLive) slot.state = kSlotLive;  // overwritten by someone: ours
    if (slot.state != kSlotLive) {
      if (slot.state != kSlotFree) std::memset(&slot, 0, sizeof slot);  // garbage: a free slot
      continue;
    }
    if (i == own_index_) view.self = view.count;
    view.slot_of[view.count] = i;
    view.claims[view.count] = claim_of(slot, device_total_, now_ns);
    ++view.count;
  }
  // Room for one more process's context (what a member's costs on average, at most 1/32 of the
  // device), so that a process can still start beside members that hold all they may.
  const std::uint64_t outside = std::min(header_->outside_bytes, device_total_);
  const std::uint64_t headroom =
      view.count == 0 ? 0 : std::min((outside + view.count - 1) / view.count, device_total_ / kHeadroomDivisor);
  view.capacity = device_total_ - outside - std::min(headroom, device_total_ - outside);
  header_->capacity = view.capacity;
  view.summary = fair_shares(view.capacity, std::span(view.claims.data(), view.count),
                             std::span(view.shares.data(), view.count));
}

void Member::publish(View& view) noexcept {
  for (std::size_t k = 0; k < view.count; ++k) {
    LedgerSlot& slot = slots_[view.slot_of[k]];
    slot.guarantee = view.shares[k].guarantee;
    slot.allowance = view.shares[k].allowance;
    slot.demand = view.claims[k].demand;
  }
  header_->members = view.count;
  const Share& own = view.shares[view.self];
  const std::uint64_t held = own_slot_->held;
  own_slot_->peak_borrowed = std::max(own_slot_->peak_borrowed, saturating_sub(held, own.guarantee));
  own_slot_->given_back_bytes = given_back_.load(std::memory_order_relaxed);
  own_slot_->refusals = refusals_after_wait_.load(std::memory_order_relaxed);
  guarantee_.store(own.guarantee, std::memory_order_relaxed);
  allowance_.store(own.allowance, std::memory_order_relaxed);
  held_.store(held, std::memory_order_relaxed);
  capacity_.store(view.capacity, std::memory_order_relaxed);
  peak_borrowed_.store(own_slot_->peak_borrowed, std::memory_order_relaxed);
}

std::size_t Member::sweep_dead() noexcept {
  std::size_t dead = 0;
  for (std::uint32_t i = 0; i < kLedgerSlots; ++i) {
    if (i == own_index_ || slots_[i].state != kSlotLive) continue;
    if (held_by_another(fd_, kSlotLockBase + static_cast<long>(i))) continue;
    std::memset(&slots_[i], 0, sizeof(LedgerSlot));  // its process is gone, and its charge with it
    ++dead;
  }
  return dead;
}

template <typename Change>
bool Member::locked(std::uint64_t deadline_ns, Change&& change) noexcept {
  try {
    const auto process_lock = lock_fork_safely(ProcessLock::share_ledger);
    // A process stopped inside an update keeps the lock: once a visit waited for it in vain, the next
    // ones try once, so that a stopped member costs this one kLockPatienceNs, not that at every call.
    // Only a visit given the whole patience (less what the caller spent since) says so: a short one
    // (a give-back's) that found the lock busy on a loaded machine would otherwise leave every later
    // visit a single try.
    const std::uint64_t began = monotonic_ns();
    const bool whole_patience = deadline_ns >= began && deadline_ns - began > kLockPatienceNs / 2;
    if (lock_stuck_.load(std::memory_order_relaxed)) deadline_ns = began;
    if (!lock_until(fd_, deadline_ns)) {
      if (whole_patience) lock_stuck_.store(true, std::memory_order_relaxed);
      return false;
    }
    lock_stuck_.store(false, std::memory_order_relaxed);
    ledger_updates_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t generation = word(header_->generation).load(std::memory_order_acquire);
    generation_at_visit_ = generation;
    if ((generation & 1) != 0) ++generation;  // a member died inside an update: what it left is clamped as read
    word(header_->generation).store(generation + 1, std::memory_order_release);
    if (const std::uint64_t reserved = pending_reserve_.exchange(0, std::memory_order_relaxed)) {
      own_slot_->held = std::min(saturating_add(own_slot_->held, reserved), device_total_);
    }
    if (const std::uint64_t pending = pending_give_back_.exchange(0, std::memory_order_relaxed)) {
      own_slot_->held = saturating_sub(own_slot_->held, pending);
    }
    change(*view_storage());
    word(header_->generation).store(generation + 2, std::memory_order_release);
    unlock_byte(fd_, kLedgerLockByte);
    return true;
  } catch (...) {  // the process mutex failed: nothing changed
    return false;
  }
}

void Member::note_device_free(const FreeReading& reading, std::uint64_t now_ns) noexcept {
  // What the device lacks beyond what the members have on it is someone else's: contexts, other
  // programs. Bytes a member reserved whose driver call has not answered may or may not be on the
  // device yet, so one reading bounds that memory from both sides.
  std::uint64_t held = 0;
  std::uint64_t reserving = 0;
  bool others_idle = true;  // no other member reserved or waited lately
  for (LedgerSlot& slot : std::span(slots_, kLedgerSlots)) {
    if (slot.state != kSlotLive) continue;
    const std::uint64_t own = std::min(slot.held, device_total_);
    held += own;
    reserving += std::min(word(slot.reserving).load(std::memory_order_relaxed), own);
    if (&slot != own_slot_ && (slot.active_until_ns > now_ns || slot.waiting_bytes != 0)) others_idle = false;
  }
  const std::uint64_t missing = saturating_sub(device_total_, std::min(reading.free, device_total_));
  const std::uint64_t at_least = saturating_sub(missing, held);
  const std::uint64_t at_most = std::min(saturating_sub(missing, saturating_sub(held, reserving)), device_total_);
  // Coherent: no member changed the ledger between the reading and this visit, so `held` is what it
  // was when the driver answered (a holding given back meanwhile would make the reading look high).
  const bool coherent = reading.generation == generation_at_visit_;
  std::uint64_t& outside = header_->outside_bytes;
  const auto settle_at = [&](std::uint64_t value) {
    outside = std::min(value, device_total_);
    header_->lower_since_ns = 0;
    header_->lower_max = 0;
  };
  if (outside <= at_most) {
    // Raised at once by a coherent reading (a process came: the room for its context is needed now);
    // kept while readings agree. An incoherent one may look high (memory given back since), and a
    // raise would stay.
    settle_at(coherent ? std::max(outside, at_least) : outside);
    return;
  }
  // Lowered at once by a quiet reading: coherent, nothing reserving, and no other member active (one
  // that frees memory gives it back after the driver has it). Otherwise only when every reading for
  // outside_settle_ns_ said less, and then to the highest of them: one can read low while a member's
  // memory is between the driver and the ledger (freed, not yet given back), or was taken after the
  // free memory was read.
  if (coherent && reserving == 0 && others_idle) {
    settle_at(at_most);
    return;
  }
  if (header_->lower_since_ns == 0 || header_->lower_since_ns > now_ns) {
    header_->lower_since_ns = now_ns;
    header_->lower_max = at_most;
  }
  header_->lower_max = std::max(header_->lower_max, at_most);
  if (now_ns - header_->lower_since_ns >= outside_settle_ns_) settle_at(header_->lower_max);
}

void Member::answered(std::uint64_t bytes) noexcept {
  // Provisional reservations never counted as reserving: theirs are taken off first.
  std::uint64_t provisional = provisional_unanswered_.load(std::memory_order_relaxed);
  while (provisional > 0 && !provisional_unanswered_.compare_exchange_weak(
                                provisional, saturating_sub(provisional, bytes), std::memory_order_relaxed)) {
  }
  bytes = saturating_sub(bytes, provisional);
  if (bytes == 0) return;
  auto reserving = word(own_slot_->reserving);
  std::uint64_t now = reserving.load(std::memory_order_relaxed);
  while (!reserving.compare_exchange_weak(now, saturating_sub(now, bytes), std::memory_order_relaxed)) {
  }
}

Outcome Member::try_take(View& view, std::uint64_t now_ns, std::uint64_t bytes) noexcept {
  compute(view, now_ns);
  const Claim& own = view.claims[view.self];
  const Share& share = view.shares[view.self];
  if (fits_under(own.held, bytes, share.allowance) && fits_under(view.summary.held, bytes, view.capacity)) {
    own_slot_->held += bytes;
    word(own_slot_->reserving).fetch_add(bytes, std::memory_order_relaxed);  // until answered()
    return Outcome::reserved;
  }
  if (fits_under(own.held, bytes, share.guarantee)) return Outcome::within_guarantee;
  // Beyond the guarantee: what others hold idle may be lent, if it covers the shortfall, within the cap,
  // and no one waits inside a guarantee (a borrower may not grow then).
  if (!fits_under(own.held, bytes, own.cap)) return Outcome::refused;
  std::uint64_t idle = 0;
  for (std::size_t k = 0; k < view.count; ++k) {
    if (k == view.self) continue;
    if (view.claims[k].waiting) return Outcome::refused;
    idle = saturating_add(idle, view.claims[k].idle);
  }
  const std::uint64_t wanted = saturating_add(view.summary.held, bytes);
  return wanted > view.capacity && wanted - view.capacity <= idle ? Outcome::lendable : Outcome::refused;
}

Reservation Member::reserve(std::uint64_t bytes, std::optional<FreeReading> device_free) noexcept {
  Reservation result{Outcome::unavailable, terms()};
  locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
    const std::uint64_t now = monotonic_ns();
    own_slot_->active_until_ns = now + kGrowingWindowNs;
    if (device_free) note_device_free(*device_free, now);
    result.outcome = try_take(view, now, bytes);
    // A refusal looks for the dead first.
    if (result.outcome != Outcome::reserved && sweep_dead() > 0) result.outcome = try_take(view, now, bytes);
    publish(view);
    // The terms the outcome was decided on: another thread's give-back may change them once unlocked,
    // and a caller that compares its holding with the refused one must see that change.
    result.terms = terms();
  });
  if (result.outcome == Outcome::unavailable) {
    result.outcome = reserve_provisionally(bytes);
    result.terms = terms();
  }
  return result;
}

Outcome Member::reserve_provisionally(std::uint64_t bytes) noexcept {
  // The guarantee as of the last visit is this member's whoever else holds the device: the others
  // borrow it only until it asks, so taking it needs no one's consent (the driver may still refuse
  // while borrowers hold it).
  std::uint64_t held = held_.load(std::memory_order_relaxed);
  do {
    if (!fits_under(held, bytes, guarantee_.load(std::memory_order_relaxed))) return Outcome::unavailable;
  } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  pending_reserve_.fetch_add(bytes, std::memory_order_relaxed);
  provisional_unanswered_.fetch_add(bytes, std::memory_order_relaxed);
  return Outcome::reserved;
}

Reservation Member::wait_and_reserve(std::uint64_t bytes, std::uint64_t wait_ns, std::uint64_t need) noexcept {
  waits_.fetch_add(1, std::memory_order_relaxed);
  need = std::max(need, bytes);
  const std::uint64_t deadline = monotonic_ns() + wait_ns;
  Reservation result{Outcome::unavailable, terms()};
  bool timed_out = false;
  // Slots whose request this look raised: their reclaim threads are woken once the ledger is unlocked.
  std::array<std::uint32_t, kLedgerSlots> to_wake{};
  bool asked_within_guarantee = false;
  for (std::uint64_t poll = 0;; ++poll) {
    result.outcome = Outcome::unavailable;
    std::size_t waking = 0;
    locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
      const std::uint64_t now = monotonic_ns();
      own_slot_->active_until_ns = now + kGrowingWindowNs;
      own_slot_->waiting_bytes = bytes;
      if (poll % 16 == 0) sweep_dead();
      result.outcome = try_take(view, now, bytes);
      // A request that was inside the guarantee stays waited for while the guarantee shrinks for a
      // moment (a member killed while the driver still counts its memory reads as memory outside the
      // ledger until the readings settle): it ends at the deadline, as any wait.
      if (result.outcome == Outcome::within_guarantee) asked_within_guarantee = true;
      if (result.outcome == Outcome::refused && asked_within_guarantee) result.outcome = Outcome::within_guarantee;
      if (result.outcome == Outcome::lendable) {
        own_slot_->waiting_bytes = 0;  // beyond its guarantee: the others' allowances stay as they are
        compute(view, now);
      }
      const bool waiting = result.outcome == Outcome::within_guarantee || result.outcome == Outcome::lendable;
      if (waiting && now >= deadline) {
        timed_out = true;
        result.outcome = Outcome::refused;
      } else if (waiting) {
        // Inside the guarantee, what the borrowers owe: the need as far as the guarantee goes (at least
        // `bytes`, which fit it). Beyond it, nothing is owed: idle memory is lent.
        const std::uint64_t owed =
            result.outcome == Outcome::within_guarantee
                ? std::min(need, saturating_sub(view.shares[view.self].guarantee, view.claims[view.self].held))
                : 0;
        reclaim_requests(view.capacity, std::span(view.claims.data(), view.count),
                         std::span(view.shares.data(), view.count), view.self, owed, need,
                         std::span(view.requests.data(), view.count));
        for (std::size_t k = 0; k < view.count; ++k) {
          if (view.requests[k] == 0) continue;
          LedgerSlot& holder = slots_[view.slot_of[k]];
          auto request = word(holder.reclaim_request);
          if (request.load(std::memory_order_relaxed) < view.requests[k]) {
            request.store(view.requests[k], std::memory_order_relaxed);
            std::atomic_ref<std::uint32_t>(holder.reclaim_wake).fetch_add(1, std::memory_order_release);
            to_wake[waking++] = view.slot_of[k];
          }
          word(holder.reclaim_until_ns).store(now + kReclaimRequestNs, std::memory_order_relaxed);
        }
      }
      if (!waiting || timed_out) {
        own_slot_->waiting_bytes = 0;
        compute(view, now);  // no longer waiting: the others may borrow again
        if (timed_out) refusals_after_wait_.fetch_add(1, std::memory_order_relaxed);
      }
      publish(view);
      result.terms = terms();  // as decided (reserve())
    });
    // Outside the lock: a futex wake is a system call.
    for (std::size_t k = 0; k < waking; ++k) wake_reclaim_thread(slots_[to_wake[k]]);
    // A look that could not lock the ledger (busy, or a stopped member holds it) ends the wait only at
    // its deadline: the memory may come at the next look.
    const bool look_again = result.outcome == Outcome::within_guarantee || result.outcome == Outcome::lendable ||
                            (result.outcome == Outcome::unavailable && monotonic_ns() < deadline);
    if (!look_again) break;
    sleep_for_ns(kWaitPollNs);
  }
  if (result.outcome == Outcome::unavailable) {
    // Could not even look: leave no wait behind (best effort, the slot's next visit clears it anyway).
    locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
      own_slot_->waiting_bytes = 0;
      compute(view, monotonic_ns());
      publish(view);
    });
    result.terms = terms();
  }
  return result;
}

void Member::enable_reclaim_thread() noexcept {
  const bool done = locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
    own_slot_->flags |= kSlotReclaims;
    compute(view, monotonic_ns());
    publish(view);
  });
  if (!done) {  // written by its owner alone: a stopped member's lock cannot keep it out
    std::atomic_ref<std::uint32_t>(own_slot_->flags).fetch_or(kSlotReclaims, std::memory_order_relaxed);
  }
}

void Member::wait_for_reclaim_wake(std::uint32_t seen, std::uint64_t timeout_ns) const noexcept {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
  // Not FUTEX_PRIVATE_FLAG: the word lies in a file every member maps, and the kernel matches waiters
  // and wakers of a shared mapping by the file and offset.
  syscall(SYS_futex, &own_slot_->reclaim_wake, FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

void Member::reclaim_answered(std::uint64_t given, std::optional<std::uint64_t> idle, std::uint32_t wake) noexcept {
  if (idle) note_idle(*idle);
  std::atomic_ref<std::uint32_t>(own_slot_->reclaim_answered).store(wake, std::memory_order_release);
  reclaim_served(given);
}

void Member::give_back(std::uint64_t bytes) noexcept {
  std::uint64_t held_before = 0;
  const bool done = locked(monotonic_ns() + kGiveBackPatienceNs, [&](View& view) {
    held_before = own_slot_->held;
    own_slot_->held = saturating_sub(own_slot_->held, bytes);
    // What goes back was on the device: never more reserving than held (answered() may race this).
    auto reserving = word(own_slot_->reserving);
    std::uint64_t now = reserving.load(std::memory_order_relaxed);
    while (now > own_slot_->held &&
           !reserving.compare_exchange_weak(now, own_slot_->held, std::memory_order_relaxed)) {
    }
    compute(view, monotonic_ns());
    publish(view);
  });
  if (!done) {
    pending_give_back_.fetch_add(bytes, std::memory_order_relaxed);  // applied at the next visit
    held_.store(saturating_sub(held_.load(std::memory_order_relaxed), bytes), std::memory_order_relaxed);
  } else if (bytes > held_before && !underflow_reported_.exchange(true, std::memory_order_relaxed)) {
    log::at(LogLevel::warn, "device {}: {} bytes given back to the ledger \"{}\", which held only {} for this "
            "process; its holding stays at 0 (reported once)", device_, bytes, path_, held_before);
  }
}

void Member::force_reserve(std::uint64_t bytes) noexcept {
  const bool done = locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
    own_slot_->held = std::min(saturating_add(own_slot_->held, bytes), device_total_);
    compute(view, monotonic_ns());
    publish(view);
  });
  if (!done) {  // entered at the next visit
    pending_reserve_.fetch_add(bytes, std::memory_order_relaxed);
    held_.store(saturating_add(held_.load(std::memory_order_relaxed), bytes), std::memory_order_relaxed);
  }
}

void Member::refresh() noexcept {
  locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
    compute(view, monotonic_ns());
    publish(view);
  });
}

void Member::reclaim_served(std::uint64_t given) noexcept {
  given_back_.fetch_add(given, std::memory_order_relaxed);
  locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
    auto request = word(own_slot_->reclaim_request);
    const std::uint64_t asked = request.load(std::memory_order_relaxed);
    request.store(reclaim_current() ? saturating_sub(asked, given) : 0, std::memory_order_relaxed);
    compute(view, monotonic_ns());
    publish(view);
  });
}

Terms Member::terms() const noexcept {
  return Terms{guarantee_.load(std::memory_order_relaxed), allowance_.load(std::memory_order_relaxed),
               held_.load(std::memory_order_relaxed), capacity_.load(std::memory_order_relaxed)};
}

MemberFigures Member::figures() const noexcept {
  MemberFigures figures;
  figures.terms = terms();
  figures.peak_borrowed = peak_borrowed_.load(std::memory_order_relaxed);
  figures.given_back = given_back_.load(std::memory_order_relaxed);
  figures.refusals_after_wait = refusals_after_wait_.load(std::memory_order_relaxed);
  figures.waits = waits_.load(std::memory_order_relaxed);
  figures.ledger_updates = ledger_updates_.load(std::memory_order_relaxed);
  figures.join_ns = join_ns_;
  figures.members_at_join = members_at_join_;
  return figures;
}

std::string Member::holders() noexcept {
  struct Holder {
    std::string who;
    std::uint64_t held;
    std::uint64_t guarantee;
  };
  try {
    std::vector<Holder> holders;
    holders.reserve(kMaxMembers);
    std::uint64_t capacity = 0;
    locked(monotonic_ns() + kLockPatienceNs, [&](View& view) {
      compute(view, monotonic_ns());
      capacity = view.capacity;
      for (std::size_t k = 0; k < view.count; ++k) {
        const std::uint32_t index = view.slot_of[k];
        const LedgerSlot& slot = slots_[index];
        // A record counts only while it carries the slot's tag (an older member may use the slot now).
        const MemberIdentity* identity =
            identities_ != nullptr && slot.identity_tag != 0 && identities_[index].tag == slot.identity_tag
                ? &identities_[index]
                : nullptr;
        holders.push_back(Holder{describe_member(slot, identity, pid_namespace_, k == view.self),
                                 view.claims[k].held, view.shares[k].guarantee});
      }
    });
    std::sort(holders.begin(), holders.end(), [](const Holder& a, const Holder& b) { return a.held > b.held; });
    std::string line = fmt::format("{} processes share {} bytes:", holders.size(), capacity);
    for (const Holder& holder : holders) {
      line += fmt::format(" {} holds {} of its {}-byte guarantee;", holder.who, holder.held, holder.guarantee);
    }
    if (!line.empty() && line.back() == ';') line.pop_back();
    return line;
  } catch (...) {
    return "the processes sharing the GPU could not be listed (no host memory)";
  }
}

Member* Member::join(const JoinRequest& request, std::string& error, bool* locked_out) noexcept {
  if (locked_out != nullptr) *locked_out = false;
  try {
    const std::uint64_t started = monotonic_ns();
    const OwnIdentity identity = read_own_identity();  // /proc and the environment, before any lock
    std::string why;
    const std::optional<ShareDir> dir = open_share_dir(request.dir, why);
    if (!dir) {
      error = fmt::format("GPUMEM_SHARE_DIR: {}", why);
      return nullptr;
    }
    static std::atomic<bool> fallback_said{false};  // the default taken by another user: said once
    if (!why.empty() && !fallback_said.exchange(true)) log::at(LogLevel::warn, "GPUMEM_SHARE_DIR: {}", why);
    const std::string path = dir->path + "/" + ledger_file_name(request.uuid);
    const mode_t mode = dir->group ? 0660 : 0600;
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      fchmod(fd, mode);  // whatever the umask: a group directory's members must be able to write
      if (dir->group && fchown(fd, static_cast<uid_t>(-1), dir->gid) != 0) {
        // Its group stays ours; the directory's setgid bit normally made it the directory's already.
      }
    } else if (errno == EEXIST) {
      fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0) {
      error = fmt::format("the ledger \"{}\" cannot be opened ({})", path, std::strerror(errno));
      return nullptr;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !ledger_file_trusted(st, *dir, why)) {
      close(fd);
      error = fmt::format("the ledger \"{}\" {}", path, why.empty() ? "cannot be examined" : why);
      return nullptr;
    }
    auto* member = new Member();
    member->device_ = request.device;
    member->fd_ = fd;
    member->device_total_ = request.device_total;
    member->outside_settle_ns_ = request.outside_settle_ns;
    member->path_ = path;
    const auto fail = [&](std::string line) -> Member* {
      error = std::move(line);
      if (member->map_ != nullptr) munmap(member->map_, member->map_bytes_);
      close(fd);  // our only descriptor of it: any lock we took goes with it
      delete member;
      return nullptr;
    };
    // The driver's free memory, read before the locks (never a driver call under them), after the
    // ledger's generation: the visit below tells whether anyone changed the ledger in between.
    std::optional<FreeReading> reading;
    if (request.read_device_free != nullptr) {
      LedgerHeader before{};
      std::uint64_t generation = FreeReading::kNoGeneration;
      if (pread(fd, &before, sizeof before, 0) == static_cast<ssize_t>(sizeof before) &&
          std::memcmp(before.magic, kLedgerMagic, sizeof kLedgerMagic) == 0) {
        generation = before.generation;
      }
      if (const std::optional<std::uint64_t> free = request.read_device_free(request.device)) {
        reading = FreeReading(*free, generation);
      }
    } else if (request.device_free) {
      reading = FreeReading(*request.device_free);
    }
    const auto process_lock = lock_fork_safely(ProcessLock::share_ledger);
    if (!lock_until(fd, started + request.lock_patience_ns)) {
      if (locked_out != nullptr) *locked_out = true;
      return fail(fmt::format("the ledger \"{}\" stayed locked by another process for {} ms (one stopped while "
                              "it updated the ledger?)", path, request.lock_patience_ns / 1'000'000));
    }
    LedgerHeader found{};
    if (fstat(fd, &st) != 0) return fail(fmt::format("the ledger \"{}\" cannot be examined", path));
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size > 0 && pread(fd, &found, sizeof found, 0) != static_cast<ssize_t>(std::min(size, sizeof found))) {
      return fail(fmt::format("the ledger \"{}\" cannot be read ({})", path, std::strerror(errno)));
    }
    HeaderCheck check = check_header(found, size, request.device_total, request.uuid);
    if (check == HeaderCheck::not_a_ledger || check == HeaderCheck::other_version || check == HeaderCheck::malformed) {
      return fail(fmt::format("the ledger \"{}\" is {}", path, describe(check, found)));
    }
    // A file without the identity table (made by an older gpumem, or not finished) grows to hold it;
    // never shrinks: other members map it. Where it cannot grow, the members go unnamed.
    std::size_t map_bytes = kLedgerFileWithIdentityBytes;
    if (size < kLedgerFileWithIdentityBytes && ftruncate(fd, static_cast<off_t>(kLedgerFileWithIdentityBytes)) != 0) {
      if (check == HeaderCheck::uninitialised && ftruncate(fd, static_cast<off_t>(kLedgerFileBytes)) != 0) {
        return fail(fmt::format("the ledger \"{}\" cannot be sized ({})", path, std::strerror(errno)));
      }
      map_bytes = kLedgerFileBytes;
    }
    void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      return fail(fmt::format("the ledger \"{}\" cannot be mapped ({})", path, std::strerror(errno)));
    }
    member->map_ = map;
    member->map_bytes_ = map_bytes;
    member->pid_namespace_ = identity.pid_namespace;
    if (map_bytes == kLedgerFileWithIdentityBytes) {
      member->identities_ = reinterpret_cast<MemberIdentity*>(static_cast<char*>(map) + kIdentityTableOffset);
    }
    member->header_ = static_cast<LedgerHeader*>(map);
    member->slots_ = reinterpret_cast<LedgerSlot*>(static_cast<char*>(map) + kLedgerHeaderBytes);
    member->own_index_ = kLedgerSlots;  // none yet: the sweep looks at every slot
    if (check != HeaderCheck::uninitialised && check != HeaderCheck::valid) {
      // Another GPU's or another size's ledger under this GPU's name: taken over only when no one uses it.
      member->sweep_dead();
      for (std::uint32_t i = 0; i < kLedgerSlots; ++i) {
        if (member->slots_[i].state == kSlotLive) {
          return fail(fmt::format("the ledger \"{}\" is {}, and in use", path, describe(check, found)));
        }
      }
    }
    if (check != HeaderCheck::valid) {
      std::memset(map, 0, map_bytes);
      initialise_header(*member->header_, request.device_total, request.uuid);
    }
    std::uint64_t generation = word(member->header_->generation).load(std::memory_order_acquire);
    // A ledger made afresh here has no member whose holding could have moved since the reading: it is
    // coherent whatever generation it was read with.
    member->generation_at_visit_ = check == HeaderCheck::valid ? generation
                                   : reading                   ? reading->generation
                                                               : FreeReading::kNoGeneration;
    if ((generation & 1) != 0) ++generation;
    word(member->header_->generation).store(generation + 1, std::memory_order_release);
    member->sweep_dead();
    std::uint32_t index = kLedgerSlots;
    for (std::uint32_t i = 0; i < kLedgerSlots && index == kLedgerSlots; ++i) {
      if (member->slots_[i].state != kSlotLive && try_lock_byte(fd, kSlotLockBase + static_cast<long>(i))) index = i;
    }
    if (index == kLedgerSlots) {
      word(member->header_->generation).store(generation + 2, std::memory_order_release);
      return fail(fmt::format("the ledger \"{}\" has no free slot: {} processes share the GPU already", path,
                              kLedgerSlots));
    }
    member->own_index_ = index;
    LedgerSlot& slot = member->slots_[index];
    std::memset(&slot, 0, sizeof slot);
    slot.pid = static_cast<std::int32_t>(getpid());
    slot.start_time = process_start_time();
    slot.uid = static_cast<std::uint32_t>(geteuid());
    slot.weight_milli = request.weight_milli;
    slot.min_bytes = request.min_bytes;
    slot.cap_bytes = request.cap_bytes;
    slot.active_until_ns = monotonic_ns() + kGrowingWindowNs;
    read_comm(slot.comm);
    slot.host_pid = identity.host_pid;
    slot.pid_namespace = identity.pid_namespace;
    slot.user_namespace = identity.user_namespace;
    if (member->identities_ != nullptr) {
      member->identities_[index] = identity.record;
      slot.identity_tag = identity.record.tag;
    }
    slot.state = kSlotLive;
    member->own_slot_ = &slot;
    View& view = *view_storage();
    if (reading) member->note_device_free(*reading, monotonic_ns());
    member->compute(view, monotonic_ns());
    member->publish(view);
    member->members_at_join_ = view.count;
    member->ledger_updates_.store(1, std::memory_order_relaxed);
    word(member->header_->generation).store(generation + 2, std::memory_order_release);
    unlock_byte(fd, kLedgerLockByte);
    reset_in_forked_child(&Member::drop_all_in_child);  // idempotent
    member->join_ns_ = monotonic_ns() - started;
    return member;
  } catch (...) {
    error = "no host memory to join the ledger";
    return nullptr;
  }
}

void Member::drop_all_in_child() noexcept {
  for (std::atomic<Member*>& entry : g_members) {
    Member* member = entry.exchange(nullptr, std::memory_order_acq_rel);
    if (member == nullptr) continue;
    // The child's copy of the descriptor: closing it leaves the parent's locks (they belong to the
    // open file description, which the parent still holds). The object is leaked, as a parent's.
    munmap(member->map_, member->map_bytes_);
    close(member->fd_);
  }
}

Member* member(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_members[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

Member* adopt(int device, Member* joined) noexcept {
  if (device < 0 || device >= kMaxDevices || joined == nullptr) return nullptr;
  Member* expected = nullptr;
  if (g_members[static_cast<std::size_t>(device)].compare_exchange_strong(expected, joined, std::memory_order_acq_rel)) {
    return joined;
  }
  return expected;
}

}  // namespace gpumem::shim::share
