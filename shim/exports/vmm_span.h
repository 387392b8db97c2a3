// A block of a VMM-backed arena as it is exported (docs/ipc.md): the stretches of physical pieces it
// lies over, back to back in the exporter's address space, and the block's offset in the first. The
// export table's slot says how many there are; an importer learns each stretch, and receives its
// piece's descriptor, from the exporter's descriptor service (descriptor_service.h) a batch at a
// time. The exporter holds no descriptor per piece: each is exported when asked for, sent, closed.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gpumem::shim::ipc {

// The most stretches one block may lie over (2 TiB of memory at 2 MiB a piece).
inline constexpr std::uint32_t kMaxVmmPieces = std::uint32_t{1} << 20;

// What an export-table slot records of a VMM block (written by the exporter, read by importers).
struct VmmSpan {
  std::uint64_t offset = 0;       // of the block's first byte in the first stretch
  std::uint32_t piece_count = 0;  // 0: not a VMM block
  std::uint32_t unused = 0;
};

// One stretch as an importer maps it: `size` bytes from `offset` in the memory of the piece whose
// descriptor comes with it (a lent granule's offset is not 0).
struct VmmStretch {
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
};

// The exporter's record of one stretch: which piece of its source it lies in. The piece is checked
// to be the same live piece when it is exported (its record may have been reused since).
struct VmmPieceRef {
  std::uint64_t handle = 0;  // the piece's CUmemGenericAllocationHandle
  std::uint32_t piece = 0;   // the source's number for the piece
  std::uint32_t unused = 0;
  VmmStretch stretch;
};

// What owns the pieces (regions/vmm_region_source.h): exports them on request, as long as they live.
class VmmPieceSource {
 public:
  // The POSIX descriptor of each piece `refs` names, into `fds` (same size, close-on-exec), exported
  // while no piece can be released. CUDA_SUCCESS; CUDA_ERROR_NOT_FOUND when a piece is gone (its block
  // was freed); else the driver's refusal. On failure no descriptor is left open.
  virtual CUresult export_pieces(std::span<const VmmPieceRef> refs, std::span<int> fds) const noexcept = 0;

 protected:
  ~VmmPieceSource() = default;
};

// A block as the region source describes it for export: the slot's record, and the exporter's own.
struct VmmExport {
  VmmSpan span{};
  const VmmPieceSource* source = nullptr;  // lives as long as the process (managers are never deleted)
  std::vector<VmmPieceRef> pieces;         // span.piece_count of them, in address order
};

// Whether `stretches` are possible for a block of `size` bytes at `offset` in them, whoever wrote
// them; `what` names the flaw when not.
bool plausible_stretches(std::span<const VmmStretch> stretches, std::uint64_t offset, std::uint64_t size,
                         std::string& what);

}  // namespace gpumem::shim::ipc
