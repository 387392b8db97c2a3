// What an export-table slot records of a block in a VMM-backed arena (docs/ipc.md): the physical
// pieces the block overlaps, back to back in the exporter's address space, each exported as a POSIX
// descriptor the exporter keeps open, and the block's offset in the first. Up to kInlineVmmPieces
// pieces lie in the slot itself; a block over more has them in a list of its own, a sealed memfd the
// exporter keeps open while the block is exported.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gpumem::shim::ipc {

// The arena maps its memory in pieces of up to a 16th of its limit (piece_layout.h), so a block lies
// over a few of them, many only after much unmapping and mapping again.
inline constexpr std::uint32_t kInlineVmmPieces = 512;
// The most pieces a list may name (a 16 MiB list; 2 TiB of memory at 2 MiB a piece).
inline constexpr std::uint32_t kMaxVmmPieces = std::uint32_t{1} << 20;

struct VmmPiece {
  std::int32_t fd = -1;  // the exporter's descriptor of the piece's physical memory
  std::uint32_t unused = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;  // of the piece's first byte in that memory (a lent granule's: not 0)
};

struct VmmSpan {
  std::uint64_t offset = 0;       // of the block's first byte in the first piece
  std::uint32_t piece_count = 0;  // 0: not a VMM block
  // piece_count > kInlineVmmPieces: the exporter's descriptor of the list (piece_count VmmPiece
  // records); otherwise -1 and the pieces are inline.
  std::int32_t list_fd = -1;
  VmmPiece pieces[kInlineVmmPieces];
};

// Whether `pieces` are possible for a block of `size` bytes at `offset` in them, whoever wrote them;
// `what` names the flaw when not.
bool plausible_pieces(std::span<const VmmPiece> pieces, std::uint64_t offset, std::uint64_t size, std::string& what);

// A list of `pieces` for a slot: a memfd holding them, sealed (nothing can change it), close-on-exec;
// -1 when none can be made.
int make_piece_list(std::span<const VmmPiece> pieces) noexcept;

// Reads a list of `count` pieces from `fd` (fetched from the exporter) into `pieces`: it must be a
// sealed memfd of exactly that size. False with `what` when not.
bool read_piece_list(int fd, std::uint32_t count, std::vector<VmmPiece>& pieces, std::string& what);

}  // namespace gpumem::shim::ipc
