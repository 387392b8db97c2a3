// Size arithmetic of the arena: the 256-byte granule, the 21 XLA bins and the finer size classes the
// free index uses inside each bin.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

inline constexpr std::size_t kGranule = 256;  // rounding unit and minimum alignment
inline constexpr int kGranuleShift = 8;
inline constexpr int kBinCount = 21;          // bin b: [256 << b, 256 << (b+1)); the last bin is open-ended

// Each bin is cut into 2^kSubclassBits classes of equal width so that a class's search tree stays
// small; the classes partition sizes monotonically, so the global best fit is the best fit of the
// first class that has one.
inline constexpr int kSubclassBits = 6;
inline constexpr int kSubclasses = 1 << kSubclassBits;
inline constexpr int kClassCount = kBinCount * kSubclasses;

// Rounds up to the granule. The caller guarantees bytes <= SIZE_MAX - kGranule.
constexpr std::size_t round_up(std::size_t bytes) noexcept {
  return (bytes + kGranule - 1) & ~(kGranule - 1);
}
constexpr std::size_t round_down(std::size_t bytes) noexcept { return bytes & ~(kGranule - 1); }

// The XLA bin of a chunk size (>= kGranule).
constexpr int bin_index(std::size_t size) noexcept {
  const int log2_units = std::bit_width(size >> kGranuleShift) - 1;
  return log2_units < kBinCount - 1 ? log2_units : kBinCount - 1;
}

constexpr std::size_t bin_min_size(int bin) noexcept { return kGranule << bin; }

// The free-index class of a size (>= kGranule): bin-major, then an equal-width slice of the bin.
// Non-decreasing in size.
constexpr int class_index(std::size_t size) noexcept {
  const std::size_t units = size >> kGranuleShift;
  const int bin = bin_index(size);
  std::size_t sub = 0;
  if (bin < kSubclassBits) {
    sub = units - (std::size_t{1} << bin);  // fewer sizes than classes: one size per class
  } else {
    sub = (units >> (bin - kSubclassBits)) - kSubclasses;
    if (sub >= static_cast<std::size_t>(kSubclasses)) sub = kSubclasses - 1;  // open-ended last bin
  }
  return bin * kSubclasses + static_cast<int>(sub);
}

}  // namespace gpumem::detail
