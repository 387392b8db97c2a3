// Stream-ordered pools' internals, shared by pools.cpp (allocation, release, attributes) and
// pool_ipc.cpp (exportable pools: export, import, imported pointers). All need State::mu held.
#pragma once

#include "state.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace cudasim {

// A reservation from the device. Invariant: carved <= mapping.length; the blocks carved from it
// tile [base, base + carved). In an exportable pool it shows [file_offset, + mapping.length) of
// the pool's file.
struct PoolChunk {
  std::uintptr_t base = 0;
  Mapping mapping;
  std::size_t carved = 0;
  std::uint64_t file_offset = 0;
};

// Invariant: [base, base + length) lies in `chunk`; while in_use it backs exactly one live Pool
// allocation; free_done is false from cuMemFreeAsync until that free (number `frees`) has executed
// on `freed_on`. Free operations hold the block, so it outlives them even when released meanwhile.
struct PoolBlock {
  std::uintptr_t base = 0;
  std::size_t length = 0;
  std::shared_ptr<PoolChunk> chunk;
  bool in_use = false;
  bool free_done = true;
  std::uint64_t frees = 0;
  std::shared_ptr<CUstream_st> freed_on;

  bool idle() const { return !in_use && free_done; }
};

}  // namespace cudasim

// Invariant: reserved == sum of chunks' mapping lengths; used == sum of in-use blocks' lengths.
// Pool objects are never freed (a destroyed pool keeps serving outstanding frees).
struct CUmemPoolHandle_st {
  int device = 0;
  bool is_default = false;
  bool destroyed = false;
  std::uint64_t release_threshold = 0;
  std::uint64_t max_size = 0;  // CUmemPoolProps::maxSize: the most it may reserve; 0: the device's free memory
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
  std::uint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0;
  std::vector<std::shared_ptr<cudasim::PoolChunk>> chunks;
  std::vector<std::shared_ptr<cudasim::PoolBlock>> blocks;
  // Exportable (created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) and imported pools: the memfd
  // every chunk is a range of, so a process holding it maps the same bytes; -1 for other pools.
  // Chunks take file offsets from file_end on; a released chunk's range is punched out of the file.
  int file_fd = -1;
  std::uint64_t file_end = 0;
  // From cuMemPoolImportFromShareableHandle: another pool's file; it allocates nothing, it only
  // imports pointers (cuMemPoolImportPointer).
  bool imported = false;
  // cuMemPoolSetAccess: what each other device may do with the pool's memory (absent: none). The
  // pool's own device always has read-write access.
  std::map<int, CUmemAccess_flags> peer_access;
};

namespace cudasim {

// --- pools.cpp ---
// Access descriptors for memory of `device` (cuMemPoolSetAccess, graph allocation nodes): devices
// that exist, known flags, the owner read-write, peers only where peer access is simulated.
CUresult check_access_descs(const State& st, int device, const CUmemAccessDesc* map, size_t count);

// --- pool_ipc.cpp ---
// Gives the pool its file (cuMemPoolCreate with a POSIX descriptor handle type); false when no
// memfd can be had.
bool make_pool_exportable(CUmemPoolHandle_st& pool);
// Maps the next `mapping.length` bytes of the pool's file over `mapping` (fresh device address
// space), gives the mapping its own descriptor of the file (so the chunk outlives the pool's) and
// records the offset in `chunk`; false when the file cannot grow or be mapped.
bool map_pool_file(CUmemPoolHandle_st& pool, Mapping& mapping, PoolChunk& chunk);
// The chunk of an exportable pool goes back to the device: its range of the file is emptied
// (importers that still map it keep address space, not memory). Before retire_mapping, which closes
// the chunk's descriptor.
void punch_pool_file(const PoolChunk& chunk);
// cuMemFree (no stream) or cuMemFreeAsync of a pointer cuMemPoolImportPointer gave: unmapped now,
// or once the stream reaches the free.
CUresult free_imported_pointer(State& st, CUdeviceptr dptr, const std::shared_ptr<CUstream_st>& stream);

}  // namespace cudasim
