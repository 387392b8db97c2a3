// The exporting side of gpumem's IPC handles: a table of exported blocks in a memfd that this process
// keeps open, so another process of the same user can read it through /proc/<pid>/fd/<n> (the kernel
// refuses other users). One slot per exported block: the region's real driver handle, the block's
// offset in it and its size. A freed block's slot is withdrawn, so its handles stop opening.
// A VMM block's pieces are recorded here too, in this process's memory only: the descriptor service
// (descriptor_service.h) exports them when an importer asks.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "exports/ipc_token.h"
#include "exports/vmm_span.h"

namespace gpumem::shim::ipc {

// What a slot tells an importer: a block inside a region, of a stream-ordered pool, or of a VMM arena.
struct ExportedBlock {
  CUipcMemHandle region_handle{};  // the driver's handle of the region holding the block
  std::uint64_t offset = 0;        // of the block's first byte in the region
  std::uint64_t size = 0;
  // A pool block (pool_fd >= 0): the pool's POSIX descriptor in the exporter, which the importer
  // fetches and imports, and the block's export data; region_handle and offset are unused.
  std::int32_t pool_fd = -1;
  std::uint32_t unused = 0;
  CUmemPoolPtrExportData pool_pointer{};
  // A block of a VMM-backed arena (vmm.piece_count > 0): how many stretches of pieces it lies over,
  // which the importer asks the exporter's descriptor service for, imports and maps back to back;
  // region_handle and offset are unused.
  VmmSpan vmm{};
};

enum class PublishResult : std::uint8_t { published, no_table, table_full, no_service };

// Publishes the block starting at `block_base` (or finds it published) and fills `token`. A VMM block
// (block.vmm.piece_count > 0) needs `vmm`, whose pieces the table takes over, and the descriptor
// service, started here for this process if it is not running (no_service, with `why`, when it
// cannot be).
PublishResult publish(std::uintptr_t block_base, const ExportedBlock& block, VmmExport* vmm, Token& token,
                      std::string& why);

// The block starting at `block_base` is being freed: its handles stop opening. Cheap when nothing
// was exported.
void withdraw(std::uintptr_t block_base) noexcept;
// Withdraws every block starting in [begin, end): the memory there was freed or went with its context.
void withdraw_range(std::uintptr_t begin, std::uintptr_t end) noexcept;

// Whether any block is published now (cheap).
bool has_exports() noexcept;

// What the descriptor service may send for a request: the stretches [first, first + count) of the
// VMM block in `slot` of this process's table numbered `process_number`, if it is live with
// `generation`, and the source that exports their pieces.
enum class VmmLookup : std::uint8_t { found, freed, bad_request };
VmmLookup vmm_pieces_for(std::uint64_t process_number, std::uint32_t slot, std::uint64_t generation,
                         std::uint32_t first, std::uint32_t count, const VmmPieceSource*& source,
                         std::vector<VmmPieceRef>& refs);

// Whether `token` names this very process's table (a process cannot open its own handles).
bool exported_here(const Token& token);

// The importing side: reads the slot `token` names from the exporter's table. Everything is checked,
// as another process wrote it: the descriptor must name a memfd of a table's size (anything else,
// a FIFO above all, is refused before it is opened, and opening never blocks), the table is read
// with pread (never mapped: shrinking it cannot fault here), and the block must be possible (a size;
// a VMM block inside its mappings). On failure returns false with `why` (one line for the log:
// exporter gone, other user, block freed, forged handle, ...).
bool read_exported(const Token& token, ExportedBlock& block, std::string& why);

}  // namespace gpumem::shim::ipc
