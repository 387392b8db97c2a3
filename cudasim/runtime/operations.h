// The stream-taking runtime operations, shared by the default entry points (where stream 0 is the
// legacy default stream) and the per-thread-default-stream entry points (`_ptsz` / `_ptds`, where
// stream 0 is the calling thread's default stream). Each returns the error without recording it.
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// Whether a copy or set waits for its completion before returning.
enum class Completion { kSynchronous, kAsynchronous };

// The stream a handle names in the per-thread-default-stream entry points.
inline CUstream per_thread_stream(cudaStream_t stream) {
  return stream == nullptr ? CU_STREAM_PER_THREAD : stream;
}

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, CUstream stream,
                 Completion completion);
cudaError_t set(void* dst, int value, size_t count, CUstream stream, Completion completion);

// Copies with rows and slices, to and from arrays, and 2D/3D sets (copy_api.cpp). Widths and
// offsets are in bytes, except where cudaMemcpy3D's parameters name an array (elements).
cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, CUstream stream, Completion completion);
cudaError_t copy_2d_to_array(cudaArray_t dst, size_t x, size_t y, const void* src, size_t spitch, size_t width,
                             size_t height, cudaMemcpyKind kind, CUstream stream, Completion completion);
cudaError_t copy_2d_from_array(void* dst, size_t dpitch, cudaArray_const_t src, size_t x, size_t y, size_t width,
                               size_t height, cudaMemcpyKind kind, CUstream stream, Completion completion);
cudaError_t copy_2d_array_to_array(cudaArray_t dst, size_t dst_x, size_t dst_y, cudaArray_const_t src, size_t src_x,
                                   size_t src_y, size_t width, size_t height, cudaMemcpyKind kind, CUstream stream);
// The deprecated 1D array copies: `count` bytes row after row from byte `x` of row `y` of the
// array (its first slice), to the array from `linear` or from it to `linear`; between two arrays.
cudaError_t copy_linear_array(cudaArray_const_t array, size_t x, size_t y, const void* linear, size_t count,
                              bool to_array, cudaMemcpyKind kind, CUstream stream, Completion completion);
cudaError_t copy_array_run(cudaArray_t dst, size_t dst_x, size_t dst_y, cudaArray_const_t src, size_t src_x,
                           size_t src_y, size_t count, cudaMemcpyKind kind, CUstream stream);
cudaError_t copy_3d(const cudaMemcpy3DParms* p, CUstream stream, Completion completion);
cudaError_t copy_3d_peer(const cudaMemcpy3DPeerParms* p, CUstream stream, Completion completion);
cudaError_t set_2d(void* dst, size_t pitch, int value, size_t width, size_t height, CUstream stream,
                   Completion completion);
cudaError_t set_3d_extent(cudaPitchedPtr ptr, int value, cudaExtent extent, CUstream stream, Completion completion);
// Batches, over the driver's (the runtime's structures are the driver's).
cudaError_t copy_batch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                       cudaMemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs, CUstream stream);
cudaError_t copy_3d_batch(size_t count, cudaMemcpy3DBatchOp* ops, unsigned long long flags, CUstream stream);

// Copies to and from __device__ / __constant__ variables (symbol_api.cpp): `count` bytes at
// `offset` of the variable's storage in the current context.
cudaError_t copy_to_symbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind kind,
                           CUstream stream, Completion completion);
cudaError_t copy_from_symbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind,
                             CUstream stream, Completion completion);

// Forgets the variables a fat binary registered (__cudaUnregisterFatBinary), and the storage of
// every variable in a context that is gone (cudaDeviceReset).
void forget_binary_variables(void** binary);
void forget_symbol_storage(CUcontext context);

cudaError_t stream_synchronize(CUstream stream);
cudaError_t stream_query(CUstream stream);
cudaError_t stream_wait_event(CUstream stream, CUevent event, unsigned int flags);
cudaError_t stream_is_capturing(CUstream stream, cudaStreamCaptureStatus* status);
cudaError_t stream_begin_capture(CUstream stream, cudaStreamCaptureMode mode);
cudaError_t stream_end_capture(CUstream stream, cudaGraph_t* graph);
// graph_objects_api.cpp
cudaError_t stream_begin_capture_to_graph(CUstream stream, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                          const cudaGraphEdgeData* edges, size_t count, cudaStreamCaptureMode mode);
cudaError_t stream_update_capture_dependencies(CUstream stream, cudaGraphNode_t* dependencies,
                                               const cudaGraphEdgeData* edges, size_t count, unsigned int flags);
cudaError_t stream_get_capture_info(CUstream stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                    cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                                    const cudaGraphEdgeData** edges, size_t* count);
cudaError_t event_record(CUevent event, CUstream stream, unsigned int flags = cudaEventRecordDefault);
cudaError_t launch_host_func(CUstream stream, cudaHostFn_t fn, void* user_data);
cudaError_t stream_add_callback(CUstream stream, cudaStreamCallback_t callback, void* user_data, unsigned int flags);
cudaError_t stream_get_priority(CUstream stream, int* priority);
cudaError_t stream_get_flags(CUstream stream, unsigned int* flags);
// stream_attributes_api.cpp
cudaError_t stream_get_attribute(CUstream stream, cudaStreamAttrID attr, cudaStreamAttrValue* value);
cudaError_t stream_set_attribute(CUstream stream, cudaStreamAttrID attr, const cudaStreamAttrValue* value);
cudaError_t stream_copy_attributes(CUstream dst, CUstream src);
cudaError_t stream_get_id(CUstream stream, unsigned long long* id);
cudaError_t stream_get_device(CUstream stream, int* device);

// The library kernel nvcc's host code registered for a host stub, loading its fat binary on first
// use (launch_api.cpp); cudaErrorInvalidDeviceFunction for an address that is no registered stub.
cudaError_t kernel_of(const void* host_function, CUkernel* kernel);
// The host stub registered for a kernel kernel_of has answered; else the kernel handle itself.
const void* host_function_of(CUkernel kernel);

// Kernel launches (launch_api.cpp): of a library kernel, or of the kernel registered for a host stub.
cudaError_t launch_kernel(CUkernel kernel, dim3 grid, dim3 block, void** args, size_t shared_bytes, CUstream stream);
cudaError_t launch_host_function(const void* function, dim3 grid, dim3 block, void** args, size_t shared_bytes,
                                 CUstream stream);
// The driver's form of a runtime launch configuration (the attributes are the same entries), on `stream`.
CUlaunchConfig driver_launch_config(const cudaLaunchConfig_t& config, CUstream stream);
// cudaLaunchKernelExC: `config` with its attributes, on `stream` (config->stream as the caller resolved it).
cudaError_t launch_host_function_ex(const void* function, const cudaLaunchConfig_t* config, void** args,
                                    CUstream stream);
// cudaLaunchCooperativeKernel: a launch with the cooperative attribute.
cudaError_t launch_cooperative(const void* function, dim3 grid, dim3 block, void** args, size_t shared_bytes,
                               CUstream stream);

// Graph launches and instantiation with an upload stream (graph_api.cpp).
cudaError_t graph_launch(cudaGraphExec_t exec, CUstream stream);
cudaError_t graph_upload(cudaGraphExec_t exec, CUstream stream);
cudaError_t graph_instantiate_with_params(cudaGraphExec_t* exec, cudaGraph_t graph, cudaGraphInstantiateParams* params,
                                          bool per_thread);

// The driver's form of a pool's properties (pool_api.cpp; graph allocation nodes take them too).
CUmemPoolProps driver_pool_properties(const cudaMemPoolProps& props);

// cudaMemPrefetchAsync (managed_api.cpp).
cudaError_t prefetch_async(const void* ptr, size_t count, cudaMemLocation location, unsigned int flags,
                           CUstream stream);
// cudaMemPrefetchBatchAsync, cudaMemDiscardBatchAsync (no locations) and
// cudaMemDiscardAndPrefetchBatchAsync on a resolved stream (managed_api.cpp).
enum class Batch { kPrefetch, kDiscard, kDiscardAndPrefetch };
cudaError_t memory_batch_async(void** ptrs, size_t* sizes, size_t count, cudaMemLocation* locations,
                               size_t* first_of, size_t location_count, Batch kind, unsigned long long flags,
                               CUstream stream);
// cudaStreamAttachMemAsync on a resolved stream (managed_api.cpp).
cudaError_t attach_mem_async(CUstream stream, void* ptr, size_t length, unsigned int flags);

cudaError_t malloc_async(void** ptr, size_t size, CUstream stream);
cudaError_t free_async(void* ptr, CUstream stream);
cudaError_t malloc_from_pool_async(void** ptr, size_t size, cudaMemPool_t pool, CUstream stream);

}  // namespace cudasim::runtime
