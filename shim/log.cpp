#include "log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "fork_safe_lock.h"
#include "policy/process_policy.h"

namespace gpumem::shim::log {
namespace {

constexpr int kLevelUnknown = -1;

// Invariant: g_level is kLevelUnknown until the policy has been read, then the LogLevel as int.
// g_logger is created once under g_mutex and never destroyed (messages may come from static
// destructors of other libraries after ours ran); every write holds g_mutex, so the sinks are the
// single-threaded spdlog variants.
std::atomic<int> g_level{kLevelUnknown};
std::mutex g_mutex;
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
  // A bad environment leaves the shim inert but its warnings and errors still reach stderr.
  const LogLevel level = result.policy ? result.policy->log_level : LogLevel::warn;
  const int value = static_cast<int>(level);
  g_level.store(value, std::memory_order_release);
  return value;
}

std::shared_ptr<spdlog::sinks::sink> make_sink(const std::string& file) {
  if (!file.empty()) {
    try {
      return std::make_shared<spdlog::sinks::basic_file_sink_st>(file, /*truncate=*/false);
    } catch (const std::exception& e) {
      auto fallback = std::make_shared<spdlog::sinks::stderr_sink_st>();
      fallback->set_pattern("%v");
      fallback->log(spdlog::details::log_msg(
          "", spdlog::level::err,
          fmt::format("gpumem: [error] cannot open GPUMEM_LOG_FILE=\"{}\" ({}); logging to stderr",
                      file, e.what())));
      return fallback;
    }
  }
  return std::make_shared<spdlog::sinks::stderr_sink_st>();
}

// Called with g_mutex held.
spdlog::logger* create_logger() {
  const PolicyResult& result = process_policy();
  const std::string file = result.policy ? result.policy->log_file : std::string();
  auto* logger = new spdlog::logger("gpumem", make_sink(file));  // leaked on purpose
  logger->set_pattern("gpumem: [%l] %v");
  logger->set_level(spdlog::level::trace);  // filtering happens in enabled()
  logger->flush_on(spdlog::level::trace);   // messages are rare; never lose one at exit or crash
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
    const auto lock = lock_fork_safely<g_mutex>();
    if (g_logger == nullptr) g_logger = create_logger();
    g_logger->log(to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
  } catch (...) {  // a logging failure must never reach the program
  }
  t_in_logger = false;
}

}  // namespace gpumem::shim::log
