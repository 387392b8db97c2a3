// The shim's log: one line per message, prefixed "gpumem: [level]", on stderr or in GPUMEM_LOG_FILE,
// at the level set by GPUMEM_LOG_LEVEL (default notice). A notice (the line said when gpumem takes
// over its first device) carries no level tag: "gpumem: device 0: ...".
//
// Preload-safe: nothing is created during library load; the logger (spdlog, compiled in header-only
// and hidden) is created at the first message that passes the level. A message logged while this
// thread is already inside the logger (e.g. a dlsym hook reached from the logger's own set-up) is
// dropped instead of recursing. Never throws; formatting errors are swallowed.
//
// Use: log::at(LogLevel::debug, "cuGetProcAddress({}) -> hook", name); the arguments are only formatted when the
// level is enabled.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/policy.h"

namespace gpumem::shim::log {

// True when a message at `level` would be written. Cheap (one atomic load after the first call).
bool enabled(LogLevel level) noexcept;

// Writes one message (without prefix or newline) at `level`, if enabled.
void write(LogLevel level, std::string_view message) noexcept;

template <typename... Args>
void at(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!enabled(level)) return;
  try {
    write(level, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {  // out of memory while formatting: drop the message, never the program
  }
}

// Messages built while a lock is held and written once it is released, so that no thread waits for
// the log's file while others wait for that lock.
class Pending {
 public:
  template <typename... Args>
  void add(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
    if (!enabled(level)) return;
    try {
      messages_.emplace_back(level, fmt::format(format, std::forward<Args>(args)...));
    } catch (...) {  // out of memory: drop the message
    }
  }
  // Call with no lock held.
  void flush() noexcept {
    for (const auto& [level, message] : messages_) write(level, message);
    messages_.clear();
  }

 private:
  std::vector<std::pair<LogLevel, std::string>> messages_;
};

}  // namespace gpumem::shim::log
