// Pitched allocations computed as the driver computes them, so an arena-served cuMemAllocPitch gives
// the program the same row pitch it would get without the shim.
#pragma once

#include <cstddef>
#include <optional>

#include "checked_size.h"

namespace gpumem::shim {

// Rows start at multiples of this many bytes (the pitch alignment of current NVIDIA GPUs).
inline constexpr std::size_t kPitchAlignment = 512;

struct PitchedSize {
  std::size_t pitch = 0;  // bytes per row
  std::size_t bytes = 0;  // pitch * height
  // False when the pitch or pitch * height does not fit a size_t: more than any device holds, which
  // the driver answers with CUDA_ERROR_OUT_OF_MEMORY (pitch and bytes are then meaningless).
  bool fits = true;
};

// nullopt where the driver answers CUDA_ERROR_INVALID_VALUE: a zero width or height, an element size
// other than 4, 8 or 16.
constexpr std::optional<PitchedSize> pitched_size(std::size_t width_bytes, std::size_t height,
                                                  unsigned int element_size_bytes) noexcept {
  if (width_bytes == 0 || height == 0) return std::nullopt;
  if (element_size_bytes != 4 && element_size_bytes != 8 && element_size_bytes != 16) return std::nullopt;
  const std::optional<std::size_t> pitch = checked_round_up(width_bytes, kPitchAlignment);
  if (!pitch) return PitchedSize{0, 0, false};
  const std::optional<std::size_t> bytes = checked_mul(*pitch, height);
  if (!bytes) return PitchedSize{*pitch, 0, false};
  return PitchedSize{*pitch, *bytes};
}

}  // namespace gpumem::shim
