// What a memory manager says of a block it handed out, so that cuIpcGetMemHandle can export it
// (services/ipc_service.cpp): the driver's own handle, a block inside a region, a pool block, or the
// pieces of a VMM-backed arena's block.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "exports/vmm_span.h"

namespace gpumem::shim {

// How cuIpcGetMemHandle exports a pointer a manager handed out (services/ipc_service.cpp).
struct IpcBlock {
  CUresult verdict = CUDA_SUCCESS;  // anything else: refused with this code (the manager has logged why)
  bool whole_allocation = true;     // the pointer lies in a driver allocation of its own: the driver's handle
  std::uintptr_t region_base = 0;   // otherwise the block [block_base, + block_size) inside this region
  std::uintptr_t block_base = 0;
  std::size_t block_size = 0;
  // A block of an IPC-capable stream-ordered pool (cuda_async) is shared through its pool instead of
  // a region: the pool's POSIX descriptor in this process (>= 0) and the block's export data.
  int pool_fd = -1;
  CUmemPoolPtrExportData pool_pointer{};
  // A block of a VMM-backed arena (vmm.span.piece_count > 0) is shared through its physical pieces.
  ipc::VmmExport vmm{};
};

}  // namespace gpumem::shim
