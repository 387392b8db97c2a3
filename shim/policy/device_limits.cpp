// Byte limits per device from the environment: GPUMEM_LIMIT's list form, HAMi's and NVIDIA MPS's.
#include "policy/device_limits.h"

#include <limits>

#include <fmt/format.h>

#include "policy/policy.h"  // parse_byte_size
#include "policy/value_parsers.h"

namespace gpumem {
namespace {

constexpr std::size_t kLimitMinimum = 256;  // one granule of the arena, as for GPUMEM_LIMIT

using SizeParser = std::optional<std::size_t> (*)(std::string_view);

// "DEVICE=SIZE,DEVICE=SIZE": blanks around each part allowed, each device at most once, each SIZE read
// by `parse_size` and at least `minimum`. nullopt with `why` set when anything is off.
std::optional<std::vector<DeviceLimitRule>> parse_device_list(std::string_view variable, std::string_view text,
                                                              SizeParser parse_size, std::size_t minimum,
                                                              std::string& why) {
  std::vector<DeviceLimitRule> rules;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim_blanks(text.substr(0, comma));
    const std::size_t equals = entry.find('=');
    if (equals == std::string_view::npos) return std::nullopt;
    const std::optional<unsigned> device =
        parse_count(trim_blanks(entry.substr(0, equals)), static_cast<unsigned>(kMaxLimitDevices - 1));
    const std::string_view size_text = trim_blanks(entry.substr(equals + 1));
    const std::optional<std::size_t> bytes = parse_size(size_text);
    if (!device || !bytes || *bytes < minimum) return std::nullopt;
    if (rule_for_device(rules, static_cast<int>(*device)) != nullptr) {
      why = fmt::format("a list that names device {} twice", *device);
      return std::nullopt;
    }
    rules.push_back(DeviceLimitRule{std::string(variable), static_cast<int>(*device), *bytes,
                                    std::string(size_text), false, true});
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return rules;
}

// A list of DEVICE=SIZE, or (`bare_size_allowed`) one size for every device.
std::optional<std::vector<DeviceLimitRule>> parse_limit(std::string_view variable, std::string_view text,
                                                        SizeParser parse_size, std::size_t minimum,
                                                        bool bare_size_allowed, std::string& why) {
  if (bare_size_allowed && text.find('=') == std::string_view::npos) {
    const std::optional<std::size_t> bytes = parse_size(text);
    if (!bytes || *bytes < minimum) return std::nullopt;
    return std::vector<DeviceLimitRule>{DeviceLimitRule{std::string(variable), std::nullopt, *bytes,
                                                        std::string(text), false}};
  }
  return parse_device_list(variable, text, parse_size, minimum, why);
}

constexpr std::string_view kHamiVariable = "CUDA_DEVICE_MEMORY_LIMIT";
constexpr std::string_view kHamiExpected =
    "not a memory size as HAMi writes it (digits and an optional k, m or g for KiB, MiB, GiB; plain digits "
    "are bytes; above 0)";
constexpr std::string_view kMpsVariable = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

}  // namespace

const DeviceLimitRule* rule_for_device(const std::vector<DeviceLimitRule>& rules, int device) {
  const DeviceLimitRule* every_device = nullptr;
  for (const DeviceLimitRule& rule : rules) {
    if (rule.device == device) return &rule;
    if (!rule.device && every_device == nullptr) every_device = &rule;
  }
  return every_device;
}

std::optional<std::size_t> parse_hami_size(std::string_view text) {
  std::size_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k': case 'K': multiplier = std::size_t{1} << 10; break;
      case 'm': case 'M': multiplier = std::size_t{1} << 20; break;
      case 'g': case 'G': multiplier = std::size_t{1} << 30; break;
      default: break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::size_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::size_t>(c - '0');
    if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (value == 0 || value > std::numeric_limits<std::size_t>::max() / multiplier) return std::nullopt;
  return value * multiplier;
}

ClusterLimitsResult cluster_limits_from_environment(const TrimmedLookup& value_of) {
  ClusterLimitsResult result;
  auto reject = [&](std::string_view name, std::string_view value, std::string_view what) {
    result.problems.push_back(invalid_variable(name, value, what));
  };

  // HAMi: CUDA_DEVICE_MEMORY_LIMIT_<i> for device i, else CUDA_DEVICE_MEMORY_LIMIT for every device.
  for (int device = -1; device < kMaxLimitDevices; ++device) {
    const std::string name =
        device < 0 ? std::string(kHamiVariable) : fmt::format("{}_{}", kHamiVariable, device);
    const std::optional<std::string_view> text = value_of(name);
    if (!text) continue;
    const std::optional<std::size_t> bytes = parse_hami_size(*text);
    if (!bytes || *bytes < kLimitMinimum) {
      reject(name, *text, kHamiExpected);
      continue;
    }
    result.hami.push_back(DeviceLimitRule{name, device < 0 ? std::nullopt : std::optional<int>(device), *bytes,
                                           std::string(*text), true});
  }

  // MPS: "0=1G,1=2G" (or one size for every device), in GPUMEM_LIMIT's units.
  if (const std::optional<std::string_view> text = value_of(kMpsVariable)) {
    std::string why;
    const auto rules = parse_limit(kMpsVariable, *text, &parse_byte_size, kLimitMinimum, true, why);
    if (!rules) {
      reject(kMpsVariable, *text,
             why.empty() ? "not a list of DEVICE=SIZE (e.g. 0=1G,1=2G; devices 0 to 63; sizes of at least 256 "
                           "bytes, G = GiB, GB = 10^9)"
                         : why);
    } else {
      result.mps = *rules;
    }
  }
  return result;
}

std::optional<std::vector<DeviceLimitRule>> parse_gpumem_limit_list(std::string_view text, std::size_t minimum,
                                                                    std::string& what_is_wrong) {
  return parse_device_list("GPUMEM_LIMIT", text, &parse_byte_size, minimum, what_is_wrong);
}

}  // namespace gpumem
