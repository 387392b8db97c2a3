// Byte limits per device from the environment: GPUMEM_LIMIT's list form, HAMi's and NVIDIA MPS's.
#include "policy/device_limits.h"

#include <charconv>
#include <cmath>
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
                                    std::string(size_text), false, true, std::nullopt});
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
                                                        std::string(text), false, false, std::nullopt}};
  }
  return parse_device_list(variable, text, parse_size, minimum, why);
}

constexpr std::string_view kHamiVariable = "CUDA_DEVICE_MEMORY_LIMIT";
constexpr std::string_view kHamiExpected =
    "not a memory size as HAMi writes it (digits and an optional k, m or g for KiB, MiB, GiB; plain digits "
    "are bytes; above 0)";
constexpr std::string_view kMpsVariable = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

// A decimal number without sign or exponent ("50", "12.5", ".5"); nullopt for anything else.
std::optional<double> parse_plain_decimal(std::string_view text) {
  if (text.empty() || text == "." || text.find_first_not_of("0123456789.") != std::string_view::npos ||
      text.find('.') != text.rfind('.')) {
    return std::nullopt;
  }
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::size_t DeviceLimitRule::bytes_for(std::size_t total_bytes) const {
  if (!fraction_of_total) return bytes;
  const long double product = static_cast<long double>(*fraction_of_total) * static_cast<long double>(total_bytes);
  if (!(product > 0)) return 0;
  if (product >= static_cast<long double>(total_bytes)) return total_bytes;
  return static_cast<std::size_t>(std::floor(product));
}

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
                                           std::string(*text), true, false, std::nullopt});
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

FrameworkLimitsResult framework_limits_from_environment(const TrimmedLookup& value_of) {
  constexpr std::string_view kCupyVariable = "CUPY_GPU_MEMORY_LIMIT";
  constexpr std::string_view kCupyExpected =
      "not a percentage from 0 to 100 (e.g. 50%) nor a byte count of at least 256 (e.g. 1073741824), or 0";
  FrameworkLimitsResult result;
  const std::optional<std::string_view> text = value_of(kCupyVariable);
  if (!text) return result;
  DeviceLimitRule rule{std::string(kCupyVariable), std::nullopt, 0, std::string(*text), false, false, std::nullopt};
  if (text->back() == '%') {
    // A percentage from 0 to 100, as CuPy's float(text[:-1]) / 100 must be in [0, 1].
    const std::optional<double> percent = parse_plain_decimal(trim_blanks(text->substr(0, text->size() - 1)));
    if (percent && *percent == 0) return result;
    if (!percent || *percent > 100) {
      result.problems.push_back(invalid_variable(kCupyVariable, *text, kCupyExpected));
      return result;
    }
    rule.fraction_of_total = *percent / 100;
  } else {
    const std::optional<std::size_t> bytes = parse_byte_size(*text);
    if (bytes && *bytes == 0) return result;
    if (!bytes || *bytes < kLimitMinimum) {
      result.problems.push_back(invalid_variable(kCupyVariable, *text, kCupyExpected));
      return result;
    }
    rule.bytes = *bytes;
  }
  result.rules.push_back(std::move(rule));
  return result;
}

std::optional<std::vector<DeviceLimitRule>> parse_gpumem_limit_list(std::string_view text, std::size_t minimum,
                                                                    std::string& what_is_wrong) {
  return parse_device_list("GPUMEM_LIMIT", text, &parse_byte_size, minimum, what_is_wrong);
}

}  // namespace gpumem
