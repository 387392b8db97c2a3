// The frame shared by every public entry point of the runtime.
#pragma once

#include "api_headers.h"
#include "error_state.h"

namespace cudasim::runtime {

// Loads the driver once (see driver_table.h) and returns the outcome.
cudaError_t driver_status();

// A failed initialisation (no driver, a stub driver, one too old) is returned by every call before
// any argument check, as NVIDIA's runtime does; then the call's own result is recorded as the
// thread's last error.
cudaError_t api_call(auto&& operation) {
  const cudaError_t ready = driver_status();
  if (ready != cudaSuccess) return finish(ready);
  return finish(operation());
}

}  // namespace cudasim::runtime
