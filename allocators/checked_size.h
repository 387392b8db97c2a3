// Size arithmetic that cannot wrap. Every size a program passes is untrusted (a negative size cast
// to size_t is near 2^64), and so is every size read from another process (ledgers, export tables,
// traces): a sum or product past 2^64 that wrapped would look small and pass a limit check. Each
// check in the arena, the budget, the ledger and the shim's services goes through these, so that an
// overflow refuses the request and nothing is charged.
#pragma once

#include <concepts>
#include <limits>
#include <optional>

namespace gpumem {

// a + b, or nullopt when it does not fit in T.
template <std::unsigned_integral T>
[[nodiscard]] constexpr std::optional<T> checked_add(T a, T b) noexcept {
  T sum{};
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// a * b, or nullopt when it does not fit in T.
template <std::unsigned_integral T>
[[nodiscard]] constexpr std::optional<T> checked_mul(T a, T b) noexcept {
  T product{};
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// `value` rounded up to a multiple of `unit` (> 0), or nullopt when that does not fit in T.
template <std::unsigned_integral T>
[[nodiscard]] constexpr std::optional<T> checked_round_up(T value, T unit) noexcept {
  const T rest = value % unit;
  if (rest == 0) return value;
  return checked_add<T>(value, static_cast<T>(unit - rest));
}

// Whether `used + more <= limit`, computed without the sum (which may not fit).
template <std::unsigned_integral T>
[[nodiscard]] constexpr bool fits_under(T used, T more, T limit) noexcept {
  return more <= limit && used <= limit - more;
}

// a - b, or 0 when b > a.
template <std::unsigned_integral T>
[[nodiscard]] constexpr T saturating_sub(T a, T b) noexcept {
  return a > b ? static_cast<T>(a - b) : T{0};
}

// a + b, or T's largest value when the sum does not fit.
template <std::unsigned_integral T>
[[nodiscard]] constexpr T saturating_add(T a, T b) noexcept {
  return checked_add<T>(a, b).value_or(std::numeric_limits<T>::max());
}

// a * b, or T's largest value when the product does not fit.
template <std::unsigned_integral T>
[[nodiscard]] constexpr T saturating_mul(T a, T b) noexcept {
  return checked_mul<T>(a, b).value_or(std::numeric_limits<T>::max());
}

}  // namespace gpumem
