// The per-thread-default-stream entry points (`_ptsz`, `_ptds`), which programs built with
// --default-stream per-thread (CUDA_API_PER_THREAD_DEFAULT_STREAM) call: in them stream 0 names the
// calling thread's default stream instead of the legacy one. With the macro defined the toolkit
// header renames each declaration, so every definition below is checked against its signature.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1

#include "api_headers.h"
#include "entry_point.h"
#include "error_state.h"
#include "operations.h"

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return api_call([&] { return copy(dst, src, count, kind, CU_STREAM_PER_THREAD, Completion::kSynchronous); });
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return api_call([&] { return copy(dst, src, count, kind, per_thread_stream(stream), Completion::kAsynchronous); });
}
cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return api_call([&] { return set(devPtr, value, count, CU_STREAM_PER_THREAD, Completion::kSynchronous); });
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return api_call([&] { return set(devPtr, value, count, per_thread_stream(stream), Completion::kAsynchronous); });
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, CU_STREAM_PER_THREAD, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, per_thread_stream(stream), Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,
                                size_t width, size_t height, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d_to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, CU_STREAM_PER_THREAD,
                            Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,
                                     size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_2d_to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, per_thread_stream(stream),
                            Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                  size_t width, size_t height, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d_from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, CU_STREAM_PER_THREAD,
                              Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpy2DFromArrayAsync(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                       size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_2d_from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, per_thread_stream(stream),
                              Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                     size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height,
                                     enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d_array_to_array(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind,
                                  CU_STREAM_PER_THREAD);
  });
}
cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) {
  return api_call([&] { return copy_3d(p, CU_STREAM_PER_THREAD, Completion::kSynchronous); });
}
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  return api_call([&] { return copy_3d(p, per_thread_stream(stream), Completion::kAsynchronous); });
}
cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms* p) {
  return api_call([&] { return copy_3d_peer(p, CU_STREAM_PER_THREAD, Completion::kSynchronous); });
}
cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms* p, cudaStream_t stream) {
  return api_call([&] { return copy_3d_peer(p, per_thread_stream(stream), Completion::kAsynchronous); });
}
cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return api_call([&] { return set_2d(devPtr, pitch, value, width, height, CU_STREAM_PER_THREAD, Completion::kSynchronous); });
}
cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) {
  return api_call([&] {
    return set_2d(devPtr, pitch, value, width, height, per_thread_stream(stream), Completion::kAsynchronous);
  });
}
cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent) {
  return api_call([&] {
    return set_3d_extent(pitchedDevPtr, value, extent, CU_STREAM_PER_THREAD, Completion::kSynchronous);
  });
}
cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
                              cudaStream_t stream) {
  return api_call([&] {
    return set_3d_extent(pitchedDevPtr, value, extent, per_thread_stream(stream), Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_to_symbol(symbol, src, count, offset, kind, CU_STREAM_PER_THREAD, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_from_symbol(dst, symbol, count, offset, kind, CU_STREAM_PER_THREAD, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_to_symbol(symbol, src, count, offset, kind, per_thread_stream(stream), Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_from_symbol(dst, symbol, count, offset, kind, per_thread_stream(stream), Completion::kAsynchronous);
  });
}

cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                 struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 cudaStream_t stream) {
  return api_call([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, per_thread_stream(stream));
  });
}
cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp* opList, unsigned long long flags,
                                   cudaStream_t stream) {
  return api_call([&] { return copy_3d_batch(numOps, opList, flags, per_thread_stream(stream)); });
}

cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                              enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_linear_array(dst, wOffset, hOffset, src, count, true, kind, CU_STREAM_PER_THREAD,
                             Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                   enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_linear_array(dst, wOffset, hOffset, src, count, true, kind, per_thread_stream(stream),
                             Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                                enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_linear_array(src, wOffset, hOffset, dst, count, false, kind, CU_STREAM_PER_THREAD,
                             Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                                     enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_linear_array(src, wOffset, hOffset, dst, count, false, kind, per_thread_stream(stream),
                             Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                   size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_array_run(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind,
                          CU_STREAM_PER_THREAD);
  });
}

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                             cudaStream_t stream) {
  return api_call([&] { return launch_host_function(func, gridDim, blockDim, args, sharedMem, per_thread_stream(stream)); });
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return api_call([&] {
    return launch_host_function_ex(func, config, args, per_thread_stream(config != nullptr ? config->stream : nullptr));
  });
}
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                        cudaStream_t stream) {
  return api_call([&] { return launch_cooperative(func, gridDim, blockDim, args, sharedMem, per_thread_stream(stream)); });
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return api_call([&] { return stream_synchronize(per_thread_stream(stream)); });
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return api_call([&] { return stream_query(per_thread_stream(stream)); }); }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return api_call([&] { return stream_wait_event(per_thread_stream(stream), event, flags); });
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return api_call([&] { return stream_is_capturing(per_thread_stream(stream), pCaptureStatus); });
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return api_call([&] { return stream_begin_capture(per_thread_stream(stream), mode); });
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  return api_call([&] { return stream_end_capture(per_thread_stream(stream), pGraph); });
}
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                          const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                          enum cudaStreamCaptureMode mode) {
  return api_call([&] {
    return stream_begin_capture_to_graph(per_thread_stream(stream), graph, dependencies, dependencyData,
                                         numDependencies, mode);
  });
}
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t* dependencies,
                                                const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                                unsigned int flags) {
  return api_call([&] {
    return stream_update_capture_dependencies(per_thread_stream(stream), dependencies, dependencyData,
                                              numDependencies, flags);
  });
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  return api_call([&] {
    return stream_get_capture_info(per_thread_stream(stream), captureStatus_out, id_out, graph_out,
                                   dependencies_out, edgeData_out, numDependencies_out);
  });
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return api_call([&] { return event_record(event, per_thread_stream(stream)); });
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return api_call([&] { return event_record(event, per_thread_stream(stream), flags); });
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return api_call([&] { return launch_host_func(per_thread_stream(stream), fn, userData); });
}
cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, struct cudaMemLocation location, unsigned int flags,
                                 cudaStream_t stream) {
  return api_call([&] { return prefetch_async(devPtr, count, location, flags, per_thread_stream(stream)); });
}
cudaError_t cudaMemPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count, struct cudaMemLocation* prefetchLocs,
                                      size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                      cudaStream_t stream) {
  return api_call([&] {
    return memory_batch_async(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, Batch::kPrefetch,
                              flags, per_thread_stream(stream));
  });
}
cudaError_t cudaMemDiscardBatchAsync(void** dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                     cudaStream_t stream) {
  return api_call([&] {
    return memory_batch_async(dptrs, sizes, count, nullptr, nullptr, 0, Batch::kDiscard, flags,
                              per_thread_stream(stream));
  });
}
cudaError_t cudaMemDiscardAndPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                                struct cudaMemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                size_t numPrefetchLocs, unsigned long long flags,
                                                cudaStream_t stream) {
  return api_call([&] {
    return memory_batch_async(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs,
                              Batch::kDiscardAndPrefetch, flags, per_thread_stream(stream));
  });
}
cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* devPtr, size_t length, unsigned int flags) {
  return api_call([&] { return attach_mem_async(per_thread_stream(stream), devPtr, length, flags); });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return api_call([&] { return graph_launch(graphExec, per_thread_stream(stream)); });
}
cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return api_call([&] { return graph_upload(graphExec, per_thread_stream(stream)); });
}
cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams* instantiateParams) {
  return api_call([&] { return graph_instantiate_with_params(pGraphExec, graph, instantiateParams, true); });
}
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                  unsigned int flags) {
  return api_call([&] { return stream_add_callback(per_thread_stream(stream), callback, userData, flags); });
}
cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  return api_call([&] { return stream_get_priority(per_thread_stream(hStream), priority); });
}
cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  return api_call([&] { return stream_get_flags(per_thread_stream(hStream), flags); });
}
cudaError_t cudaStreamGetAttribute(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue* value) {
  return api_call([&] { return stream_get_attribute(per_thread_stream(stream), attr, value); });
}
cudaError_t cudaStreamSetAttribute(cudaStream_t stream, cudaStreamAttrID attr, const cudaStreamAttrValue* param) {
  return api_call([&] { return stream_set_attribute(per_thread_stream(stream), attr, param); });
}
cudaError_t cudaStreamCopyAttributes(cudaStream_t dstStream, cudaStream_t srcStream) {
  return api_call([&] { return stream_copy_attributes(per_thread_stream(dstStream), per_thread_stream(srcStream)); });
}
cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  return api_call([&] { return stream_get_id(per_thread_stream(hStream), streamId); });
}
cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  return api_call([&] { return stream_get_device(per_thread_stream(hStream), device); });
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return api_call([&] { return malloc_async(devPtr, size, per_thread_stream(hStream)); });
}
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return api_call([&] { return free_async(devPtr, per_thread_stream(hStream)); });
}
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return api_call([&] { return malloc_from_pool_async(ptr, size, memPool, per_thread_stream(stream)); });
}

}  // extern "C"
