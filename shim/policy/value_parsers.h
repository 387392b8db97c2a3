// Parsers and formatters for the values of the policy's environment variables. Pure and
// locale-independent: the same text means the same thing in every program the shim is loaded into.
// (parse_byte_size, declared in policy.h, is implemented with these in value_parsers.cpp.)
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gpumem {

// Drops leading and trailing blanks (space, tab, CR, LF): a value quoted with stray spaces or read
// from a file with its newline means the same as without them.
std::string_view trim_blanks(std::string_view text);

// ASCII case-insensitive equality.
bool equals_ignoring_case(std::string_view a, std::string_view b);

// 1/0, true/false, yes/no, on/off, in any letter case.
std::optional<bool> parse_boolean(std::string_view text);

// A decimal number in (0, 1]: "0.75", ".5", "1", "5e-1". NaN, infinities, zero, negative values,
// values above 1 and trailing characters are rejected.
std::optional<double> parse_fraction(std::string_view text);

// A value as it appears in an error line: in double quotes, printable ASCII kept, anything else
// (newlines, control bytes, UTF-8) as \xNN, cut after 64 bytes, so the error stays one short line.
std::string quote_value(std::string_view text);

// A decimal count without sign or blanks ("0", "17"), at most `max`; leading zeros are allowed.
std::optional<unsigned> parse_count(std::string_view text, unsigned max);

// The one error line for a variable whose value is wrong, as every variable reports it:
// `gpumem: NAME="VALUE" is WHAT_IS_WRONG; the shim is disabled for this process`.
std::string invalid_variable_line(std::string_view name, std::string_view value, std::string_view what_is_wrong);

// What ends every line that disables the shim.
inline constexpr std::string_view kShimDisabled = "; the shim is disabled for this process";

// A byte count written exactly in the largest binary unit that divides it: "10GiB", "1536KiB",
// "1000000000B", "0B".
std::string format_byte_size(std::size_t bytes);

}  // namespace gpumem
