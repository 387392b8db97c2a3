// What an export-table slot records of a block in a VMM-backed arena (docs/ipc.md): the physical
// pieces the block overlaps, back to back in the exporter's address space, each exported as a POSIX
// descriptor the exporter keeps open, and the block's offset in the first.
#pragma once

#include <cstdint>

namespace gpumem::shim::ipc {

// The arena maps one piece per granule (vmm_region_source.h): at 2 MiB a block of up to 1 GiB less
// a granule fits at any offset; a block spanning more pieces is refused with one error line.
inline constexpr std::uint32_t kMaxVmmPieces = 512;

struct VmmPiece {
  std::int32_t fd = -1;  // the exporter's descriptor of the piece's physical memory
  std::uint32_t unused = 0;
  std::uint64_t size = 0;
};

struct VmmSpan {
  std::uint64_t offset = 0;  // of the block's first byte in the first piece
  std::uint32_t piece_count = 0;  // 0: not a VMM block
  std::uint32_t unused = 0;
  VmmPiece pieces[kMaxVmmPieces];
};

}  // namespace gpumem::shim::ipc
