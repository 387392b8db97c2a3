// The importing side of pool blocks (cuda_async mode, docs/ipc.md): the exporter's pool descriptor
// fetched from its process and imported once per exporter, then the block's export data imported
// from that pool.
#pragma once

#include <cuda.h>

#include "exports/export_table.h"
#include "exports/ipc_token.h"

namespace gpumem::shim::ipc {

// Maps the pool block `block` (read from the slot `token` names) into the current context and sets
// *ptr to its first byte. Failures the driver reports come back as its code; failures to reach the
// exporter's pool are logged in one line and answered CUDA_ERROR_INVALID_VALUE.
CUresult import_pool_block(const Token& token, const ExportedBlock& block, CUdeviceptr* ptr);

}  // namespace gpumem::shim::ipc
