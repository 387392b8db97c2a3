// How a resizable source splits the memory it backs into pieces (one physical allocation and one
// mapping each, given back only whole). A region's first reservation (the whole preallocation) is
// laid out: small pieces at the start of the address range, doubling with the offset up to a
// largest piece of a 32nd of the limit. The arena packs blocks towards the start of its region (best
// fit, lowest address first), so the small pieces there serve the churn of small blocks and can go
// back one by one, while the large pieces further on, mapped in few driver calls, are usually wholly
// busy or wholly idle. Mapping a whole limit takes at most 63 pieces for any limit up to 192 GiB at
// 2 MiB granules (44 for 192 GiB, 39 for 8 GiB). Growth, and mapping again what was unmapped, back
// one granule per piece: what is mapped there follows the blocks, and any idle granule can go.
#pragma once

#include <bit>
#include <cstddef>

namespace gpumem {

// The largest piece is at most this share of the limit (and at least a granule).
inline constexpr std::size_t kPiecesPerLimit = 32;

// The largest piece for `limit_bytes` at `granule` (a power of two): limit / kPiecesPerLimit rounded
// down to whole granules, at least one granule.
constexpr std::size_t largest_piece_for(std::size_t limit_bytes, std::size_t granule) noexcept {
  const std::size_t share = limit_bytes / kPiecesPerLimit / granule * granule;
  return share <= granule ? granule : share;
}

// The largest piece of a shared GPU's member whose guarantee is `guarantee_bytes`: as an unshared
// arena's for a limit of that size. A piece goes back only whole, and the guarantee shrinks as
// members join; but the arena packs blocks towards the small pieces at the start, so the large ones
// further on are mostly wholly busy or wholly idle. A member alone then costs what an unshared
// process does (bench/share.md, "Alone on the device").
constexpr std::size_t shared_largest_piece_for(std::size_t guarantee_bytes, std::size_t granule) noexcept {
  return largest_piece_for(guarantee_bytes, granule);
}

// The most bytes one piece starting `offset` bytes into the range may take (`offset` a multiple of
// `granule`): the power of two at or below the offset, from one granule up to `largest`.
constexpr std::size_t piece_bytes_at(std::size_t offset, std::size_t granule, std::size_t largest) noexcept {
  if (offset <= granule) return granule;
  const std::size_t doubled = std::bit_floor(offset);
  return doubled >= largest ? (largest < granule ? granule : largest) : doubled;
}

}  // namespace gpumem
