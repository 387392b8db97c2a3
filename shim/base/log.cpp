// The gpumem: log: spdlog, header-only, created at the first message.
#include "base/log.h"

#include <spdlog/details/null_mutex.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "base/fork_safe_lock.h"
#include "base/output_file.h"
#include "policy/process_policy.h"

namespace gpumem::shim::log {
namespace {

constexpr int kLevelUnknown = -1;

// Invariant: g_level is kLevelUnknown until the policy has been read, then the LogLevel as int.
// g_logger is created once under ProcessLock::log and never destroyed (messages may come from static
// destructors of other libraries after ours ran); every write holds it, so the sinks are the
// single-threaded spdlog variants.
std::atomic<int> g_level{kLevelUnknown};
spdlog::logger* g_logger = nullptr;

// Initial-exec TLS: no allocation on first access in a thread, so the guard is safe in any hook.
thread_local bool t_in_logger __attribute__((tls_model("initial-exec"))) = false;

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
    case LogLevel::notice:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      break;
  }
  return spdlog::level::off;
}

int resolve_level() {
  const PolicyResult& result = process_policy();
  // Always a policy (a bad variable falls back alone); without one (no host memory), the default.
  const LogLevel level = result.policy ? result.policy->log_level : LogLevel::notice;
  const int value = static_cast<int>(level);
  g_level.store(value, std::memory_order_release);
  return value;
}

// One line straight to stderr, for what the log itself cannot say (its file failed).
void say_on_stderr(const std::string& line) noexcept {
  observe::write_output(STDERR_FILENO, line.data(), line.size());
}

// Lines to a descriptor with write(2): never raising SIGPIPE or SIGXFSZ, never blocking on a FIFO
// (the file was opened by open_output_file, which takes regular files and character devices only).
// When a write to the log file fails (a full disk, a file-size limit, /dev/full) that is said once
// on stderr, and later lines go there.
class DescriptorSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  DescriptorSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t line;
    formatter_->format(message, line);
    if (observe::write_output(fd_, line.data(), line.size()) || fd_ == STDERR_FILENO) return;
    const int error = errno;
    say_on_stderr(fmt::format("gpumem: [error] cannot write to GPUMEM_LOG_FILE=\"{}\" ({}); logging to stderr\n",
                              path_, std::strerror(error)));
    ::close(fd_);
    fd_ = STDERR_FILENO;
    observe::write_output(fd_, line.data(), line.size());
  }
  void flush_() override {}

 private:
  int fd_;
  std::string path_;
};

std::shared_ptr<spdlog::sinks::sink> make_sink(const std::string& file) {
  int fd = STDERR_FILENO;
  if (!file.empty()) {
    std::string why;
    fd = observe::open_output_file(file, why, observe::OpenMode::append);
    if (fd < 0) {
      say_on_stderr(fmt::format("gpumem: [error] GPUMEM_LOG_FILE: {}; logging to stderr\n",
                                why.empty() ? "cannot open \"" + file + "\"" : why));
      fd = STDERR_FILENO;
    }
  }
  return std::make_shared<DescriptorSink>(fd, file);
}

// The tag a message carries after "gpumem: ", as spdlog names the levels; none for a notice (the line
// said when gpumem takes over a device: "gpumem: device 0: ...").
std::string_view tag_of(LogLevel level) {
  switch (level) {
    case LogLevel::trace: return "[trace] ";
    case LogLevel::debug: return "[debug] ";
    case LogLevel::info: return "[info] ";
    case LogLevel::warn: return "[warning] ";
    case LogLevel::error: return "[error] ";
    case LogLevel::notice:
    case LogLevel::off: break;
  }
  return "";
}

// Called with ProcessLock::log held.
spdlog::logger* create_logger() {
  const PolicyResult& result = process_policy();
  const std::string file = result.policy ? result.policy->log_file : std::string();
  auto* logger = new spdlog::logger("gpumem", make_sink(file));  // leaked on purpose
  logger->set_pattern("gpumem: %v");  // the level's tag is the message's (tag_of)
  logger->set_level(spdlog::level::trace);  // filtering happens in enabled()
  logger->flush_on(spdlog::level::trace);   // messages are rare; never lose one at exit or crash
  // The logging library's own errors (a message it could not format) in our words, once.
  logger->set_error_handler([](const std::string& error) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) say_on_stderr("gpumem: [error] a log message was lost: " + error + "\n");
  });
  return logger;
}

}  // namespace

bool enabled(LogLevel level) noexcept {
  int current = g_level.load(std::memory_order_acquire);
  if (current == kLevelUnknown) {
    try {
      current = resolve_level();
    } catch (...) {
      return false;
    }
  }
  const int wanted = static_cast<int>(level);
  return wanted >= current && level != LogLevel::off && current != static_cast<int>(LogLevel::off);
}

void write(LogLevel level, std::string_view message) noexcept {
  if (t_in_logger || !enabled(level)) return;
  t_in_logger = true;
  try {
    const auto lock = lock_fork_safely(ProcessLock::log);
    if (g_logger == nullptr) g_logger = create_logger();
    const std::string line = std::string(tag_of(level)).append(message);
    g_logger->log(to_spdlog(level), spdlog::string_view_t(line.data(), line.size()));
  } catch (...) {  // a logging failure must never reach the program
  }
  t_in_logger = false;
}

}  // namespace gpumem::shim::log
