// The importing side of a VMM-backed arena's blocks (docs/ipc.md): each physical piece the block
// lies over fetched from the exporter as a descriptor and imported, mapped back to back in a range
// reserved here, opened to the current device.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "exports/export_table.h"
#include "exports/ipc_token.h"
#include "exports/vmm_span.h"

namespace gpumem::shim::ipc {

// What an import mapped: the range reserved and the pieces mapped back to back from its start.
struct ImportedSpan {
  CUdeviceptr base = 0;
  std::vector<std::uint64_t> piece_sizes;
};

// Maps the block `block` (read from the slot `token` names) into the current context's device and
// sets *ptr to its first byte, `span` to what close must give back. Failures the driver reports come
// back as its code; failures to reach the exporter's memory are logged in one line and answered
// CUDA_ERROR_INVALID_VALUE. Nothing stays mapped on failure.
CUresult import_vmm_block(const Token& token, const ExportedBlock& block, ImportedSpan& span, CUdeviceptr* ptr);

// Unmaps the pieces and frees the range; the driver's first error, if any.
CUresult unmap_vmm_block(const ImportedSpan& span);

}  // namespace gpumem::shim::ipc
