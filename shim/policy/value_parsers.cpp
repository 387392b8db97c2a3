// The policy's value parsers: sizes, fractions, booleans, levels.
#include "policy/value_parsers.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "policy/policy.h"

namespace gpumem {

namespace {

// Wide enough for (20 significant digits) x (the largest unit, 2^50) < 2^117 without overflow.
__extension__ typedef unsigned __int128 WideUnsigned;

constexpr int kMaxSignificantDigits = 20;
constexpr std::size_t kMaxQuotedBytes = 64;

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

struct ByteUnit {
  std::string_view suffix;  // compared without regard to case
  std::uint64_t multiplier;
};

constexpr std::uint64_t kKi = std::uint64_t{1} << 10;
constexpr std::uint64_t kKilo = 1000;

// Bare K/M/G/T/P and the IEC forms are binary (as in most memory tools); KB/MB/GB/TB/PB are SI.
constexpr std::array<ByteUnit, 22> kByteUnits{{
    {"", 1},
    {"b", 1},
    {"k", kKi},
    {"ki", kKi},
    {"kib", kKi},
    {"kb", kKilo},
    {"m", kKi * kKi},
    {"mi", kKi * kKi},
    {"mib", kKi * kKi},
    {"mb", kKilo * kKilo},
    {"g", kKi * kKi * kKi},
    {"gi", kKi * kKi * kKi},
    {"gib", kKi * kKi * kKi},
    {"gb", kKilo * kKilo * kKilo},
    {"t", kKi * kKi * kKi * kKi},
    {"ti", kKi * kKi * kKi * kKi},
    {"tib", kKi * kKi * kKi * kKi},
    {"tb", kKilo * kKilo * kKilo * kKilo},
    {"p", kKi * kKi * kKi * kKi * kKi},
    {"pi", kKi * kKi * kKi * kKi * kKi},
    {"pib", kKi * kKi * kKi * kKi * kKi},
    {"pb", kKilo * kKilo * kKilo * kKilo * kKilo},
}};

std::optional<std::uint64_t> unit_multiplier(std::string_view suffix) {
  for (const ByteUnit& unit : kByteUnits) {
    if (equals_ignoring_case(unit.suffix, suffix)) return unit.multiplier;
  }
  return std::nullopt;
}

// The decimal number at the start of a byte size, as mantissa x 10^exponent, exactly.
struct DecimalNumber {
  WideUnsigned mantissa = 0;
  std::int64_t exponent = 0;
  int significant_digits = 0;

  // Appends one digit; false when the number would have more significant digits than we keep.
  bool append_digit(char digit) {
    if (mantissa == 0 && digit == '0') return true;  // leading zeros carry no information
    if (significant_digits == kMaxSignificantDigits) return false;
    mantissa = mantissa * 10 + static_cast<unsigned>(digit - '0');
    ++significant_digits;
    return true;
  }
};

// Scans "DIGITS[.DIGITS][(e|E)[+|-]DIGITS]" from the start of `text`; advances `pos` past it.
std::optional<DecimalNumber> scan_decimal(std::string_view text, std::size_t& pos) {
  DecimalNumber number;
  const std::size_t integer_start = pos;
  while (pos < text.size() && is_digit(text[pos])) {
    if (!number.append_digit(text[pos])) return std::nullopt;
    ++pos;
  }
  if (pos == integer_start) return std::nullopt;

  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const std::size_t fraction_start = pos;
    while (pos < text.size() && is_digit(text[pos])) ++pos;
    if (pos == fraction_start) return std::nullopt;
    // Trailing zeros of the fraction change nothing; dropping them keeps "1.50000000000000000000000"
    // within the significant-digit budget.
    std::size_t fraction_end = pos;
    while (fraction_end > fraction_start && text[fraction_end - 1] == '0') --fraction_end;
    for (std::size_t i = fraction_start; i < fraction_end; ++i) {
      if (!number.append_digit(text[i])) return std::nullopt;
      --number.exponent;
    }
  }

  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    ++pos;
    bool negative = false;
    if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) negative = text[pos++] == '-';
    const std::size_t exponent_start = pos;
    std::int64_t exponent = 0;
    constexpr std::int64_t kExponentCap = 100000;  // far beyond any representable size either way
    while (pos < text.size() && is_digit(text[pos])) {
      exponent = std::min(kExponentCap, exponent * 10 + (text[pos] - '0'));
      ++pos;
    }
    if (pos == exponent_start) return std::nullopt;
    number.exponent += negative ? -exponent : exponent;
  }
  return number;
}

}  // namespace

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  }
  return true;
}

std::optional<bool> parse_boolean(std::string_view text) {
  for (std::string_view yes : {"1", "true", "yes", "on"}) {
    if (equals_ignoring_case(text, yes)) return true;
  }
  for (std::string_view no : {"0", "false", "no", "off"}) {
    if (equals_ignoring_case(text, no)) return false;
  }
  return std::nullopt;
}

std::optional<double> parse_fraction(std::string_view text) {
  double value = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (error != std::errc{} || stop != end || text.empty()) return std::nullopt;
  if (!std::isfinite(value) || !(value > 0.0) || value > 1.0) return std::nullopt;
  return value;
}

std::optional<std::size_t> parse_byte_size(std::string_view text) {
  std::size_t pos = 0;
  const std::optional<DecimalNumber> number = scan_decimal(text, pos);
  if (!number) return std::nullopt;
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;  // "10 GiB"
  const std::optional<std::uint64_t> multiplier = unit_multiplier(text.substr(pos));
  if (!multiplier) return std::nullopt;
  if (number->mantissa == 0) return 0;

  constexpr WideUnsigned kMax = std::numeric_limits<std::size_t>::max();
  WideUnsigned value = number->mantissa * *multiplier;
  if (number->exponent >= 0) {
    for (std::int64_t i = 0; i < number->exponent; ++i) {
      if (value > kMax) return std::nullopt;
      value *= 10;
    }
  } else {
    // 10^38 is the largest power of ten the wide type holds; value < 2^117 < 10^36, so any
    // larger divisor leaves nothing.
    if (number->exponent < -38) return 0;
    WideUnsigned divisor = 1;
    for (std::int64_t i = 0; i < -number->exponent; ++i) divisor *= 10;
    value /= divisor;  // whole bytes: a fractional byte is dropped
  }
  if (value > kMax) return std::nullopt;
  return static_cast<std::size_t>(value);
}

std::optional<unsigned> parse_count(std::string_view text, unsigned max) {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    if (!is_digit(c)) return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > max) return std::nullopt;
  }
  return static_cast<unsigned>(value);
}

VariableProblem invalid_variable(std::string_view name, std::string_view value, std::string_view what_is_wrong,
                                 std::string fallback) {
  return VariableProblem{std::string(name), fmt::format("{}={} is {}", name, quote_value(value), what_is_wrong),
                         std::move(fallback)};
}

std::string quote_value(std::string_view text) {
  std::string quoted = "\"";
  const std::size_t shown = std::min(text.size(), kMaxQuotedBytes);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '"' || byte == '\\') {
      quoted += '\\';
      quoted += static_cast<char>(byte);
    } else if (byte >= 0x20 && byte < 0x7f) {
      quoted += static_cast<char>(byte);
    } else {
      quoted += fmt::format("\\x{:02x}", byte);
    }
  }
  if (shown < text.size()) quoted += "...";
  quoted += '"';
  return quoted;
}

std::string format_byte_size(std::size_t bytes) {
  static constexpr std::array<std::string_view, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  while (bytes != 0 && bytes % 1024 == 0 && unit + 1 < kUnits.size()) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{}{}", bytes, kUnits[unit]);
}

std::string human_byte_size(std::size_t bytes) {
  static constexpr std::array<std::string_view, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  const double tenths = std::round(value * 10) / 10;
  if (tenths == std::floor(tenths)) return fmt::format("{:.0f} {}", tenths, kUnits[unit]);
  return fmt::format("{:.1f} {}", tenths, kUnits[unit]);
}

}  // namespace gpumem
