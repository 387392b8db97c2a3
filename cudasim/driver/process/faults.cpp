#include "faults.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>

namespace cudasim {
namespace {

// The longest entry point name a rule may give (longer than any the driver exports).
constexpr std::size_t kMaxNameLength = 63;

// Trivially destructible, like every object of the driver that outlives main: exit() destroys a
// library's static objects in the reverse order of their construction, interleaved with the
// program's atexit handlers, so when the driver is loaded after a handler was registered (the
// runtime loads it at its first call) that handler runs after the driver's statics are gone, and
// may still call the driver.
struct FaultRule {
  char entry_point[kMaxNameLength + 1] = {};
  std::uint64_t nth = 0;        // the call that fails (1-based)
  bool and_later = false;       // "+": every call from nth on
  CUresult code = CUDA_ERROR_OUT_OF_MEMORY;
  std::atomic<std::uint64_t> calls{0};
};

static_assert(std::is_trivially_destructible_v<FaultRule>);

constexpr std::size_t kMaxRules = 16;
std::array<FaultRule, kMaxRules> g_rules;
std::size_t g_rule_count = 0;
std::atomic<bool> g_any{false};
std::once_flag g_parsed;
std::atomic<std::uint64_t> g_injected{0};

bool parse_rule(std::string_view text, FaultRule& rule) {
  const std::size_t at = text.find('@');
  if (at == std::string_view::npos || at == 0 || at > kMaxNameLength) return false;
  text.copy(rule.entry_point, at);
  rule.entry_point[at] = '\0';
  std::string_view rest = text.substr(at + 1);
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return false;
  rule.nth = std::strtoull(std::string(rest.substr(0, digits)).c_str(), nullptr, 10);
  if (rule.nth == 0) return false;
  rest.remove_prefix(digits);
  if (!rest.empty() && rest.front() == '+') {
    rule.and_later = true;
    rest.remove_prefix(1);
  }
  if (rest.empty()) return true;
  if (rest.front() != '=' || rest.size() < 2 || rest.size() > 6) return false;
  rest.remove_prefix(1);
  for (char c : rest) {
    if (c < '0' || c > '9') return false;
  }
  rule.code = static_cast<CUresult>(std::atoi(std::string(rest).c_str()));
  return rule.code != CUDA_SUCCESS;
}

void parse_rules() {
  const char* value = std::getenv("CUDASIM_FAULTS");
  if (value == nullptr || *value == '\0') return;
  std::string_view text(value);
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    if (g_rule_count == kMaxRules || !parse_rule(item, g_rules[g_rule_count])) {
      std::fprintf(stderr,
                   "cudasim: CUDASIM_FAULTS=\"%s\" is malformed: expected up to 16 of NAME@N[+][=CODE], "
                   "comma-separated (N from 1, CODE a CUresult number); no fault is injected\n",
                   value);
      g_rule_count = 0;
      return;
    }
    ++g_rule_count;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  g_any.store(g_rule_count > 0, std::memory_order_release);
}

}  // namespace

CUresult injected_fault(const char* entry_point) noexcept {
  static const bool parsed = (std::call_once(g_parsed, parse_rules), true);
  (void)parsed;
  if (!g_any.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  for (std::size_t i = 0; i < g_rule_count; ++i) {
    FaultRule& rule = g_rules[i];
    if (std::strcmp(rule.entry_point, entry_point) != 0) continue;
    const std::uint64_t call = rule.calls.fetch_add(1, std::memory_order_relaxed) + 1;
    if (call == rule.nth || (rule.and_later && call > rule.nth)) {
      g_injected.fetch_add(1, std::memory_order_relaxed);
      return rule.code;
    }
  }
  return CUDA_SUCCESS;
}

std::uint64_t faults_injected() noexcept { return g_injected.load(std::memory_order_relaxed); }

}  // namespace cudasim
