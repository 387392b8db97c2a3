// What the exported hooks call: the memory policy applied per CUDA context. Hooks stay thin (argument
// checks that must happen before any work, then one call here); all policy lives behind this header.
//
// The memory service: what the hooks (hooks/driver_hooks.cpp) call for cuMemAlloc and its family, context
// life cycle, capture, pointer queries and peer access. The other paths (other_paths.h) and legacy IPC
// (ipc_service.h) have their own headers. Each function has the semantics of the driver call it is named
// after, returns what that call would return, and calls the real driver through real_driver() only.
// When the shim is inert (mode off), each one forwards to the real driver.
#pragma once

#include <cuda.h>

namespace gpumem::shim {

CUresult mem_alloc(CUdeviceptr* dptr, size_t bytes);
CUresult mem_alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                         unsigned int element_size_bytes);
CUresult mem_free(CUdeviceptr dptr);
CUresult mem_get_info(size_t* free_bytes, size_t* total_bytes);  // either pointer may be null

// `per_thread` is true for the _ptsz entry points (stream 0 means the per-thread default stream).
CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool per_thread);
CUresult mem_free_async(CUdeviceptr dptr, CUstream stream, bool per_thread);
CUresult mem_alloc_from_pool_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                   CUstream stream, bool per_thread);

// `context` null means the current context (cuCtxSynchronize); otherwise cuCtxSynchronize_v2(ctx).
CUresult ctx_synchronize(CUcontext context);
CUresult ctx_destroy(CUcontext context);
CUresult primary_ctx_reset(CUdevice device);
CUresult primary_ctx_release(CUdevice device);
// Forwarded to the driver; a capture it began or ended is counted (capture_state.h).
CUresult stream_begin_capture(CUstream stream, CUstreamCaptureMode mode, bool per_thread);
CUresult stream_end_capture(CUstream stream, CUgraph* graph, bool per_thread);

// Pointer queries: the driver answers, then a block of a VMM-backed arena is described as the allocation
// the program made (its range and context), not as the mappings under it.
CUresult mem_get_address_range(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);
CUresult pointer_get_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
CUresult pointer_get_attributes(unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr);
// Peer access: the driver's call, then, on success, the peer context's VMM-backed arena gives the
// current context's device access to its mappings (or takes it back) as cuMemAlloc memory would have it.
CUresult ctx_enable_peer_access(CUcontext peer, unsigned int flags);
CUresult ctx_disable_peer_access(CUcontext peer);

}  // namespace gpumem::shim
