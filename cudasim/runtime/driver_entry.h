// cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion (and their _ptsz forms): answered
// through the driver's own cuGetProcAddress, as NVIDIA's runtime answers them.
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// The CUDA version cudaGetDriverEntryPoint asks for: this runtime's (CUDART_VERSION).
inline constexpr unsigned int kRuntimeCudaVersion = CUDART_VERSION;

// Looks `symbol` up for `cuda_version`. `per_thread_default` says what cudaEnableDefault means
// (the per-thread-default-stream entry points: the _ptds/_ptsz driver functions). Returns the
// error without recording it.
cudaError_t driver_entry_point(const char* symbol, void** function, unsigned int cuda_version,
                               unsigned long long flags, bool per_thread_default,
                               cudaDriverEntryPointQueryResult* status);

}  // namespace cudasim::runtime
