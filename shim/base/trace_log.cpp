// The GPUMEM_TRACE CSV: binary records buffered under one lock, formatted without allocating.
#include "base/trace_log.h"

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "base/output_file.h"
#include "base/trace_format.h"
#include "policy/process_policy.h"

namespace gpumem::shim::observe {
namespace {

enum class Action : std::uint8_t { withdrawn, allocate, free, refusal };

// One event as it is buffered: 64 bytes, no pointers to anything.
struct Record {
  std::uint64_t time_ns;
  std::uintptr_t pointer;
  std::uint64_t size;
  std::uintptr_t stream;
  std::uint64_t reserved;
  std::uint64_t limit;
  std::uint32_t thread;
  std::int32_t device;
  Action action;
};

constexpr std::size_t kRecords = 8192;      // ~512 KiB of events between two writes
constexpr std::size_t kTextBytes = 64 * 1024;
constexpr std::size_t kLongestRow = 256;    // 9 numbers of at most 20 digits, an action, a mode, commas
constexpr std::size_t kModeDevices = 256;   // devices whose first row carries the Mode column
using trace_format::kHeader;
constexpr std::uint64_t kUnknown = static_cast<std::uint64_t>(-1);
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGINT, SIGHUP, SIGQUIT};

std::uint32_t this_thread_id() noexcept {
  static thread_local std::uint32_t id __attribute__((tls_model("initial-exec"))) = 0;
  if (id == 0) id = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return id;
}

std::uint64_t now_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(now.tv_nsec);
}

// Allocation-free text building, safe in a signal handler.
class RowWriter {
 public:
  explicit RowWriter(char* out) : out_(out) {}
  void text(std::string_view s) noexcept {
    if (s.empty()) return;  // an empty view may hold no pointer at all, which memcpy must not get
    std::memcpy(out_ + n_, s.data(), s.size());
    n_ += s.size();
  }
  void ch(char c) noexcept { out_[n_++] = c; }
  void decimal(std::uint64_t value, int min_digits = 1) noexcept {
    char digits[24];
    int count = 0;
    do {
      digits[count++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0 || count < min_digits);
    while (count > 0) out_[n_++] = digits[--count];
  }
  void hex(std::uint64_t value) noexcept {
    text("0x");
    char digits[20];
    int count = 0;
    do {
      digits[count++] = "0123456789abcdef"[value & 0xf];
      value >>= 4;
    } while (value != 0);
    while (count > 0) out_[n_++] = digits[--count];
  }
  std::size_t size() const noexcept { return n_; }

 private:
  char* out_;
  std::size_t n_ = 0;
};

// One row; `mode` is the Mode column's value (empty on every row but a device's first).
std::size_t format_row(const Record& r, std::string_view mode, char* out) noexcept {
  RowWriter row(out);
  row.decimal(r.thread);
  row.ch(',');
  row.decimal(r.time_ns / 1'000'000'000u);
  row.ch('.');
  row.decimal((r.time_ns % 1'000'000'000u) / 1000u, 6);
  row.ch(',');
  row.text(r.action == Action::allocate ? trace_format::kAllocate
           : r.action == Action::free    ? trace_format::kFree
                                         : trace_format::kAllocateFailure);
  row.ch(',');
  row.hex(r.pointer);
  row.ch(',');
  row.decimal(r.size);
  row.ch(',');
  row.decimal(r.stream);
  row.ch(',');
  row.decimal(static_cast<std::uint64_t>(static_cast<std::uint32_t>(r.device)));
  row.ch(',');
  if (r.reserved != kUnknown) row.decimal(r.reserved);
  row.ch(',');
  row.decimal(r.limit);
  row.ch(',');
  row.text(mode);
  row.ch('\n');
  return row.size();
}

}  // namespace

// Invariants: records_[0, count_) are the events not yet written, in the order they happened
// (appended under ProcessLock::trace, time read under it); sequence_ counts every event appended since the
// trace began, so the record of ticket t is records_[t - 1 - written_] while t > written_; sizes_
// holds the size of every traced block not yet freed. fd_ is -1 once writing failed (said once, the
// file cut back to its last whole row).
class TraceLog {
 public:
  TraceLog(int fd, std::string pattern, const std::string& path, std::string_view mode)
      : fd_(fd),
        pattern_(std::move(pattern)),
        mode_(mode),
        failure_prefix_("gpumem: [error] GPUMEM_TRACE: cannot write to \"" + path + "\" (") {}

  void append(Action action, const TraceEvent& e) noexcept {
    const auto lock = lock_fork_safely(ProcessLock::trace);
    append_locked(action, e.pointer, e.size, e);
    if (action == Action::allocate) {
      try {
        sizes_[e.pointer] = e.size;
      } catch (...) {  // no host memory: its free will be missing from the trace
      }
    }
  }

  std::uint64_t free(std::uintptr_t pointer, const TraceEvent& e) noexcept {
    const auto lock = lock_fork_safely(ProcessLock::trace);
    const auto found = sizes_.find(pointer);
    if (found == sizes_.end()) return 0;
    const std::size_t size = found->second;
    sizes_.erase(found);
    append_locked(Action::free, pointer, size, e);
    return sequence_;
  }

  void withdraw(std::uint64_t ticket) noexcept {
    const auto lock = lock_fork_safely(ProcessLock::trace);
    if (ticket <= written_ || ticket > sequence_) return;  // already written: it stays
    Record& record = records_[ticket - 1 - written_];
    record.action = Action::withdrawn;
    try {
      sizes_[record.pointer] = record.size;
    } catch (...) {
    }
  }

  void flush() noexcept {
    const auto lock = lock_fork_safely(ProcessLock::trace);
    flush_locked();
  }

  // From a signal handler: waits a little for another thread to finish its append, never forever.
  void flush_from_signal() noexcept {
    for (int attempt = 0; attempt < 200; ++attempt) {
      if (process_mutex(ProcessLock::trace).try_lock()) {
        flush_locked();
        process_mutex(ProcessLock::trace).unlock();
        return;
      }
      timespec pause{0, 500'000};
      ::nanosleep(&pause, nullptr);
    }
  }

  // In a forked child (its only thread): the parent's events are the parent's to write.
  void reset_in_child() noexcept {
    count_ = 0;
    written_ = sequence_;
    sizes_.clear();
  }
  int fd() const noexcept { return fd_; }
  void close_in_child() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  const std::string& pattern() const noexcept { return pattern_; }

 private:
  void append_locked(Action action, std::uintptr_t pointer, std::size_t size, const TraceEvent& e) noexcept {
    if (fd_ < 0) return;
    if (count_ == kRecords) flush_locked();
    records_[count_++] = Record{now_ns(),
                                pointer,
                                size,
                                e.stream,
                                e.reserved == static_cast<std::size_t>(-1) ? kUnknown : e.reserved,
                                e.limit,
                                this_thread_id(),
                                e.device,
                                action};
    ++sequence_;
  }

  void flush_locked() noexcept {
    if (fd_ < 0) {
      count_ = 0;
      written_ = sequence_;
      return;
    }
    bool ok = true;
    if (!header_written_) {
      ok = write_rows(kHeader.data(), kHeader.size());
      header_written_ = true;
    }
    std::size_t used = 0;
    for (std::size_t i = 0; i < count_ && ok; ++i) {
      if (records_[i].action == Action::withdrawn) continue;
      if (used + kLongestRow > kTextBytes) {
        ok = write_rows(text_, used);
        used = 0;
      }
      const auto device = static_cast<std::size_t>(static_cast<std::uint32_t>(records_[i].device));
      std::string_view mode;
      if (device < kModeDevices && !mode_said_[device]) {
        mode_said_[device] = true;
        mode = mode_;
      }
      used += format_row(records_[i], mode, text_ + used);
    }
    if (ok && used > 0) ok = write_rows(text_, used);
    count_ = 0;
    written_ = sequence_;
  }

  // Appends whole rows (or the header). When the write fails (a full disk, the file-size limit) the
  // file is cut back to its last whole row, the failure is said once on stderr and the trace stops:
  // what it holds stays readable. Allocation-free, as a fatal signal's flush needs.
  bool write_rows(const char* text, std::size_t size) noexcept {
    std::size_t written = 0;
    if (write_output(fd_, text, size, &written)) {
      whole_bytes_ += size;
      return true;
    }
    const int error = errno;
    std::size_t whole = written;
    while (whole > 0 && text[whole - 1] != '\n') --whole;
    whole_bytes_ += whole;
    [[maybe_unused]] const int cut = ::ftruncate(fd_, static_cast<off_t>(whole_bytes_));  // a device: no length
    ::close(fd_);
    fd_ = -1;
    say_write_failed(error);
    return false;
  }

  // One line on stderr, built in text_ (no longer needed: the trace has stopped).
  void say_write_failed(int error) noexcept {
    RowWriter line(text_);
    const char* reason = strerrordesc_np(error);
    const std::string_view middle = "; the trace stops here, after its last whole row\n";
    if (failure_prefix_.size() + 64 + middle.size() > kTextBytes) return;
    line.text(failure_prefix_);
    line.text(reason != nullptr ? std::string_view(reason).substr(0, 60) : std::string_view("error"));
    line.ch(')');
    line.text(middle);
    write_output(STDERR_FILENO, text_, line.size());
  }

  int fd_;
  const std::string pattern_;
  const std::string_view mode_;  // trace_format's words, static
  std::array<bool, kModeDevices> mode_said_{};
  const std::string failure_prefix_;  // of the line that says writing failed, made while allocating is safe
  bool header_written_ = false;
  std::size_t whole_bytes_ = 0;  // the file's length, up to the end of its last whole row
  std::size_t count_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t written_ = 0;  // events up to this sequence number are written (or dropped)
  std::unordered_map<std::uintptr_t, std::size_t> sizes_;
  std::array<Record, kRecords> records_{};
  char text_[kTextBytes]{};
};

namespace {

// 0: not looked at yet; 1: looked at, no trace; 2: g_trace is set.
std::atomic<int> g_state{0};
std::atomic<TraceLog*> g_trace{nullptr};
struct sigaction g_previous[sizeof(kFatalSignals) / sizeof(kFatalSignals[0])];
bool g_handlers_installed = false;

void on_fatal_signal(int signal_number) {
  const int saved_errno = errno;
  if (TraceLog* trace = g_trace.load(std::memory_order_acquire)) trace->flush_from_signal();
  // Hand the signal to whoever had it before (the default action: terminate, or dump core).
  for (std::size_t i = 0; i < std::size(kFatalSignals); ++i) {
    if (kFatalSignals[i] == signal_number) ::sigaction(signal_number, &g_previous[i], nullptr);
  }
  errno = saved_errno;
  ::raise(signal_number);
}

void install_signal_handlers() noexcept {
  if (g_handlers_installed) return;
  g_handlers_installed = true;
  for (std::size_t i = 0; i < std::size(kFatalSignals); ++i) {
    struct sigaction current {};
    if (::sigaction(kFatalSignals[i], nullptr, &current) != 0) continue;
    g_previous[i] = current;
    // Ignored signals stay ignored, and a program's own handler for a terminating signal it means to
    // survive (SIGINT in an interpreter, say) is left alone: only default actions are wrapped.
    if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO) != 0) continue;
    struct sigaction ours {};
    ours.sa_handler = &on_fatal_signal;
    sigemptyset(&ours.sa_mask);
    ours.sa_flags = SA_RESTART | SA_ONSTACK;
    ::sigaction(kFatalSignals[i], &ours, nullptr);
  }
}

void after_fork_in_child() noexcept {
  TraceLog* trace = g_trace.load(std::memory_order_acquire);
  if (trace == nullptr) return;
  trace->reset_in_child();
  trace->close_in_child();
  // A path with %p names the child's own file, opened at its first event; any other path is the
  // parent's file, which the child must not overwrite: the child then writes no trace.
  g_trace.store(nullptr, std::memory_order_release);
  g_state.store(path_is_per_process(trace->pattern()) ? 0 : 1, std::memory_order_release);
}

TraceLog* create() noexcept {
  const PolicyResult& result = process_policy();
  if (!result.policy || result.policy->trace_file.empty()) return nullptr;
  try {
    const std::string& pattern = result.policy->trace_file;
    const std::string path = expand_path(pattern, this_process_fields());
    std::string why;
    const int fd = open_output_file(path, why);
    if (fd < 0) {
      log::at(LogLevel::error, "GPUMEM_TRACE: {}; no trace is written", why);
      return nullptr;
    }
    const Policy& policy = *result.policy;
    const std::string_view mode = policy.mode != Mode::bfc ? to_string(policy.mode)
                                  : policy.preallocate     ? trace_format::kModePreallocated
                                                           : trace_format::kModeGrowth;
    auto* trace = new (std::nothrow) TraceLog(fd, pattern, path, mode);  // leaked: written until the very end
    if (trace == nullptr) {
      ::close(fd);
      return nullptr;
    }
    reset_in_forked_child(&after_fork_in_child);
    install_signal_handlers();
    log::at(LogLevel::debug, "tracing allocations to \"{}\"", path);
    return trace;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

TraceLog* trace_log() noexcept {
  const int state = g_state.load(std::memory_order_acquire);
  if (state == 2) return g_trace.load(std::memory_order_acquire);
  if (state == 1) return nullptr;
  const auto lock = lock_fork_safely(ProcessLock::trace_start);
  if (g_state.load(std::memory_order_acquire) == 0) {
    TraceLog* trace = create();
    g_trace.store(trace, std::memory_order_release);
    g_state.store(trace != nullptr ? 2 : 1, std::memory_order_release);
  }
  return g_trace.load(std::memory_order_acquire);
}

void trace_allocate(TraceLog& log, const TraceEvent& event) noexcept { log.append(Action::allocate, event); }

void trace_refusal(TraceLog& log, const TraceEvent& event) noexcept { log.append(Action::refusal, event); }

std::uint64_t trace_free(TraceLog& log, std::uintptr_t pointer, std::uintptr_t stream, int device,
                         std::size_t reserved, std::size_t limit) noexcept {
  return log.free(pointer, TraceEvent{pointer, 0, stream, device, reserved, limit});
}

void trace_free_failed(TraceLog& log, std::uint64_t ticket) noexcept {
  if (ticket != 0) log.withdraw(ticket);
}

void flush_trace() noexcept {
  if (TraceLog* trace = g_trace.load(std::memory_order_acquire)) trace->flush();
}

}  // namespace gpumem::shim::observe
