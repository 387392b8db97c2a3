// Rate limit for out-of-memory reports: a program that retries a refused size in a loop (as
// frameworks do while they shrink a batch) gets one full report per distinct size per second, and
// the next report of that size says how many refusals it stands for.
//
// Pure and clock-free (the caller passes the time), so it is unit-tested on its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::shim::observe {

// Invariants: each entry names one size (bytes 0 = unused); `suppressed` counts the refusals of that
// size since its last report. When every entry is taken the oldest report's entry is reused, so a
// size can then be reported again within its second: the limiter never loses a distinct size's
// first report.
class RefusalLimiter {
 public:
  static constexpr std::uint64_t kIntervalNs = 1'000'000'000;  // one report per size per second
  static constexpr std::size_t kSizes = 32;                    // distinct sizes remembered

  struct Verdict {
    bool report = false;          // log the full report now
    std::uint64_t suppressed = 0;  // refusals of this size not reported since its last report
  };

  Verdict refuse(std::size_t bytes, std::uint64_t now_ns) noexcept {
    Entry* oldest = &entries_[0];
    for (Entry& entry : entries_) {
      if (entry.bytes == bytes && entry.used) {
        if (now_ns - entry.reported_ns < kIntervalNs) {
          ++entry.suppressed;
          return Verdict{false, entry.suppressed};
        }
        const Verdict verdict{true, entry.suppressed};
        entry.reported_ns = now_ns;
        entry.suppressed = 0;
        return verdict;
      }
      if (!entry.used || (oldest->used && entry.reported_ns < oldest->reported_ns)) oldest = &entry;
    }
    *oldest = Entry{bytes, now_ns, 0, true};
    return Verdict{true, 0};
  }

 private:
  struct Entry {
    std::size_t bytes = 0;
    std::uint64_t reported_ns = 0;
    std::uint64_t suppressed = 0;
    bool used = false;
  };
  std::array<Entry, kSizes> entries_{};
};

// The process's refusal reports, one limiter per kind, shared by every thread (base/refusal_limiter.cpp).
enum class RefusalKind : std::uint8_t {
  out_of_memory,  // a memory manager refused a request (the full out-of-memory report)
  over_budget,    // the device's budget refused a charge of another path
};
// Whether a refusal of `bytes` is reported now; when it is, `note` is " (N more refusals of this size
// since the last report)" or empty. Never throws; fork-safe.
bool report_refusal(RefusalKind kind, std::size_t bytes, std::string& note) noexcept;

}  // namespace gpumem::shim::observe
