// cuIpcGetMemHandle, cuIpcOpenMemHandle_v2 and cuIpcCloseMemHandle as the hooks serve them
// (docs/ipc.md). A block that is a whole driver allocation gets the driver's own handle; a block
// inside a pooled region, of cuda_async mode's stream-ordered pool, or of a VMM-backed arena gets a
// token (ipc_token.h) naming it in this process's export table. An importer resolves a region
// block's token to the region's driver handle, opens that and adds the block's offset; the driver
// counts the opens of a region, so every open of a block is one open of its region and every close
// one close. A pool block's token gives the pool's descriptor and the block's export data, a VMM
// block's the descriptors of its pieces: the importer imports the block (pool_blocks.h,
// vmm_blocks.h) once, counts opens itself and gives the import back at the last close.
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/fork_safe_lock.h"
#include "context/capture_state.h"
#include "context/context_sync.h"
#include "driver/real_driver.h"
#include "exports/export_table.h"
#include "exports/ipc_token.h"
#include "ipc/pool_blocks.h"
#include "ipc/vmm_blocks.h"
#include "base/log.h"
#include "managers/context_registry.h"
#include "managers/memory_manager.h"
#include "services/ipc_service.h"

namespace gpumem::shim {
namespace {

// Blocks this process opened from tokens: pointer handed out -> how it was opened, and how many
// opens are not closed yet.
struct OpenedBlock {
  enum class Kind : std::uint8_t { region, pool, vmm };
  Kind kind = Kind::region;
  CUdeviceptr region = 0;  // a region block's: the region mapping it lies in
  std::uint64_t opens = 0;
  ipc::Token token{};        // a pool or VMM block's, to hand out the same pointer when it is opened again
  ipc::ImportedSpan span{};  // a VMM block's mapping
  CUcontext context = nullptr;  // a pool block's: the context that imported it, and its device
  CUdevice device = 0;
};
std::unordered_map<CUdeviceptr, OpenedBlock>& opened_blocks() {
  static auto* blocks = new std::unordered_map<CUdeviceptr, OpenedBlock>;  // leaked: nothing runs at exit
  return *blocks;
}

// Driver handles the program opened itself (not tokens), by the address the driver returned: how
// many are open. A region the program opened this way may be closed while blocks of it opened from
// tokens stay open (the driver counts every open of the region).
std::unordered_map<CUdeviceptr, std::uint64_t>& direct_opens() {
  static auto* opens = new std::unordered_map<CUdeviceptr, std::uint64_t>;  // leaked: nothing runs at exit
  return *opens;
}

// Counts one more open of `ptr`, which `record` describes. False when there is no memory to remember it.
bool remember_open(CUdeviceptr ptr, const OpenedBlock& record) noexcept {
  try {
    const auto lock = lock_fork_safely(ProcessLock::opened_blocks);
    OpenedBlock& opened = opened_blocks()[ptr];
    const std::uint64_t opens = opened.opens;
    opened = record;
    opened.opens = opens + 1;
    return true;
  } catch (...) {
    return false;
  }
}

CUresult export_sub_allocation(CUipcMemHandle* handle, IpcBlock& block) {
  ipc::ExportedBlock exported;
  if (block.vmm.span.piece_count > 0) {
    exported.vmm = block.vmm.span;
    log::at(LogLevel::debug, "cuIpcGetMemHandle: the {}-byte block at {:#x} is shared as {} VMM mapping(s)",
            block.block_size, block.block_base, block.vmm.span.piece_count);
  } else if (block.pool_fd >= 0) {
    exported.pool_fd = block.pool_fd;
    exported.pool_pointer = block.pool_pointer;
  } else {
    const CUresult result = real_driver().cuIpcGetMemHandle(&exported.region_handle, block.region_base);
    if (result != CUDA_SUCCESS) return result;
    exported.offset = block.block_base - block.region_base;
  }
  exported.size = block.block_size;
  ipc::Token token;
  std::string why;
  switch (ipc::publish(block.block_base, exported, &block.vmm, token, why)) {
    case ipc::PublishResult::published:
      *handle = ipc::to_handle(token);
      return CUDA_SUCCESS;
    case ipc::PublishResult::no_table:
      log::at(LogLevel::error, "cuIpcGetMemHandle: cannot create the export table (no memfd or memory); "
                               "{:#x} is not exported", block.block_base);
      return CUDA_ERROR_OUT_OF_MEMORY;
    case ipc::PublishResult::table_full:
      log::at(LogLevel::error, "cuIpcGetMemHandle: 4096 blocks are exported already; free some before "
                               "exporting {:#x}", block.block_base);
      return CUDA_ERROR_OUT_OF_MEMORY;
    case ipc::PublishResult::no_service:
      log::at(LogLevel::error, "cuIpcGetMemHandle: cannot start the descriptor service that hands out the memory "
                               "of {:#x} ({}); it is not exported", block.block_base, why);
      return CUDA_ERROR_OPERATING_SYSTEM;
  }
  return CUDA_ERROR_UNKNOWN;
}

// A pool or VMM block: the rules the driver applies to its own handles, checked here since the block
// is imported another way: the one flag cuda.h allows, a current context, not a handle of this very
// process. Opening it again gives the same pointer, counted.
CUresult open_imported_block(CUdeviceptr* dptr, const ipc::Token& token, const ipc::ExportedBlock& block,
                             unsigned int flags) {
  const RealDriver& driver = real_driver();
  if (dptr == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) {  // "must be specified as" that
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUcontext current = nullptr;
  if (driver.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ipc::exported_here(token)) return CUDA_ERROR_INVALID_CONTEXT;
  const auto same_block = [&](const ipc::Token& other) {
    return other.pid == token.pid && other.process_number == token.process_number && other.slot == token.slot &&
           other.generation == token.generation;
  };
  try {
    const auto lock = lock_fork_safely(ProcessLock::opened_blocks);
    for (auto& [ptr, opened] : opened_blocks()) {
      if (opened.kind != OpenedBlock::Kind::region && same_block(opened.token)) {
        ++opened.opens;
        *dptr = ptr;
        return CUDA_SUCCESS;
      }
    }
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  OpenedBlock record;
  record.token = token;
  CUdeviceptr imported = 0;
  CUresult result = CUDA_SUCCESS;
  if (block.vmm.piece_count > 0) {
    record.kind = OpenedBlock::Kind::vmm;
    result = ipc::import_vmm_block(token, block, record.span, &imported);
  } else {
    record.kind = OpenedBlock::Kind::pool;
    record.context = current;
    if (driver.cuCtxGetDevice(&record.device) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    result = ipc::import_pool_block(token, block, &imported);
  }
  if (result != CUDA_SUCCESS) return result;
  if (!remember_open(imported, record)) {  // undo the import
    if (record.kind == OpenedBlock::Kind::vmm) {
      ipc::unmap_vmm_block(record.span);
    } else {
      driver.cuMemFree_v2(imported);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = imported;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuIpcGetMemHandle == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  MemoryManager* owner = ContextRegistry::instance().owner_of(dptr);
  if (owner == nullptr) return driver.cuIpcGetMemHandle(handle, dptr);
  IpcBlock block = owner->ipc_block(dptr);
  if (block.verdict != CUDA_SUCCESS) return block.verdict;
  if (block.whole_allocation) return driver.cuIpcGetMemHandle(handle, dptr);
  return export_sub_allocation(handle, block);
}

CUresult ipc_open_mem_handle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuIpcOpenMemHandle_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const std::optional<ipc::Token> token = ipc::parse_token(handle);
  if (!token) {
    const CUresult opened = driver.cuIpcOpenMemHandle_v2(dptr, handle, flags);
    if (opened == CUDA_SUCCESS && dptr != nullptr) {
      try {
        const auto lock = lock_fork_safely(ProcessLock::opened_blocks);
        ++direct_opens()[*dptr];
      } catch (...) {  // not counted: closing this region while blocks of it are open is then refused
      }
    }
    return opened;
  }
  ipc::ExportedBlock block;
  std::string why;
  if (!ipc::read_exported(*token, block, why)) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: {}", why);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (block.pool_fd >= 0 || block.vmm.piece_count > 0) return open_imported_block(dptr, *token, block, flags);
  // The driver's own checks apply to the region: flags, the current context, a handle of this process.
  CUdeviceptr region = 0;
  const CUresult result = driver.cuIpcOpenMemHandle_v2(&region, block.region_handle, flags);
  if (result != CUDA_SUCCESS) return result;
  // The offset and size are the exporter's word: the block must lie inside the region opened.
  CUdeviceptr region_base = 0;
  std::size_t region_size = 0;
  if (driver.cuMemGetAddressRange_v2(&region_base, &region_size, region) != CUDA_SUCCESS || region_base != region ||
      block.offset >= region_size || block.size > region_size - block.offset) {
    driver.cuIpcCloseMemHandle(region);
    log::at(LogLevel::error, "cuIpcOpenMemHandle: process {}'s export table puts the {}-byte block at offset {} of "
            "a {}-byte region, outside it (a corrupt or forged handle)", token->pid, block.size, block.offset,
            region_size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUdeviceptr ptr = region + block.offset;
  OpenedBlock record;
  record.region = region;
  if (!remember_open(ptr, record)) {  // undo the open
    driver.cuIpcCloseMemHandle(region);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = ptr;
  return CUDA_SUCCESS;
}

namespace {

// Imports whose last close came while a graph capture was under way: the wait their free needs is a
// context synchronisation, which the driver refuses during a capture. Freed at a later close made
// outside one. Under ProcessLock::opened_blocks.
std::vector<std::pair<CUdeviceptr, OpenedBlock>>& frees_after_capture() {
  static auto* pending = new std::vector<std::pair<CUdeviceptr, OpenedBlock>>;  // leaked: nothing runs at exit
  return *pending;
}

// Frees an imported pool block once every context that may still read it is done: cuMemFree does not
// wait for work on other devices' streams, where the driver's close of a mapping waits for all of it
// (and the block is open to every peer device). With a capture under way, the free waits for a later
// close.
CUresult free_pool_import(CUdeviceptr dptr, const OpenedBlock& record) {
  std::vector<std::pair<CUdeviceptr, OpenedBlock>> due;
  try {
    const auto lock = lock_fork_safely(ProcessLock::opened_blocks);
    auto& pending = frees_after_capture();
    if (capture_state::active()) {
      pending.emplace_back(dptr, record);
      return CUDA_SUCCESS;
    }
    due.swap(pending);
    due.emplace_back(dptr, record);
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult result = CUDA_SUCCESS;
  for (const auto& [ptr, block] : due) {
    const CUresult waited = synchronize_contexts_reaching(block.context, block.device);
    const CUresult freed = waited == CUDA_SUCCESS ? real_driver().cuMemFree_v2(ptr) : waited;
    if (ptr == dptr) result = freed;
  }
  return result;
}

}  // namespace

CUresult ipc_close_mem_handle(CUdeviceptr dptr) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuIpcCloseMemHandle == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  OpenedBlock record;
  bool opened_here = false;
  bool last_close = false;
  {
    // Counted down before the driver's close, so two threads closing one open cannot both close it.
    const auto lock = lock_fork_safely(ProcessLock::opened_blocks);
    auto& blocks = opened_blocks();
    if (auto found = blocks.find(dptr); found != blocks.end()) {
      opened_here = true;
      record = found->second;
      if (--found->second.opens == 0) {
        blocks.erase(found);
        last_close = true;
      }
    } else if (auto direct = direct_opens().find(dptr); direct != direct_opens().end()) {
      if (--direct->second == 0) direct_opens().erase(direct);  // one of the program's own opens
    } else {
      // The region of blocks still open, which the program never opened itself, is not its to
      // close: closing it would unmap them.
      for (const auto& [ptr, opened] : blocks) {
        if (opened.kind == OpenedBlock::Kind::region && opened.region == dptr) return CUDA_ERROR_INVALID_VALUE;
      }
    }
  }
  if (!opened_here) return driver.cuIpcCloseMemHandle(dptr);  // a driver handle the program opened
  CUresult result = CUDA_SUCCESS;
  switch (record.kind) {
    case OpenedBlock::Kind::region:  // one close of its region
      result = driver.cuIpcCloseMemHandle(record.region);
      break;
    case OpenedBlock::Kind::pool:  // the import is freed at the last close (not the exporter's block)
      if (!last_close) return CUDA_SUCCESS;
      result = free_pool_import(dptr, record);
      break;
    case OpenedBlock::Kind::vmm:  // the mapping is given back at the last close
      if (!last_close) return CUDA_SUCCESS;
      result = ipc::unmap_vmm_block(record.span);
      break;
  }
  record.opens = 0;
  if (result != CUDA_SUCCESS) remember_open(dptr, record);  // no memory: still open in the driver, unknown here
  return result;
}

}  // namespace gpumem::shim
