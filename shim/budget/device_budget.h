// One memory budget per device and process: the limit the policy computes, which every path that
// takes device memory (arena regions, platform allocations, stream-ordered pools, the program's own
// pools, virtual-memory allocations, managed memory, arrays) charges before it allocates and refunds
// when the memory is really given back. A request that does not fit is refused by that very call.
//
// Pure (no CUDA, no locks): the charge is one compare-and-swap loop, so every path can check it on
// its hot path. Unit-tested on its own.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "checked_size.h"

namespace gpumem::shim {

// Who took the memory. Order and names are those of the exit statistics and gpumem.h.
// pool_reserve: what stream-ordered pools hold from the device beyond their live blocks (freed blocks
// a pool keeps until it is trimmed; budget/pool_reserve.h).
enum class BudgetPath : std::uint8_t { arena, driver, async_pool, program_pool, vmm, managed, arrays, pool_reserve };
inline constexpr std::size_t kBudgetPaths = 8;
std::string_view to_string(BudgetPath path) noexcept;

// Invariants: charged() == the sum of charged(path) once every call has returned; charged() never
// exceeds limit() through try_charge (force_charge may, and is reported as such); peak_charged() >=
// charged(). A limit of 0 means "not set yet": nothing can be charged until set_limit.
class DeviceBudget {
 public:
  // The first call sets the limit; later calls keep it (every context of a device shares one).
  // Returns the limit in force.
  std::size_t set_limit(std::size_t limit) noexcept {
    std::size_t expected = 0;
    if (limit_.compare_exchange_strong(expected, limit, std::memory_order_acq_rel)) return limit;
    return expected;
  }
  std::size_t limit() const noexcept { return limit_.load(std::memory_order_acquire); }
  // A device shared with other processes: the limit follows this process's allowance in the GPU's
  // ledger (at least 1, since 0 means "not set").
  void update_limit(std::size_t limit) noexcept { limit_.store(limit == 0 ? 1 : limit, std::memory_order_release); }
  // In a forked child: the parent's memory is not the child's.
  void reset() noexcept {
    limit_.store(0);
    charged_.store(0);
    peak_.store(0);
    for (std::size_t i = 0; i < kBudgetPaths; ++i) {
      by_path_[i].store(0);
      peak_by_path_[i].store(0);
      charges_[i].store(0);
      total_by_path_[i].store(0);
    }
  }

  // Charges `bytes` to `path` when charged() + bytes <= limit(); else charges nothing, false.
  bool try_charge(BudgetPath path, std::size_t bytes) noexcept {
    const std::size_t limit = this->limit();
    std::size_t current = charged_.load(std::memory_order_relaxed);
    do {
      if (!fits_under(current, bytes, limit)) return false;
    } while (!charged_.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel,
                                             std::memory_order_relaxed));
    account(path, bytes, current + bytes);
    return true;
  }

  // For memory the driver handed out before it could be checked (an array whose size is known only
  // once it exists, say) and that the caller then gives back at once if over_limit().
  // Saturates rather than wraps: a charge past 2^64 leaves the budget over its limit, never under it.
  void force_charge(BudgetPath path, std::size_t bytes) noexcept {
    std::size_t current = charged_.load(std::memory_order_relaxed);
    while (!charged_.compare_exchange_weak(current, saturating_add(current, bytes), std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
    }
    account(path, bytes, saturating_add(current, bytes));
  }
  bool over_limit() const noexcept { return charged() > limit(); }

  // Moves `bytes` of the charge from one path to another, the total unchanged (a pool's block freed:
  // the pool keeps its memory).
  void move(BudgetPath from, BudgetPath to, std::size_t bytes) noexcept {
    subtract(by_path_[index(from)], bytes, std::memory_order_relaxed);
    raise_to(peak_by_path_[index(to)], by_path_[index(to)].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  }

  // Never below 0: a refund of more than was charged (a caller's error) leaves 0, not 2^64 - n.
  // `bytes` of a charge just made to `from` belong to `to`: moved, and counted as `to`'s charge
  // instead of `from`'s (a pool block charged a whole growth step, of which the rest stays the
  // pool's: the block's path never reads the step).
  void attribute(BudgetPath from, BudgetPath to, std::size_t bytes) noexcept {
    move(from, to, bytes);
    subtract(charges_[index(from)], 1, std::memory_order_relaxed);
    subtract(total_by_path_[index(from)], bytes, std::memory_order_relaxed);
    charges_[index(to)].fetch_add(1, std::memory_order_relaxed);
    total_by_path_[index(to)].fetch_add(bytes, std::memory_order_relaxed);
  }

  void refund(BudgetPath path, std::size_t bytes) noexcept {
    subtract(charged_, bytes, std::memory_order_acq_rel);
    subtract(by_path_[index(path)], bytes, std::memory_order_relaxed);
  }

  std::size_t charged() const noexcept { return charged_.load(std::memory_order_acquire); }
  std::size_t charged(BudgetPath path) const noexcept {
    return by_path_[index(path)].load(std::memory_order_relaxed);
  }
  std::size_t peak_charged() const noexcept { return peak_.load(std::memory_order_relaxed); }
  std::size_t peak_charged(BudgetPath path) const noexcept {
    return peak_by_path_[index(path)].load(std::memory_order_relaxed);
  }
  // Successful charges of `path` so far, and the bytes they took in total.
  std::uint64_t charges(BudgetPath path) const noexcept { return charges_[index(path)].load(std::memory_order_relaxed); }
  std::uint64_t bytes_charged_in_total(BudgetPath path) const noexcept {
    return total_by_path_[index(path)].load(std::memory_order_relaxed);
  }
  // What is left under the limit (0 when over it).
  std::size_t available() const noexcept {
    const std::size_t limit = this->limit();
    const std::size_t charged = this->charged();
    return charged >= limit ? 0 : limit - charged;
  }

 private:
  static constexpr std::size_t index(BudgetPath path) noexcept { return static_cast<std::size_t>(path); }
  static void subtract(std::atomic<std::size_t>& value, std::size_t bytes, std::memory_order order) noexcept {
    std::size_t seen = value.load(std::memory_order_relaxed);
    while (!value.compare_exchange_weak(seen, saturating_sub(seen, bytes), order, std::memory_order_relaxed)) {
    }
  }
  static void raise_to(std::atomic<std::size_t>& peak, std::size_t value) noexcept {
    std::size_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }
  void account(BudgetPath path, std::size_t bytes, std::size_t total_after) noexcept {
    raise_to(peak_, total_after);
    charges_[index(path)].fetch_add(1, std::memory_order_relaxed);
    total_by_path_[index(path)].fetch_add(bytes, std::memory_order_relaxed);
    const std::size_t path_after = by_path_[index(path)].fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_to(peak_by_path_[index(path)], path_after);
  }

  std::atomic<std::size_t> limit_{0};
  std::atomic<std::size_t> charged_{0};
  std::atomic<std::size_t> peak_{0};
  std::array<std::atomic<std::size_t>, kBudgetPaths> by_path_{};
  std::array<std::atomic<std::size_t>, kBudgetPaths> peak_by_path_{};
  std::array<std::atomic<std::uint64_t>, kBudgetPaths> charges_{};
  std::array<std::atomic<std::uint64_t>, kBudgetPaths> total_by_path_{};
};

inline std::string_view to_string(BudgetPath path) noexcept {
  constexpr std::array<std::string_view, kBudgetPaths> kNames{"arena", "driver", "async_pool", "program_pool",
                                                               "vmm", "managed", "arrays", "pool_reserve"};
  return kNames[static_cast<std::size_t>(path)];
}

}  // namespace gpumem::shim
