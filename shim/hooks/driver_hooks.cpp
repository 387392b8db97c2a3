// The exported driver entry points the shim serves. Each is thin: the argument checks the driver
// makes before doing anything, then one call into the memory service (memory_service.h).
#include <new>

#include "hooks/hook_table.h"
#include "hooks/hooks.h"
#include "policy/process_policy.h"
#include "services/ipc_service.h"
#include "services/memory_service.h"
#include "services/other_paths.h"

namespace service = gpumem::shim;
using gpumem::shim::note_hook_reached;

namespace {

// Notes that the program's calls reach the shim, then runs one service call; no exception may cross the
// C ABI into the program.
template <typename Call>
CUresult serve(Call call) noexcept {
  note_hook_reached();
  try {
    if (gpumem::shim::policy_refuses_cuda()) return CUDA_ERROR_NOT_INITIALIZED;  // GPUMEM_STRICT
    return call();
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

// The same, after an argument check the driver makes before doing anything: `invalid` answers
// CUDA_ERROR_INVALID_VALUE without a service call.
template <typename Call>
CUresult serve_checked(bool invalid, Call call) noexcept {
  if (invalid) {
    note_hook_reached();
    return CUDA_ERROR_INVALID_VALUE;
  }
  return serve(call);
}

}  // namespace

extern "C" {

GPUMEM_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return serve_checked(dptr == nullptr, [&] { return service::mem_alloc(dptr, bytesize); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                  size_t WidthInBytes, size_t Height,
                                                  unsigned int ElementSizeBytes) {
  return serve_checked(dptr == nullptr || pPitch == nullptr, [&] {
    return service::mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  return serve([&] { return service::mem_free(dptr); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  return serve([&] { return service::mem_get_info(free, total); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                               CUstream hStream) {
  return serve_checked(dptr == nullptr,
      [&] { return service::mem_alloc_async(dptr, bytesize, hStream, /*per_thread=*/false); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                    CUstream stream) {
  return serve_checked(dptr == nullptr,
      [&] { return service::mem_alloc_async(dptr, bytesize, stream, /*per_thread=*/true); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return serve([&] { return service::mem_free_async(dptr, hStream, /*per_thread=*/false); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return serve([&] { return service::mem_free_async(dptr, stream, /*per_thread=*/true); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                       CUmemoryPool pool, CUstream hStream) {
  return serve_checked(dptr == nullptr, [&] {
    return service::mem_alloc_from_pool_async(dptr, bytesize, pool, hStream, /*per_thread=*/false);
  });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                            CUmemoryPool pool, CUstream stream) {
  return serve_checked(dptr == nullptr, [&] {
    return service::mem_alloc_from_pool_async(dptr, bytesize, pool, stream, /*per_thread=*/true);
  });
}

GPUMEM_EXPORT CUresult CUDAAPI cuCtxSynchronize() {
  return serve([&] { return service::ctx_synchronize(nullptr); });
}

// CUDA 13: what cuGetProcAddress("cuCtxSynchronize", 13000) returns.
GPUMEM_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  return serve([&] { return service::ctx_synchronize(ctx); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  return serve([&] { return service::ctx_destroy(ctx); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return serve([&] { return service::primary_ctx_reset(dev); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return serve([&] { return service::primary_ctx_release(dev); });
}

// The pre-11.0 name: same ABI as _v2.
GPUMEM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v7000_hook(CUdevice dev) {
  return serve([&] { return service::primary_ctx_release(dev); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  return serve_checked(pHandle == nullptr, [&] { return service::ipc_get_mem_handle(pHandle, dptr); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                                     unsigned int Flags) {
  return serve_checked(pdptr == nullptr, [&] { return service::ipc_open_mem_handle(pdptr, handle, Flags); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return serve([&] { return service::ipc_close_mem_handle(dptr); });
}

// Captures are only counted (capture_state.h): the shim then avoids calls a capture forbids.
GPUMEM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return serve([&] { return service::stream_begin_capture(hStream, mode, /*per_thread=*/false); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return serve([&] { return service::stream_begin_capture(hStream, mode, /*per_thread=*/true); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return serve([&] { return service::stream_end_capture(hStream, phGraph, /*per_thread=*/false); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return serve([&] { return service::stream_end_capture(hStream, phGraph, /*per_thread=*/true); });
}

// --- pointer queries and peer access (services/memory_service.cpp) ---

GPUMEM_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return serve([&] { return service::mem_get_address_range(pbase, psize, dptr); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return serve([&] { return service::pointer_get_attribute(data, attribute, ptr); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                                      void** data, CUdeviceptr ptr) {
  return serve([&] { return service::pointer_get_attributes(numAttributes, attributes, data, ptr); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  return serve([&] { return service::ctx_enable_peer_access(peerContext, Flags); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  return serve([&] { return service::ctx_disable_peer_access(peerContext); });
}

// --- the other paths that take device memory, charged to the budget (services/other_paths.cpp) ---

GPUMEM_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  return serve_checked(bytes == nullptr, [&] { return service::device_total_mem(bytes, dev); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                           const CUmemAllocationProp* prop, unsigned long long flags) {
  return serve([&] { return service::mem_create(handle, size, prop, flags); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  return serve([&] { return service::mem_release(handle); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                        CUmemGenericAllocationHandle handle, unsigned long long flags) {
  return serve([&] { return service::mem_map(ptr, size, offset, handle, flags); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return serve([&] { return service::mem_unmap(ptr, size); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  return serve([&] { return service::mem_retain_allocation_handle(handle, addr); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return serve([&] { return service::mem_alloc_managed(dptr, bytesize, flags); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  return serve_checked(pHandle == nullptr || pAllocateArray == nullptr, [&] { return service::array_create(pHandle, pAllocateArray); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  return serve_checked(pHandle == nullptr || pAllocateArray == nullptr, [&] { return service::array_3d_create(pHandle, pAllocateArray); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  return serve([&] { return service::array_destroy(hArray); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                                      const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                                      unsigned int numMipmapLevels) {
  return serve_checked(pHandle == nullptr || pMipmappedArrayDesc == nullptr, [&] { return service::mipmapped_array_create(pHandle, pMipmappedArrayDesc, numMipmapLevels); });
}

GPUMEM_EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return serve([&] { return service::mipmapped_array_destroy(hMipmappedArray); });
}

}  // extern "C"
