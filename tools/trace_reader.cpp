// The trace reader: RMM's replay-log CSV and gpumem's GPUMEM_TRACE.
#include "trace_reader.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include <fmt/format.h>

#include "base/trace_format.h"
#include "policy/value_parsers.h"

namespace gpumem::replay {
namespace {

using namespace trace_format;
constexpr std::string_view kRequiredList = kRequiredHeader;
constexpr std::size_t kAbsent = std::numeric_limits<std::size_t>::max();

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (const char c : text) {
    if (!is_digit(c)) return false;
  }
  return true;
}

// Unsigned decimal, digits only (no sign, no blanks inside).
template <typename Unsigned>
std::optional<Unsigned> parse_decimal(std::string_view text) {
  if (!all_digits(text)) return std::nullopt;
  Unsigned value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 10);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Hex digits, with or without a 0x/0X prefix.
std::optional<std::uintptr_t> parse_hex(std::string_view text) {
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  if (text.empty()) return std::nullopt;
  for (const char c : text) {
    const bool hex = is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return std::nullopt;
  }
  std::uintptr_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Decimal, or hex when written with 0x.
std::optional<std::uintptr_t> parse_decimal_or_hex(std::string_view text) {
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) return parse_hex(text);
  return parse_decimal<std::uintptr_t>(text);
}

// "123" or "123.456" (digits on both sides of the point, or a trailing point): seconds.
std::optional<double> parse_seconds(std::string_view text) {
  const std::size_t point = text.find('.');
  const std::string_view whole = text.substr(0, point);
  if (!all_digits(whole)) return std::nullopt;
  if (point != std::string_view::npos) {
    const std::string_view fraction = text.substr(point + 1);
    if (!fraction.empty() && !all_digits(fraction)) return std::nullopt;
  }
  double value = 0.0;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// Seconds since the epoch with a fraction, or RMM's time of day HH:MM:SS[.ffffff].
std::optional<double> parse_time(std::string_view text) {
  if (text.find(':') == std::string_view::npos) return parse_seconds(text);
  const std::size_t first = text.find(':');
  const std::size_t second = text.find(':', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const std::string_view hours_text = text.substr(0, first);
  const std::string_view minutes_text = text.substr(first + 1, second - first - 1);
  const std::string_view seconds_text = text.substr(second + 1);
  if (hours_text.size() > 2 || minutes_text.size() != 2) return std::nullopt;
  if (seconds_text.size() < 2 || !is_digit(seconds_text[0]) || !is_digit(seconds_text[1]) ||
      (seconds_text.size() > 2 && seconds_text[2] != '.')) {
    return std::nullopt;
  }
  const auto hours = parse_decimal<unsigned>(hours_text);
  const auto minutes = parse_decimal<unsigned>(minutes_text);
  const auto seconds = parse_seconds(seconds_text);
  if (!hours || !minutes || !seconds || *hours > 23 || *minutes > 59 || *seconds >= 61.0) return std::nullopt;
  return *hours * 3600.0 + *minutes * 60.0 + *seconds;
}

std::optional<TraceAction> parse_action(std::string_view text) {
  if (equals_ignoring_case(text, kAllocate)) return TraceAction::allocate;
  if (equals_ignoring_case(text, kFree) || equals_ignoring_case(text, "deallocate")) return TraceAction::free;
  if (equals_ignoring_case(text, kAllocateFailure)) return TraceAction::allocate_failure;
  return std::nullopt;
}

// Splits one line at commas; every field is trimmed of blanks.
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(trim_blanks(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

std::string field_error(std::size_t line, Column column, std::string_view expected, std::string_view got) {
  return fmt::format("line {}: column {}: expected {}, got {}", line, kColumnNames[column], expected,
                     quote_value(got));
}

// Column positions in the header, kAbsent for a missing optional one; or an error.
struct Header {
  std::array<std::size_t, kColumns> position{};
  std::size_t fields = 0;
};

std::optional<Header> parse_header(std::string_view line, std::size_t line_number, std::string& error) {
  Header header;
  header.position.fill(kAbsent);
  const std::vector<std::string_view> names = split_fields(line);
  header.fields = names.size();
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t column = 0; column < kColumns; ++column) {
      if (!equals_ignoring_case(names[i], kColumnNames[column])) continue;
      if (header.position[column] != kAbsent) {
        error = fmt::format("line {}: the header names column {} twice", line_number, kColumnNames[column]);
        return std::nullopt;
      }
      header.position[column] = i;
    }
  }
  for (std::size_t column = 0; column < kRequiredColumns; ++column) {
    if (header.position[column] == kAbsent) {
      error = fmt::format("line {}: the header lacks column {} (expected a header naming at least {}, got {})",
                          line_number, kColumnNames[column], kRequiredList, quote_value(line));
      return std::nullopt;
    }
  }
  return header;
}

std::optional<TraceRecord> parse_row(const Header& header, std::string_view line, std::size_t line_number,
                                     std::string& error) {
  const std::vector<std::string_view> fields = split_fields(line);
  if (fields.size() < header.fields) {
    // Name the column of ours, among those the row does not reach, that comes first in the header.
    std::size_t missing = kAbsent;
    for (std::size_t column = 0; column < kColumns; ++column) {
      const std::size_t position = header.position[column];
      if (position == kAbsent || position < fields.size()) continue;
      if (missing == kAbsent || position < header.position[missing]) missing = column;
    }
    if (missing == kAbsent) {
      error = fmt::format("line {}: expected {} comma-separated fields as in the header, got {}", line_number,
                          header.fields, fields.size());
    } else {
      error = fmt::format("line {}: column {}: missing (expected {} comma-separated fields as in the header, got {})",
                          line_number, kColumnNames[missing], header.fields, fields.size());
    }
    return std::nullopt;
  }
  if (fields.size() > header.fields) {
    error = fmt::format("line {}: expected {} comma-separated fields as in the header, got {}", line_number,
                        header.fields, fields.size());
    return std::nullopt;
  }
  const auto field = [&](Column column) { return fields[header.position[column]]; };

  TraceRecord record;
  record.line = line_number;

  // Parses `column` into `out`; on failure `error` says what was expected.
  const auto read = [&](Column column, auto parse, std::string_view expected, auto& out) {
    const auto value = parse(field(column));
    if (!value) {
      error = field_error(line_number, column, expected, field(column));
      return false;
    }
    out = *value;
    return true;
  };
  if (!read(kThread, parse_decimal<std::uint64_t>, "a decimal thread id", record.thread) ||
      !read(kTime, parse_time, "seconds since the epoch (1764047045.123456) or HH:MM:SS.ffffff", record.time) ||
      !read(kAction, parse_action, "allocate, free, deallocate or \"allocate failure\"", record.action)) {
    return std::nullopt;
  }
  if (field(kPointer).empty() && record.action == TraceAction::allocate_failure) {
    record.pointer = 0;
  } else if (!read(kPointer, parse_hex, "a hex address (0x7f0000000000 or 7f0000000000)", record.pointer)) {
    return std::nullopt;
  }
  if (!read(kSize, parse_decimal<std::size_t>, "a decimal byte count", record.size) ||
      !read(kStream, parse_decimal_or_hex, "a stream handle in decimal or 0x-hex", record.stream)) {
    return std::nullopt;
  }

  if (header.position[kDevice] != kAbsent) {
    const auto device = parse_decimal<unsigned>(field(kDevice));
    if (!device || *device > static_cast<unsigned>(std::numeric_limits<int>::max())) {
      error = field_error(line_number, kDevice, "a decimal device ordinal", field(kDevice));
      return std::nullopt;
    }
    record.device = static_cast<int>(*device);
  }

  for (const Column column : {kReserved, kLimit}) {
    if (header.position[column] == kAbsent || field(column).empty()) continue;
    const auto bytes = parse_decimal<std::size_t>(field(column));
    if (!bytes) {
      error = field_error(line_number, column, "a decimal byte count or nothing", field(column));
      return std::nullopt;
    }
    (column == kReserved ? record.reserved : record.limit) = *bytes;
  }
  return record;
}

}  // namespace

std::string_view to_string(TraceAction action) {
  switch (action) {
    case TraceAction::allocate:
      return "allocate";
    case TraceAction::free:
      return "free";
    case TraceAction::allocate_failure:
      return "allocate failure";
  }
  return "?";
}

TraceParseResult parse_trace(std::string_view text) {
  TraceParseResult result;
  std::optional<Header> header;
  Trace trace;
  // One record a line, room made once: a large trace's rows are most of what the tool holds.
  trace.records.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')));
  std::size_t line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t newline = text.find('\n', start);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
    const std::string_view line = text.substr(start, end - start);  // split_fields trims a CR
    start = end + 1;
    ++line_number;
    if (trim_blanks(line).empty()) continue;
    // Every writer ends its lines: a last line without its end was cut short (a killed writer), even
    // where it still reads as a row: a size of 4096 cut after "40" reads as 40.
    if (newline == std::string_view::npos) {
      trace.torn_rows = 1;
      trace.torn_line = line_number;
      break;
    }
    if (!header) {
      header = parse_header(line, line_number, result.error);
      if (header) continue;
      return result;
    }
    std::optional<TraceRecord> record = parse_row(*header, line, line_number, result.error);
    if (!record) return result;
    trace.records.push_back(*record);
  }
  if (!header) {
    result.error = fmt::format("line {}: expected a header line naming the columns {}, got an empty trace",
                               line_number + 1, kRequiredList);
    return result;
  }
  trace.has_device_column = header->position[kDevice] != kAbsent;
  trace.has_reserved_column = header->position[kReserved] != kAbsent;
  trace.has_limit_column = header->position[kLimit] != kAbsent;
  result.trace = std::move(trace);
  return result;
}

}  // namespace gpumem::replay
