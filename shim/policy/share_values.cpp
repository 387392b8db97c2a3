// The sharing variables' value parsers: weights in thousandths and durations in milliseconds.
#include "policy/share_values.h"

#include "policy/value_parsers.h"

namespace gpumem {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// "DIGITS[.DIGITS]" scaled by 10^decimals: the integer part and at most `decimals` fraction digits
// (more are dropped when `drop_excess`, else refused); advances `pos`. Refuses values above `max`.
std::optional<std::uint64_t> scan_scaled(std::string_view text, std::size_t& pos, int decimals, bool drop_excess,
                                         std::uint64_t max) {
  std::uint64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  std::uint64_t whole = 0;
  const std::size_t start = pos;
  while (pos < text.size() && is_digit(text[pos])) {
    whole = whole * 10 + static_cast<std::uint64_t>(text[pos] - '0');
    if (whole > max) return std::nullopt;  // also keeps the products below from overflowing
    ++pos;
  }
  if (pos == start) return std::nullopt;
  std::uint64_t fraction = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const std::size_t fraction_start = pos;
    std::uint64_t place = scale;
    while (pos < text.size() && is_digit(text[pos])) {
      place /= 10;
      if (place == 0) {
        if (!drop_excess && text[pos] != '0') return std::nullopt;
      } else {
        fraction += place * static_cast<std::uint64_t>(text[pos] - '0');
      }
      ++pos;
    }
    if (pos == fraction_start) return std::nullopt;
  }
  const std::uint64_t value = whole * scale + fraction;
  if (value > max * scale) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::uint32_t> parse_share_weight_milli(std::string_view text) {
  std::size_t pos = 0;
  const auto milli = scan_scaled(text, pos, 3, /*drop_excess=*/false, kMaxShareWeightMilli / 1000);
  if (!milli || pos != text.size() || *milli == 0) return std::nullopt;
  return static_cast<std::uint32_t>(*milli);
}

std::optional<std::uint64_t> parse_duration_ms(std::string_view text) {
  if (text == "0") return 0;
  std::size_t pos = 0;
  const auto micro = scan_scaled(text, pos, 6, /*drop_excess=*/true, kMaxShareWaitMs);
  if (!micro) return std::nullopt;
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  const std::string_view unit = text.substr(pos);
  std::uint64_t ms = 0;
  if (equals_ignoring_case(unit, "ms")) {
    ms = *micro / 1000000;
  } else if (equals_ignoring_case(unit, "s")) {
    ms = *micro / 1000;
  } else {
    return std::nullopt;
  }
  if (ms > kMaxShareWaitMs) return std::nullopt;
  return ms;
}

}  // namespace gpumem
