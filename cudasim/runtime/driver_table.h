// The driver entry points this runtime uses, resolved the way NVIDIA's runtime resolves them:
// dlopen("libcuda.so.1"), dlsym of cuGetProcAddress_v2 (or cuGetProcAddress), then one
// cuGetProcAddress call per base name. The driver is never linked and no other name goes through
// dlsym, so a library that interposes dlsym and answers cuGetProcAddress sees every request.
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// The per-thread-default-stream macros rename driver functions too; the table is built without.
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "driver_table.h is for translation units built with the legacy default stream"
#endif

// Base names as cuGetProcAddress takes them, each with the version of its entry point that a
// CUDA 13.0 request returns: the member's type is cudaTypedefs.h's PFN_<name>_v<version>, which is
// not always the signature cuda.h declares under the base name (cuCtxSynchronize answers
// cuCtxSynchronize_v2(CUcontext) for 13.0).
#define CUDASIM_RUNTIME_DRIVER_ENTRIES(X)                                                          \
  X(cuInit, 2000) X(cuDriverGetVersion, 2020) X(cuDeviceGet, 2000) X(cuDeviceGetCount, 2000)      \
  X(cuDeviceGetName, 2000) X(cuDeviceTotalMem, 3020) X(cuDeviceGetAttribute, 2000)                \
  X(cuDevicePrimaryCtxRetain, 7000) X(cuDevicePrimaryCtxReset, 11000) X(cuCtxGetCurrent, 4000)   \
  X(cuCtxSetCurrent, 4000) X(cuCtxGetDevice, 13000) X(cuCtxSynchronize, 13000)                    \
  X(cuMemAlloc, 3020) X(cuMemFree, 3020) X(cuMemAllocPitch, 3020) X(cuMemGetInfo, 3020)           \
  X(cuMemcpy, 4000) X(cuMemcpyAsync, 4000) X(cuMemcpyHtoD, 3020) X(cuMemcpyDtoH, 3020)            \
  X(cuMemcpyDtoD, 3020) X(cuMemcpyHtoDAsync, 3020) X(cuMemcpyDtoHAsync, 3020)                     \
  X(cuMemcpyDtoDAsync, 3020) X(cuMemsetD8, 3020) X(cuMemsetD8Async, 3020) X(cuStreamCreate, 2000) \
  X(cuStreamDestroy, 4000) X(cuStreamSynchronize, 2000) X(cuStreamQuery, 2000)                    \
  X(cuStreamWaitEvent, 3020) X(cuStreamIsCapturing, 10000) X(cuEventCreate, 2000)                 \
  X(cuEventRecord, 2000) X(cuEventQuery, 2000) X(cuEventSynchronize, 2000)                        \
  X(cuEventDestroy, 4000) X(cuEventElapsedTime, 12080) X(cuLaunchHostFunc, 10000)                 \
  X(cuDeviceGetDefaultMemPool, 11020) X(cuMemPoolCreate, 11020) X(cuMemPoolDestroy, 11020)        \
  X(cuMemPoolSetAttribute, 11020) X(cuMemPoolGetAttribute, 11020) X(cuMemPoolTrimTo, 11020)       \
  X(cuMemPoolSetAccess, 11020) X(cuMemPoolGetAccess, 11020)                                       \
  X(cuMemAllocAsync, 11020) X(cuMemFreeAsync, 11020) X(cuMemAllocFromPoolAsync, 11020)            \
  X(cuPointerGetAttribute, 4000) X(cuStreamBeginCapture, 10010) X(cuStreamEndCapture, 10000)       \
  X(cuStreamGetCaptureInfo, 12030) X(cuThreadExchangeStreamCaptureMode, 10010)                    \
  X(cuGraphDestroy, 10000) X(cuArray3DCreate, 3020) X(cuArrayDestroy, 2000)                       \
  X(cuMipmappedArrayCreate, 5000) X(cuMipmappedArrayDestroy, 5000)                                \
  X(cuMemAllocManaged, 6000)                                                                      \
  X(cuIpcGetMemHandle, 4010) X(cuIpcOpenMemHandle, 11000) X(cuIpcCloseMemHandle, 4010)            \
  X(cuLibraryLoadData, 12000) X(cuLibraryGetKernel, 12000) X(cuLaunchKernel, 4000)                \
  X(cuLaunchKernelEx, 11060) X(cuLibraryLoadFromFile, 12000) X(cuLibraryUnload, 12000)            \
  X(cuLibraryGetKernelCount, 12040) X(cuLibraryEnumerateKernels, 12040) X(cuKernelGetName, 12030)  \
  X(cuKernelGetParamInfo, 12040) X(cuLibraryGetUnifiedFunction, 12000)                           \
  X(cuLibraryGetGlobal, 12000) X(cuLibraryGetManaged, 12000)                                      \
  X(cuOccupancyMaxPotentialClusterSize, 11070) X(cuOccupancyMaxActiveClusters, 11070)             \
  X(cuFuncSetSharedMemConfig, 4020)                                                               \
  X(cuMemHostAlloc, 2020) X(cuMemFreeHost, 2000) X(cuMemHostGetDevicePointer, 3020)               \
  X(cuMemHostGetFlags, 2030) X(cuMemHostRegister, 6050) X(cuMemHostUnregister, 4000)             \
  X(cuDeviceCanAccessPeer, 4000) X(cuDeviceGetP2PAttribute, 8000) X(cuCtxEnablePeerAccess, 4000)  \
  X(cuCtxDisablePeerAccess, 4000)                                                                 \
  X(cuDevicePrimaryCtxSetFlags, 11000) X(cuDevicePrimaryCtxGetState, 7000)                        \
  X(cuStreamAddCallback, 5000) X(cuStreamCreateWithPriority, 5050) X(cuStreamGetPriority, 5050)   \
  X(cuStreamGetFlags, 5050) X(cuCtxGetStreamPriorityRange, 5050) X(cuCtxSetLimit, 3010)            \
  X(cuCtxGetLimit, 3010) X(cuCtxSetCacheConfig, 3020) X(cuCtxGetCacheConfig, 3020)                \
  X(cuProfilerStart, 4000) X(cuProfilerStop, 4000) X(cuKernelGetAttribute, 12000)                 \
  X(cuKernelSetAttribute, 12000) X(cuKernelSetCacheConfig, 12000)                                 \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000)                                   \
  X(cuOccupancyAvailableDynamicSMemPerBlock, 10020)                                               \
  X(cuIpcGetEventHandle, 4010) X(cuIpcOpenEventHandle, 4010)                                     \
  X(cuGraphCreate, 10000) X(cuGraphAddEmptyNode, 10000) X(cuGraphAddHostNode, 10000)              \
  X(cuGraphAddKernelNode, 12000) X(cuGraphAddMemsetNode, 10000) X(cuGraphAddMemcpyNode, 10000)    \
  X(cuGraphGetNodes, 10000) X(cuGraphGetRootNodes, 10000) X(cuGraphNodeGetType, 10000)            \
  X(cuGraphNodeGetDependencies, 12030) X(cuGraphInstantiateWithFlags, 11040)                      \
  X(cuGraphInstantiateWithParams, 12000) X(cuGraphLaunch, 10000) X(cuGraphUpload, 11010)          \
  X(cuGraphExecDestroy, 10000) X(cuMemcpyPeer, 4000) X(cuMemcpyPeerAsync, 4000)                  \
  X(cuDeviceGetMemPool, 11020) X(cuDeviceSetMemPool, 11020)                                       \
  X(cuMemGetDefaultMemPool, 13000) X(cuMemGetMemPool, 13000) X(cuMemSetMemPool, 13000)            \
  X(cuMemPoolExportToShareableHandle, 11020) X(cuMemPoolImportFromShareableHandle, 11020)         \
  X(cuMemPoolExportPointer, 11020) X(cuMemPoolImportPointer, 11020)                              \
  X(cuDeviceGetGraphMemAttribute, 11040) X(cuDeviceSetGraphMemAttribute, 11040)                  \
  X(cuDeviceGraphMemTrim, 11040) X(cuGraphAddMemAllocNode, 11040) X(cuGraphAddMemFreeNode, 11040)      \
  X(cuGraphMemAllocNodeGetParams, 11040) X(cuGraphMemFreeNodeGetParams, 11040)                     \
  X(cuGraphClone, 10000) X(cuGraphDestroyNode, 10000) X(cuGraphAddDependencies, 12030)                \
  X(cuGraphRemoveDependencies, 12030) X(cuGraphGetEdges, 12030) X(cuGraphAddChildGraphNode, 10000)     \
  X(cuGraphChildGraphNodeGetGraph, 10000) X(cuGraphHostNodeGetParams, 10000)                          \
  X(cuGraphHostNodeSetParams, 10000) X(cuGraphAddEventRecordNode, 11010)                            \
  X(cuGraphAddEventWaitNode, 11010) X(cuGraphEventRecordNodeGetEvent, 11010)                         \
  X(cuGraphEventRecordNodeSetEvent, 11010) X(cuGraphEventWaitNodeGetEvent, 11010)                    \
  X(cuGraphEventWaitNodeSetEvent, 11010) X(cuGraphMemsetNodeGetParams, 10000)                        \
  X(cuGraphMemsetNodeSetParams, 10000) X(cuGraphMemcpyNodeGetParams, 10000)                          \
  X(cuGraphMemcpyNodeSetParams, 10000) X(cuGraphKernelNodeGetParams, 12000)                          \
  X(cuGraphKernelNodeSetParams, 12000) X(cuGraphExecKernelNodeSetParams, 12000)                      \
  X(cuGraphExecMemcpyNodeSetParams, 10020) X(cuGraphExecMemsetNodeSetParams, 10020)                  \
  X(cuGraphExecHostNodeSetParams, 10020) X(cuGraphExecChildGraphNodeSetParams, 11010)                \
  X(cuGraphExecEventRecordNodeSetEvent, 11010) X(cuGraphExecEventWaitNodeSetEvent, 11010)            \
  X(cuGraphExecUpdate, 12000) X(cuGraphExecGetFlags, 12000) X(cuMemAdvise, 12020)                    \
  X(cuMemPrefetchAsync, 12020) X(cuMemRangeGetAttribute, 8000) X(cuMemRangeGetAttributes, 8000)    \
  X(cuStreamAttachMemAsync, 6000) X(cuGraphNodeSetEnabled, 11060) X(cuGraphNodeGetEnabled, 11060)    \
  X(cuGraphKernelNodeGetAttribute, 11000) X(cuGraphKernelNodeSetAttribute, 11000)                    \
  X(cuGraphKernelNodeCopyAttributes, 11000) X(cuGraphAddNode, 12030) X(cuGraphNodeSetParams, 12020)   \
  X(cuGraphExecNodeSetParams, 12020) X(cuMemPrefetchBatchAsync, 13000) X(cuMemDiscardBatchAsync, 13000)   \
  X(cuMemDiscardAndPrefetchBatchAsync, 13000) X(cuMemcpy3D, 3020) X(cuMemcpy3DAsync, 3020)        \
  X(cuMemcpy3DPeer, 4000) X(cuMemcpy3DPeerAsync, 4000) X(cuMemsetD2D8, 3020)                      \
  X(cuMemsetD2D8Async, 3020) X(cuArray3DGetDescriptor, 3020) X(cuMemcpyBatchAsync, 13000)          \
  X(cuMemcpy3DBatchAsync, 13000) X(cuDeviceGetPCIBusId, 4010) X(cuDeviceGetByPCIBusId, 4010)          \
  X(cuDeviceGetHostAtomicCapabilities, 13000) X(cuArrayGetMemoryRequirements, 11060)                \
  X(cuMipmappedArrayGetMemoryRequirements, 11060) X(cuMipmappedArrayGetLevel, 5000)       \
  X(cuDeviceRegisterAsyncNotification, 12040) X(cuDeviceUnregisterAsyncNotification, 12040)  \
  X(cuStreamGetAttribute, 11000) X(cuStreamSetAttribute, 11000) X(cuStreamCopyAttributes, 11000)  \
  X(cuStreamGetId, 12000) X(cuStreamGetDevice, 12080) X(cuEventRecordWithFlags, 11010)          \
  X(cuGraphNodeGetDependentNodes, 12030) X(cuGraphNodeFindInClone, 10000)                          \
  X(cuUserObjectCreate, 11030) X(cuUserObjectRetain, 11030) X(cuUserObjectRelease, 11030)          \
  X(cuGraphRetainUserObject, 11030) X(cuGraphReleaseUserObject, 11030)                             \
  X(cuStreamBeginCaptureToGraph, 12030) X(cuStreamUpdateCaptureDependencies, 12030)                \
  X(cuGraphConditionalHandleCreate, 12030) X(cuGraphDebugDotPrint, 11030)                         \
  X(cuCtxResetPersistingL2Cache, 11000) X(cuDeviceGetP2PAtomicCapabilities, 13000)                \
  X(cuDeviceGetTexture1DLinearMaxWidth, 11010) X(cuFlushGPUDirectRDMAWrites, 11030)                \
  X(cuArrayGetPlane, 11020) X(cuArrayGetSparseProperties, 11010)                                   \
  X(cuMipmappedArrayGetSparseProperties, 11010)                                                   \
  X(cuTexObjectCreate, 5000) X(cuTexObjectDestroy, 5000) X(cuTexObjectGetResourceDesc, 5000)       \
  X(cuTexObjectGetTextureDesc, 5000) X(cuTexObjectGetResourceViewDesc, 5000)                       \
  X(cuSurfObjectCreate, 5000) X(cuSurfObjectDestroy, 5000) X(cuSurfObjectGetResourceDesc, 5000)

// Invariant: written once, before driver_status() first returns; never changed afterwards (the driver
// library is never closed). A member is null when the driver did not provide that entry point.
struct DriverTable {
#define CUDASIM_RUNTIME_DECLARE_ENTRY(name, version) PFN_##name##_v##version name = nullptr;
  CUDASIM_RUNTIME_DRIVER_ENTRIES(CUDASIM_RUNTIME_DECLARE_ENTRY)
#undef CUDASIM_RUNTIME_DECLARE_ENTRY
  // The driver's own cuGetProcAddress (the _v2 form when exported, else the first), found with
  // dlsym: cudaGetDriverEntryPoint* answer through it.
  PFN_cuGetProcAddress_v12000 get_proc_address_v2 = nullptr;
  PFN_cuGetProcAddress_v11030 get_proc_address_v1 = nullptr;
};

// Loads the driver and calls cuInit(0) once per process, on first use, thread-safely. Returns the
// outcome of that one attempt on every call: cudaErrorInsufficientDriver when libcuda.so.1 cannot
// be loaded, lacks cuGetProcAddress, or is older than 13.0; otherwise cuInit's translated result.
cudaError_t driver_status();

// The resolved table; only meaningful after driver_status() returned cudaSuccess.
const DriverTable& driver();

// Translates a driver result into the runtime's error code, as NVIDIA's runtime reports it.
cudaError_t translate(CUresult result);

// Calls one driver entry point and translates its result; an entry point the driver did not provide
// answers cudaErrorInsufficientDriver, as the real runtime does for a driver too old for a call.
template <auto Entry, typename... Args>
cudaError_t call_driver(Args... args) {
  const auto function = driver().*Entry;
  if (function == nullptr) return cudaErrorInsufficientDriver;
  return translate(function(args...));
}

// The driver's version, or 0 when no driver could be loaded.
int loaded_driver_version();

}  // namespace cudasim::runtime
