// The one place where the allocation core's Status becomes a CUDA driver error code.
#pragma once

#include <cuda.h>

#include "status.h"

namespace gpumem::shim {

// What the driver itself answers for the same situation: a zero-byte request and any bad pointer are
// CUDA_ERROR_INVALID_VALUE; running out of room is CUDA_ERROR_OUT_OF_MEMORY.
constexpr CUresult to_cuda_result(Status status) noexcept {
  switch (status) {
    case Status::ok:
      return CUDA_SUCCESS;
    case Status::out_of_memory:
    case Status::fences_pending:  // only escapes when synchronising did not free anything usable
      return CUDA_ERROR_OUT_OF_MEMORY;
    case Status::zero_size:
    case Status::not_owned:
    case Status::double_free:
    case Status::invalid_argument:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_UNKNOWN;
}

}  // namespace gpumem::shim
