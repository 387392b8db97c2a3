// Weighted max-min fair shares with floors, allowances and reclaim requests.
#include "share/fair_share.h"

#include <algorithm>
#include <array>

namespace gpumem::shim::share {
namespace {

__extension__ typedef unsigned __int128 Wide;

std::uint64_t weight_of(const Claim& claim) { return claim.weight_milli == 0 ? 1 : claim.weight_milli; }

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

SharesSummary fair_shares(std::uint64_t capacity, std::span<const Claim> claims, std::span<Share> shares) noexcept {
  SharesSummary summary;
  const std::size_t n = std::min({claims.size(), shares.size(), kMaxMembers});
  std::array<std::uint64_t, kMaxMembers> floors{};
  std::array<std::uint64_t, kMaxMembers> extra{};  // what each would take beyond its floor
  Wide floor_sum = 0;
  Wide held_sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    floors[i] = std::min(claims[i].floor, claims[i].cap);
    floor_sum += floors[i];
    held_sum += claims[i].held;
    summary.someone_waits = summary.someone_waits || claims[i].waiting;
  }
  if (floor_sum > capacity) {
    summary.floors_scaled = true;
    Wide scaled_sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      floors[i] = static_cast<std::uint64_t>(Wide{floors[i]} * capacity / floor_sum);
      scaled_sum += floors[i];
    }
    floor_sum = scaled_sum;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t wanted = std::min(claims[i].demand, claims[i].cap);
    extra[i] = wanted > floors[i] ? wanted - floors[i] : 0;
    shares[i].guarantee = floors[i];
  }

  // Water-filling: members in order of extra / weight; each one whose extra fits under the level
  // (what is left shared by the weights left) gets it all, and the rest share what is left by weight.
  std::array<std::uint16_t, kMaxMembers> order{};
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint16_t>(i);
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), [&](std::uint16_t a, std::uint16_t b) {
    return Wide{extra[a]} * weight_of(claims[b]) < Wide{extra[b]} * weight_of(claims[a]);
  });
  Wide left = Wide{capacity} - floor_sum;
  Wide weights_left = 0;
  for (std::size_t i = 0; i < n; ++i) weights_left += weight_of(claims[i]);
  std::size_t k = 0;
  for (; k < n; ++k) {
    const std::size_t i = order[k];
    const std::uint64_t weight = weight_of(claims[i]);
    if (Wide{extra[i]} * weights_left > left * weight) break;  // above the level: shares what is left
    shares[i].guarantee += extra[i];
    left -= extra[i];
    weights_left -= weight;
  }
  if (k < n) {
    // Every member from k on wants more than its weighted part of what is left: each gets that part,
    // and the bytes rounding leaves over go one each to the first of them, so nothing is lost.
    Wide given = 0;
    for (std::size_t j = k; j < n; ++j) {
      const std::size_t i = order[j];
      const auto part = static_cast<std::uint64_t>(left * weight_of(claims[i]) / weights_left);
      shares[i].guarantee += part;
      given += part;
    }
    for (std::size_t j = k; j < n && given < left; ++j, ++given) shares[order[j]].guarantee += 1;
  }

  summary.held = held_sum > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(held_sum);
  summary.free = held_sum >= capacity ? 0 : static_cast<std::uint64_t>(capacity - held_sum);
  for (std::size_t i = 0; i < n; ++i) {
    bool others_wait = false;
    for (std::size_t j = 0; j < n && !others_wait; ++j) others_wait = j != i && claims[j].waiting;
    const std::uint64_t with_borrowing =
        others_wait ? shares[i].guarantee : std::max(shares[i].guarantee, saturating_add(claims[i].held, summary.free));
    shares[i].allowance = std::min(claims[i].cap, with_borrowing);
  }
  return summary;
}

std::uint64_t reclaim_requests(std::uint64_t capacity, std::span<const Claim> claims, std::span<const Share> shares,
                               std::size_t waiter, std::uint64_t owed, std::uint64_t wanted,
                               std::span<std::uint64_t> requests) noexcept {
  const std::size_t n = std::min({claims.size(), shares.size(), requests.size(), kMaxMembers});
  owed = std::min(owed, wanted);
  Wide held_sum = 0;
  Wide borrowed_sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    requests[i] = 0;
    held_sum += claims[i].held;
    if (i != waiter && claims[i].held > shares[i].guarantee) borrowed_sum += claims[i].held - shares[i].guarantee;
  }
  // 1. What the borrowers owe.
  std::uint64_t total = 0;
  Wide expected = 0;  // of it, what they hold idle: what can come back without their program
  if (held_sum + owed > capacity && borrowed_sum > 0) {
    const Wide shortfall = std::min(held_sum + owed - capacity, borrowed_sum);
    for (std::size_t i = 0; i < n; ++i) {
      if (i == waiter || claims[i].held <= shares[i].guarantee) continue;
      const std::uint64_t borrowed = claims[i].held - shares[i].guarantee;
      const Wide part = (shortfall * borrowed + borrowed_sum - 1) / borrowed_sum;
      requests[i] = static_cast<std::uint64_t>(std::min<Wide>(part, borrowed));
      total += requests[i];
      expected += std::min(requests[i], claims[i].idle);
    }
  }
  // 2. The rest of the shortfall, lent from idle memory.
  if (held_sum + wanted <= capacity) return total;
  const Wide shortfall = held_sum + wanted - capacity;
  if (expected >= shortfall) return total;
  const Wide lend = shortfall - expected;
  std::array<std::uint64_t, kMaxMembers> left{};  // idle memory not asked for yet
  Wide left_sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == waiter || claims[i].waiting) continue;
    left[i] = claims[i].idle - std::min(requests[i], claims[i].idle);
    left_sum += left[i];
  }
  if (left_sum == 0) return total;
  const Wide lent = std::min(lend, left_sum);
  for (std::size_t i = 0; i < n; ++i) {
    if (left[i] == 0) continue;
    const Wide part = (lent * left[i] + left_sum - 1) / left_sum;
    const auto asked = static_cast<std::uint64_t>(std::min<Wide>(part, left[i]));
    requests[i] += asked;
    total += asked;
  }
  return total;
}

}  // namespace gpumem::shim::share
