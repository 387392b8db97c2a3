// The process's policy, read once from its environment.
#include "policy/process_policy.h"

#include <unistd.h>

#include <cstdlib>
#include <new>
#include <string>

namespace gpumem::shim {
namespace {

std::optional<std::string_view> read_environment(std::string_view name) {
  const std::string key(name);  // getenv needs a terminated string
  const char* value = std::getenv(key.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

// Written straight to stderr with write(2), whatever GPUMEM_LOG_LEVEL and GPUMEM_LOG_FILE say: they
// are themselves part of the environment, and an error in it is said where the user looks first.
void report_invalid_environment(const std::string& error) {
  constexpr std::string_view prefix = "gpumem: ";
  std::string line = error.starts_with(prefix) ? error : std::string(prefix) + error;
  line += '\n';
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
}

const PolicyResult* evaluate() noexcept {
  try {
    // Leaked on purpose: read from hooks that may run during static destruction.
    auto* result = new PolicyResult(policy_from_environment(read_environment));
    for (const PolicyError& error : result->errors) report_invalid_environment(error.line);
    if (!result->refuses() && result->policy->log_level <= LogLevel::warn) {
      // Through stderr directly, as the errors: the logger itself reads this policy.
      for (const std::string& warning : result->policy->warnings) report_invalid_environment(warning);
    }
    return result;
  } catch (...) {
    static const PolicyResult out_of_memory{
        std::nullopt,
        {PolicyError{"", "gpumem: out of memory while reading the environment; the shim is disabled for this process"}},
        false};
    report_invalid_environment(out_of_memory.errors.front().line);
    return &out_of_memory;
  }
}

}  // namespace

const PolicyResult& process_policy() {
  static const PolicyResult* const result = evaluate();
  return *result;
}

bool policy_is_active() {
  const PolicyResult& result = process_policy();
  return result.policy.has_value() && !result.refuses() && result.policy->mode != Mode::off;
}

bool policy_refuses_cuda() { return process_policy().refuses(); }

}  // namespace gpumem::shim
