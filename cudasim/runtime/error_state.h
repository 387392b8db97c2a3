// The runtime's error bookkeeping, as NVIDIA documents it: every failing call records its error as
// the calling thread's "last error" (cudaGetLastError returns and clears it, cudaPeekAtLastError
// only returns it); cudaErrorNotReady is a status, not an error, and is never recorded. Errors that
// leave a context unusable (an illegal address, a failed launch, ...) are sticky: they are reported
// by every later call until cudaDeviceReset.
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// Records `error` per the rules above and returns it: every public entry point ends with it.
cudaError_t finish(cudaError_t error);

// The calling thread's last error; take_last_error() also resets it to cudaSuccess. A failed
// initialisation is reported by both forever (it is never reset), as by NVIDIA's runtime.
cudaError_t peek_last_error();
cudaError_t take_last_error();

// The sticky error of the process, cudaSuccess when there is none; cleared by cudaDeviceReset.
cudaError_t sticky_error();
void clear_sticky_error();

}  // namespace cudasim::runtime
