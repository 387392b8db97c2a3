// Parsers for the values of the sharing variables (GPUMEM_SHARE_WEIGHT, GPUMEM_SHARE_WAIT): pure and
// locale-independent, like value_parsers.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpumem {

// The largest weight and wait accepted: beyond them a value is a typo, not a wish.
inline constexpr std::uint32_t kMaxShareWeightMilli = 1000 * 1000;  // weight 1000
inline constexpr std::uint64_t kMaxShareWaitMs = 3600 * 1000;       // one hour

// A weight in thousandths: a decimal number in (0, 1000] with at most three decimals ("1", "0.5",
// "2.125"). Exact, so every process reads the same weight from the same text.
std::optional<std::uint32_t> parse_share_weight_milli(std::string_view text);

// A duration in milliseconds: "0", or a decimal number followed by "ms" or "s" in any letter case,
// optionally after blanks ("500ms", "5s", "1.5 s"), at most one hour; a fractional millisecond is
// dropped.
std::optional<std::uint64_t> parse_duration_ms(std::string_view text);

}  // namespace gpumem
