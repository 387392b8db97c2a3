// The runtime's graph node parameters in the driver's form (graph_api.cpp), shared by the node
// calls of graph_api.cpp and graph_params_api.cpp.
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// The current context, which the driver's memset and copy nodes name.
CUcontext current_context_handle();
// A kernel node's parameters: the library kernel registered for params->func (loaded on first use).
cudaError_t driver_kernel_params(const cudaKernelNodeParams* params, CUDA_KERNEL_NODE_PARAMS* driver);
CUDA_MEMSET_NODE_PARAMS driver_memset_params(const cudaMemsetParams& params);
// The memory types of a copy's two sides for a cudaMemcpyKind; false for a kind that is none.
bool memory_types(cudaMemcpyKind kind, CUmemorytype* src, CUmemorytype* dst);
// A 3D copy in the driver's form (each side an array or a pointer, not both; graph_params_api.cpp);
// a 1D copy of `bytes` as a 3D copy; cudaErrorInvalidMemcpyDirection for a kind that is none.
cudaError_t driver_copy_3d(const cudaMemcpy3DParms* p, CUDA_MEMCPY3D* copy);
// Where an array takes part in `p`, its positions and the width are in elements (cudaMemcpy3D's
// documentation): scales `copy`'s to bytes (copy_api.cpp; driver_copy_3d does it).
cudaError_t array_positions_in_bytes(const cudaMemcpy3DParms* p, CUDA_MEMCPY3D* copy);
// The other way, for parameters read back (an array no longer live is left in bytes).
void array_positions_in_elements(cudaMemcpy3DParms* p);
cudaError_t driver_copy_1d(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, CUDA_MEMCPY3D* copy);

}  // namespace cudasim::runtime
