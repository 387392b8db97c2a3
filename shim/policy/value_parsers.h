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

// One variable whose value is wrong. Its error line is `gpumem: PROBLEM; ignored: FALLBACK`: the problem
// names the variable, its value and what is accepted; the fallback says what applies instead (only
// what the variable configures falls back: docs/configuration.md, "Errors").
struct VariableProblem {
  std::string variable;
  std::string problem;   // `NAME="VALUE" is WHAT_IS_WRONG`
  std::string fallback;  // what applies instead; empty: the policy says it (the limit in force)
};

// `NAME="VALUE" is WHAT_IS_WRONG`, the value quoted (quote_value).
VariableProblem invalid_variable(std::string_view name, std::string_view value, std::string_view what_is_wrong,
                                 std::string fallback = {});

// A byte count written exactly in the largest binary unit that divides it: "10GiB", "1536KiB",
// "1000000000B", "0B".
std::string format_byte_size(std::size_t bytes);

// A byte count for people, in the largest binary unit it reaches, with at most one decimal: "12 GiB",
// "1.5 GiB", "953.7 MiB", "512 B".
std::string human_byte_size(std::size_t bytes);

}  // namespace gpumem
