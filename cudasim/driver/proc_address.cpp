// cuGetProcAddress / cuGetProcAddress_v2: base name + CUDA version + flags -> versioned entry point.
//
// The table follows the toolkit's cudaTypedefs.h: each PFN_<name>_v<version> is one row, giving
// the exported function that answers requests with cudaVersion >= version (the highest such row
// wins). A row with no function marks an ABI the real driver has but the simulator does not
// (the 32-bit v1 forms): asking for it reports the symbol as not found rather
// than handing out a function with the wrong signature. Rows newer than the simulated driver
// (CUDASIM_DRIVER_VERSION) are never answered: the request is served as if for that version.
#include "state.h"

#include <algorithm>
#include <cstring>

using namespace cudasim;

namespace {

struct ProcEntry {
  const char* name;
  int version;
  void* legacy;      // what CU_GET_PROC_ADDRESS_DEFAULT / LEGACY_STREAM get
  void* per_thread;  // the _ptds/_ptsz form, when one exists (from CUDA 7.0)
};

template <typename F>
void* fn(F* f) {
  return reinterpret_cast<void*>(f);
}

constexpr int kPerThreadSince = 7000;

// clang-format off
const ProcEntry kEntries[] = {
  {"cuInit", 2000, fn(cuInit), nullptr},
  {"cuDriverGetVersion", 2020, fn(cuDriverGetVersion), nullptr},
  {"cuGetErrorString", 6000, fn(cuGetErrorString), nullptr},
  {"cuGetErrorName", 6000, fn(cuGetErrorName), nullptr},
  {"cuGetProcAddress", 11030, fn<CUresult(const char*, void**, int, cuuint64_t)>(cuGetProcAddress), nullptr},
  {"cuGetProcAddress", 12000, fn(cuGetProcAddress_v2), nullptr},
  // devices
  {"cuDeviceGet", 2000, fn(cuDeviceGet), nullptr},
  {"cuDeviceGetCount", 2000, fn(cuDeviceGetCount), nullptr},
  {"cuDeviceGetName", 2000, fn(cuDeviceGetName), nullptr},
  {"cuDeviceTotalMem", 2000, nullptr, nullptr},
  {"cuDeviceTotalMem", 3020, fn(cuDeviceTotalMem_v2), nullptr},
  {"cuDeviceGetAttribute", 2000, fn(cuDeviceGetAttribute), nullptr},
  {"cuDeviceGetUuid", 9020, fn(cuDeviceGetUuid), nullptr},
  {"cuDeviceGetUuid", 11040, fn(cuDeviceGetUuid_v2), nullptr},
  {"cuDeviceComputeCapability", 2000, fn(cuDeviceComputeCapability), nullptr},
  {"cuDeviceGetProperties", 2000, fn(cuDeviceGetProperties), nullptr},
  {"cuDeviceGetPCIBusId", 4010, fn(cuDeviceGetPCIBusId), nullptr},
  {"cuDeviceGetByPCIBusId", 4010, fn(cuDeviceGetByPCIBusId), nullptr},
  {"cuDeviceGetExecAffinitySupport", 11040, fn(cuDeviceGetExecAffinitySupport), nullptr},
  {"cuDeviceGetHostAtomicCapabilities", 13000, fn(cuDeviceGetHostAtomicCapabilities), nullptr},
  {"cuDeviceRegisterAsyncNotification", 12040, fn(cuDeviceRegisterAsyncNotification), nullptr},
  {"cuDeviceUnregisterAsyncNotification", 12040, fn(cuDeviceUnregisterAsyncNotification), nullptr},
  // primary contexts
  {"cuDevicePrimaryCtxRetain", 7000, fn(cuDevicePrimaryCtxRetain), nullptr},
  {"cuDevicePrimaryCtxRelease", 7000, fn(cuDevicePrimaryCtxRelease), nullptr},
  {"cuDevicePrimaryCtxRelease", 11000, fn(cuDevicePrimaryCtxRelease_v2), nullptr},
  {"cuDevicePrimaryCtxReset", 7000, fn(cuDevicePrimaryCtxReset), nullptr},
  {"cuDevicePrimaryCtxReset", 11000, fn(cuDevicePrimaryCtxReset_v2), nullptr},
  {"cuDevicePrimaryCtxSetFlags", 7000, fn(cuDevicePrimaryCtxSetFlags), nullptr},
  {"cuDevicePrimaryCtxSetFlags", 11000, fn(cuDevicePrimaryCtxSetFlags_v2), nullptr},
  {"cuDevicePrimaryCtxGetState", 7000, fn(cuDevicePrimaryCtxGetState), nullptr},
  // contexts
  {"cuCtxCreate", 2000, fn(cuCtxCreate), nullptr},
  {"cuCtxCreate", 3020, fn(cuCtxCreate_v2), nullptr},
  {"cuCtxCreate", 11040, fn(cuCtxCreate_v3), nullptr},
  {"cuCtxCreate", 12050, fn(cuCtxCreate_v4), nullptr},
  {"cuCtxDestroy", 2000, fn(cuCtxDestroy), nullptr},
  {"cuCtxDestroy", 4000, fn(cuCtxDestroy_v2), nullptr},
  {"cuCtxGetCurrent", 4000, fn(cuCtxGetCurrent), nullptr},
  {"cuCtxSetCurrent", 4000, fn(cuCtxSetCurrent), nullptr},
  {"cuCtxPushCurrent", 2000, fn(cuCtxPushCurrent), nullptr},
  {"cuCtxPushCurrent", 4000, fn(cuCtxPushCurrent_v2), nullptr},
  {"cuCtxPopCurrent", 2000, fn(cuCtxPopCurrent), nullptr},
  {"cuCtxPopCurrent", 4000, fn(cuCtxPopCurrent_v2), nullptr},
  {"cuCtxGetDevice", 2000, fn(cuCtxGetDevice), nullptr},
  {"cuCtxGetDevice", 13000, fn(cuCtxGetDevice_v2), nullptr},
  {"cuCtxSynchronize", 2000, fn(cuCtxSynchronize), nullptr},
  {"cuCtxSynchronize", 13000, fn(cuCtxSynchronize_v2), nullptr},
  {"cuCtxGetFlags", 7000, fn(cuCtxGetFlags), nullptr},
  {"cuCtxGetApiVersion", 3020, fn(cuCtxGetApiVersion), nullptr},
  {"cuCtxGetId", 12000, fn(cuCtxGetId), nullptr},
  // memory
  {"cuMemAlloc", 2000, nullptr, nullptr},
  {"cuMemAlloc", 3020, fn(cuMemAlloc_v2), nullptr},
  {"cuMemAllocPitch", 2000, nullptr, nullptr},
  {"cuMemAllocPitch", 3020, fn(cuMemAllocPitch_v2), nullptr},
  {"cuMemFree", 2000, nullptr, nullptr},
  {"cuMemFree", 3020, fn(cuMemFree_v2), nullptr},
  {"cuMemGetInfo", 2000, nullptr, nullptr},
  {"cuMemGetInfo", 3020, fn(cuMemGetInfo_v2), nullptr},
  {"cuMemGetAddressRange", 2000, nullptr, nullptr},
  {"cuMemGetAddressRange", 3020, fn(cuMemGetAddressRange_v2), nullptr},
  {"cuPointerGetAttribute", 4000, fn(cuPointerGetAttribute), nullptr},
  {"cuPointerGetAttributes", 7000, fn(cuPointerGetAttributes), nullptr},
  {"cuPointerSetAttribute", 6000, fn(cuPointerSetAttribute), nullptr},
  {"cuIpcGetMemHandle", 4010, fn(cuIpcGetMemHandle), nullptr},
  {"cuIpcOpenMemHandle", 4010, nullptr, nullptr},  // the pre-11.0 form is not simulated
  {"cuIpcOpenMemHandle", 11000, fn(cuIpcOpenMemHandle_v2), nullptr},
  {"cuIpcCloseMemHandle", 4010, fn(cuIpcCloseMemHandle), nullptr},
  {"cuIpcGetEventHandle", 4010, fn(cuIpcGetEventHandle), nullptr},
  {"cuIpcOpenEventHandle", 4010, fn(cuIpcOpenEventHandle), nullptr},
  {"cuMemAllocManaged", 6000, fn(cuMemAllocManaged), nullptr},
  {"cuMemAdvise", 8000, fn(cuMemAdvise), nullptr},
  {"cuMemAdvise", 12020, fn(cuMemAdvise_v2), nullptr},
  {"cuMemPrefetchAsync", 8000, fn(cuMemPrefetchAsync), fn(cuMemPrefetchAsync_ptsz)},
  {"cuMemPrefetchAsync", 12020, fn(cuMemPrefetchAsync_v2), fn(cuMemPrefetchAsync_v2_ptsz)},
  {"cuMemRangeGetAttribute", 8000, fn(cuMemRangeGetAttribute), nullptr},
  {"cuMemRangeGetAttributes", 8000, fn(cuMemRangeGetAttributes), nullptr},
  {"cuMemPrefetchBatchAsync", 13000, fn(cuMemPrefetchBatchAsync), fn(cuMemPrefetchBatchAsync_ptsz)},
  {"cuMemDiscardBatchAsync", 13000, fn(cuMemDiscardBatchAsync), fn(cuMemDiscardBatchAsync_ptsz)},
  {"cuMemDiscardAndPrefetchBatchAsync", 13000, fn(cuMemDiscardAndPrefetchBatchAsync), fn(cuMemDiscardAndPrefetchBatchAsync_ptsz)},
  {"cuStreamAttachMemAsync", 6000, fn(cuStreamAttachMemAsync), fn(cuStreamAttachMemAsync_ptsz)},
  // pinned host memory
  {"cuMemHostAlloc", 2020, fn(cuMemHostAlloc), nullptr},
  {"cuMemAllocHost", 2000, nullptr, nullptr},
  {"cuMemAllocHost", 3020, fn(cuMemAllocHost_v2), nullptr},
  {"cuMemFreeHost", 2000, fn(cuMemFreeHost), nullptr},
  {"cuMemHostGetDevicePointer", 2020, nullptr, nullptr},
  {"cuMemHostGetDevicePointer", 3020, fn(cuMemHostGetDevicePointer_v2), nullptr},
  {"cuMemHostGetFlags", 2030, fn(cuMemHostGetFlags), nullptr},
  {"cuMemHostRegister", 4000, fn(cuMemHostRegister), nullptr},
  {"cuMemHostRegister", 6050, fn(cuMemHostRegister_v2), nullptr},
  {"cuMemHostUnregister", 4000, fn(cuMemHostUnregister), nullptr},
  // peer access
  {"cuDeviceCanAccessPeer", 4000, fn(cuDeviceCanAccessPeer), nullptr},
  {"cuCtxEnablePeerAccess", 4000, fn(cuCtxEnablePeerAccess), nullptr},
  {"cuCtxDisablePeerAccess", 4000, fn(cuCtxDisablePeerAccess), nullptr},
  {"cuDeviceGetP2PAttribute", 8000, fn(cuDeviceGetP2PAttribute), nullptr},
  // modules, libraries and launches
  {"cuModuleLoadData", 2000, fn(cuModuleLoadData), nullptr},
  {"cuModuleLoadDataEx", 2010, fn(cuModuleLoadDataEx), nullptr},
  {"cuModuleLoadFatBinary", 2000, fn(cuModuleLoadFatBinary), nullptr},
  {"cuModuleUnload", 2000, fn(cuModuleUnload), nullptr},
  {"cuModuleGetFunction", 2000, fn(cuModuleGetFunction), nullptr},
  {"cuLibraryLoadData", 12000, fn(cuLibraryLoadData), nullptr},
  {"cuLibraryUnload", 12000, fn(cuLibraryUnload), nullptr},
  {"cuLibraryGetKernel", 12000, fn(cuLibraryGetKernel), nullptr},
  {"cuLaunchKernel", 4000, fn(cuLaunchKernel), fn(cuLaunchKernel_ptsz)},
  {"cuLaunchKernelEx", 11060, fn(cuLaunchKernelEx), fn(cuLaunchKernelEx_ptsz)},
  {"cuLaunchCooperativeKernel", 9000, fn(cuLaunchCooperativeKernel), fn(cuLaunchCooperativeKernel_ptsz)},
  {"cuModuleLoad", 2000, fn(cuModuleLoad), nullptr},
  {"cuModuleGetLoadingMode", 11070, fn(cuModuleGetLoadingMode), nullptr},
  {"cuModuleGetFunctionCount", 12040, fn(cuModuleGetFunctionCount), nullptr},
  {"cuModuleEnumerateFunctions", 12040, fn(cuModuleEnumerateFunctions), nullptr},
  {"cuLibraryLoadFromFile", 12000, fn(cuLibraryLoadFromFile), nullptr},
  {"cuLibraryGetModule", 12000, fn(cuLibraryGetModule), nullptr},
  {"cuLibraryGetKernelCount", 12040, fn(cuLibraryGetKernelCount), nullptr},
  {"cuLibraryEnumerateKernels", 12040, fn(cuLibraryEnumerateKernels), nullptr},
  {"cuKernelGetLibrary", 12050, fn(cuKernelGetLibrary), nullptr},
  {"cuLibraryGetUnifiedFunction", 12000, fn(cuLibraryGetUnifiedFunction), nullptr},
  {"cuFuncGetModule", 11000, fn(cuFuncGetModule), nullptr},
  {"cuFuncIsLoaded", 12040, fn(cuFuncIsLoaded), nullptr},
  {"cuFuncLoad", 12040, fn(cuFuncLoad), nullptr},
  {"cuFuncSetBlockShape", 2000, fn(cuFuncSetBlockShape), nullptr},
  {"cuFuncSetSharedSize", 2000, fn(cuFuncSetSharedSize), nullptr},
  {"cuFuncSetSharedMemConfig", 4020, fn(cuFuncSetSharedMemConfig), nullptr},
  {"cuParamSetSize", 2000, fn(cuParamSetSize), nullptr},
  {"cuParamSeti", 2000, fn(cuParamSeti), nullptr},
  {"cuParamSetf", 2000, fn(cuParamSetf), nullptr},
  {"cuParamSetv", 2000, fn(cuParamSetv), nullptr},
  {"cuLaunch", 2000, fn(cuLaunch), nullptr},
  {"cuLaunchGrid", 2000, fn(cuLaunchGrid), nullptr},
  {"cuLaunchGridAsync", 2000, fn(cuLaunchGridAsync), nullptr},
  {"cuFuncGetParamInfo", 12040, fn(cuFuncGetParamInfo), nullptr},
  {"cuKernelGetParamInfo", 12040, fn(cuKernelGetParamInfo), nullptr},
  // the JIT linker
  {"cuLinkCreate", 5050, fn(cuLinkCreate), nullptr},
  {"cuLinkCreate", 6050, fn(cuLinkCreate_v2), nullptr},
  {"cuLinkAddData", 5050, fn(cuLinkAddData), nullptr},
  {"cuLinkAddData", 6050, fn(cuLinkAddData_v2), nullptr},
  {"cuLinkAddFile", 5050, fn(cuLinkAddFile), nullptr},
  {"cuLinkAddFile", 6050, fn(cuLinkAddFile_v2), nullptr},
  {"cuLinkComplete", 5050, fn(cuLinkComplete), nullptr},
  {"cuLinkDestroy", 5050, fn(cuLinkDestroy), nullptr},
  // virtual memory management
  {"cuMemGetAllocationGranularity", 10020, fn(cuMemGetAllocationGranularity), nullptr},
  {"cuMemAddressReserve", 10020, fn(cuMemAddressReserve), nullptr},
  {"cuMemAddressFree", 10020, fn(cuMemAddressFree), nullptr},
  {"cuMemCreate", 10020, fn(cuMemCreate), nullptr},
  {"cuMemRelease", 10020, fn(cuMemRelease), nullptr},
  {"cuMemMap", 10020, fn(cuMemMap), nullptr},
  {"cuMemUnmap", 10020, fn(cuMemUnmap), nullptr},
  {"cuMemSetAccess", 10020, fn(cuMemSetAccess), nullptr},
  {"cuMemGetAccess", 10020, fn(cuMemGetAccess), nullptr},
  {"cuMemGetAllocationPropertiesFromHandle", 10020, fn(cuMemGetAllocationPropertiesFromHandle), nullptr},
  {"cuMemRetainAllocationHandle", 11000, fn(cuMemRetainAllocationHandle), nullptr},
  {"cuMemExportToShareableHandle", 10020, fn(cuMemExportToShareableHandle), nullptr},
  {"cuMemImportFromShareableHandle", 10020, fn(cuMemImportFromShareableHandle), nullptr},
  // arrays and mipmapped arrays (the 2000 rows: the 32-bit descriptor forms, not simulated)
  {"cuArrayCreate", 2000, nullptr, nullptr},
  {"cuArrayCreate", 3020, fn(cuArrayCreate_v2), nullptr},
  {"cuArrayGetDescriptor", 2000, nullptr, nullptr},
  {"cuArrayGetDescriptor", 3020, fn(cuArrayGetDescriptor_v2), nullptr},
  {"cuArray3DCreate", 2000, nullptr, nullptr},
  {"cuArray3DCreate", 3020, fn(cuArray3DCreate_v2), nullptr},
  {"cuArray3DGetDescriptor", 2000, nullptr, nullptr},
  {"cuArray3DGetDescriptor", 3020, fn(cuArray3DGetDescriptor_v2), nullptr},
  {"cuArrayDestroy", 2000, fn(cuArrayDestroy), nullptr},
  {"cuArrayGetMemoryRequirements", 11060, fn(cuArrayGetMemoryRequirements), nullptr},
  {"cuMipmappedArrayCreate", 5000, fn(cuMipmappedArrayCreate), nullptr},
  {"cuMipmappedArrayDestroy", 5000, fn(cuMipmappedArrayDestroy), nullptr},
  {"cuMipmappedArrayGetLevel", 5000, fn(cuMipmappedArrayGetLevel), nullptr},
  {"cuMipmappedArrayGetMemoryRequirements", 11060, fn(cuMipmappedArrayGetMemoryRequirements), nullptr},
  // copies and sets
  {"cuMemcpy", 4000, fn(cuMemcpy), fn(cuMemcpy_ptds)},
  {"cuMemcpyAsync", 4000, fn(cuMemcpyAsync), fn(cuMemcpyAsync_ptsz)},
  {"cuMemcpyHtoD", 2000, nullptr, nullptr},
  {"cuMemcpyHtoD", 3020, fn(cuMemcpyHtoD_v2), fn(cuMemcpyHtoD_v2_ptds)},
  {"cuMemcpyDtoH", 2000, nullptr, nullptr},
  {"cuMemcpyDtoH", 3020, fn(cuMemcpyDtoH_v2), fn(cuMemcpyDtoH_v2_ptds)},
  {"cuMemcpyDtoD", 2000, nullptr, nullptr},
  {"cuMemcpyDtoD", 3020, fn(cuMemcpyDtoD_v2), fn(cuMemcpyDtoD_v2_ptds)},
  {"cuMemcpyHtoDAsync", 2000, nullptr, nullptr},
  {"cuMemcpyHtoDAsync", 3020, fn(cuMemcpyHtoDAsync_v2), fn(cuMemcpyHtoDAsync_v2_ptsz)},
  {"cuMemcpyDtoHAsync", 2000, nullptr, nullptr},
  {"cuMemcpyDtoHAsync", 3020, fn(cuMemcpyDtoHAsync_v2), fn(cuMemcpyDtoHAsync_v2_ptsz)},
  {"cuMemcpyDtoDAsync", 3000, nullptr, nullptr},
  {"cuMemcpyDtoDAsync", 3020, fn(cuMemcpyDtoDAsync_v2), fn(cuMemcpyDtoDAsync_v2_ptsz)},
  {"cuMemsetD8", 2000, nullptr, nullptr},
  {"cuMemsetD8", 3020, fn(cuMemsetD8_v2), fn(cuMemsetD8_v2_ptds)},
  {"cuMemsetD16", 2000, nullptr, nullptr},
  {"cuMemsetD16", 3020, fn(cuMemsetD16_v2), fn(cuMemsetD16_v2_ptds)},
  {"cuMemsetD32", 2000, nullptr, nullptr},
  {"cuMemsetD32", 3020, fn(cuMemsetD32_v2), fn(cuMemsetD32_v2_ptds)},
  {"cuMemsetD8Async", 3020, fn(cuMemsetD8Async), fn(cuMemsetD8Async_ptsz)},
  {"cuMemsetD16Async", 3020, fn(cuMemsetD16Async), fn(cuMemsetD16Async_ptsz)},
  {"cuMemsetD32Async", 3020, fn(cuMemsetD32Async), fn(cuMemsetD32Async_ptsz)},
  {"cuMemcpy2D", 2000, nullptr, nullptr},
  {"cuMemcpy2D", 3020, fn(cuMemcpy2D_v2), fn(cuMemcpy2D_v2_ptds)},
  {"cuMemcpy2DUnaligned", 2000, nullptr, nullptr},
  {"cuMemcpy2DUnaligned", 3020, fn(cuMemcpy2DUnaligned_v2), fn(cuMemcpy2DUnaligned_v2_ptds)},
  {"cuMemcpy2DAsync", 2000, nullptr, nullptr},
  {"cuMemcpy2DAsync", 3020, fn(cuMemcpy2DAsync_v2), fn(cuMemcpy2DAsync_v2_ptsz)},
  {"cuMemcpy3D", 2000, nullptr, nullptr},
  {"cuMemcpy3D", 3020, fn(cuMemcpy3D_v2), fn(cuMemcpy3D_v2_ptds)},
  {"cuMemcpy3DAsync", 2000, nullptr, nullptr},
  {"cuMemcpy3DAsync", 3020, fn(cuMemcpy3DAsync_v2), fn(cuMemcpy3DAsync_v2_ptsz)},
  {"cuMemcpyHtoA", 2000, nullptr, nullptr},
  {"cuMemcpyHtoA", 3020, fn(cuMemcpyHtoA_v2), fn(cuMemcpyHtoA_v2_ptds)},
  {"cuMemcpyAtoH", 2000, nullptr, nullptr},
  {"cuMemcpyAtoH", 3020, fn(cuMemcpyAtoH_v2), fn(cuMemcpyAtoH_v2_ptds)},
  {"cuMemcpyHtoAAsync", 2000, nullptr, nullptr},
  {"cuMemcpyHtoAAsync", 3020, fn(cuMemcpyHtoAAsync_v2), fn(cuMemcpyHtoAAsync_v2_ptsz)},
  {"cuMemcpyAtoHAsync", 2000, nullptr, nullptr},
  {"cuMemcpyAtoHAsync", 3020, fn(cuMemcpyAtoHAsync_v2), fn(cuMemcpyAtoHAsync_v2_ptsz)},
  {"cuMemcpyAtoD", 2000, nullptr, nullptr},
  {"cuMemcpyAtoD", 3020, fn(cuMemcpyAtoD_v2), fn(cuMemcpyAtoD_v2_ptds)},
  {"cuMemcpyDtoA", 2000, nullptr, nullptr},
  {"cuMemcpyDtoA", 3020, fn(cuMemcpyDtoA_v2), fn(cuMemcpyDtoA_v2_ptds)},
  {"cuMemcpyAtoA", 2000, nullptr, nullptr},
  {"cuMemcpyAtoA", 3020, fn(cuMemcpyAtoA_v2), fn(cuMemcpyAtoA_v2_ptds)},
  {"cuMemsetD2D8", 2000, nullptr, nullptr},
  {"cuMemsetD2D8", 3020, fn(cuMemsetD2D8_v2), fn(cuMemsetD2D8_v2_ptds)},
  {"cuMemsetD2D16", 2000, nullptr, nullptr},
  {"cuMemsetD2D16", 3020, fn(cuMemsetD2D16_v2), fn(cuMemsetD2D16_v2_ptds)},
  {"cuMemsetD2D32", 2000, nullptr, nullptr},
  {"cuMemsetD2D32", 3020, fn(cuMemsetD2D32_v2), fn(cuMemsetD2D32_v2_ptds)},
  {"cuMemsetD2D8Async", 3020, fn(cuMemsetD2D8Async), fn(cuMemsetD2D8Async_ptsz)},
  {"cuMemsetD2D16Async", 3020, fn(cuMemsetD2D16Async), fn(cuMemsetD2D16Async_ptsz)},
  {"cuMemsetD2D32Async", 3020, fn(cuMemsetD2D32Async), fn(cuMemsetD2D32Async_ptsz)},
  {"cuMemcpy3DPeer", 4000, fn(cuMemcpy3DPeer), fn(cuMemcpy3DPeer_ptds)},
  {"cuMemcpy3DPeerAsync", 4000, fn(cuMemcpy3DPeerAsync), fn(cuMemcpy3DPeerAsync_ptsz)},
  {"cuMemcpyBatchAsync", 12080, fn(cuMemcpyBatchAsync), fn(cuMemcpyBatchAsync_ptsz)},
  {"cuMemcpyBatchAsync", 13000, fn(cuMemcpyBatchAsync_v2), fn(cuMemcpyBatchAsync_v2_ptsz)},
  {"cuMemcpy3DBatchAsync", 12080, fn(cuMemcpy3DBatchAsync), fn(cuMemcpy3DBatchAsync_ptsz)},
  {"cuMemcpy3DBatchAsync", 13000, fn(cuMemcpy3DBatchAsync_v2), fn(cuMemcpy3DBatchAsync_v2_ptsz)},
  // streams
  {"cuStreamCreate", 2000, fn(cuStreamCreate), nullptr},
  {"cuStreamCreateWithPriority", 5050, fn(cuStreamCreateWithPriority), nullptr},
  {"cuStreamDestroy", 2000, fn(cuStreamDestroy), nullptr},
  {"cuStreamDestroy", 4000, fn(cuStreamDestroy_v2), nullptr},
  {"cuStreamSynchronize", 2000, fn(cuStreamSynchronize), fn(cuStreamSynchronize_ptsz)},
  {"cuStreamQuery", 2000, fn(cuStreamQuery), fn(cuStreamQuery_ptsz)},
  {"cuStreamWaitEvent", 3020, fn(cuStreamWaitEvent), fn(cuStreamWaitEvent_ptsz)},
  {"cuStreamIsCapturing", 10000, fn(cuStreamIsCapturing), fn(cuStreamIsCapturing_ptsz)},
  {"cuStreamAddCallback", 5000, fn(cuStreamAddCallback), fn(cuStreamAddCallback_ptsz)},
  {"cuStreamGetFlags", 5050, fn(cuStreamGetFlags), fn(cuStreamGetFlags_ptsz)},
  {"cuStreamGetCtx", 9020, fn(cuStreamGetCtx), fn(cuStreamGetCtx_ptsz)},
  {"cuStreamGetCtx", 12050, fn(cuStreamGetCtx_v2), fn(cuStreamGetCtx_v2_ptsz)},
  // stream attributes, numbers and devices (stream_attributes.cpp)
  {"cuStreamGetAttribute", 11000, fn(cuStreamGetAttribute), fn(cuStreamGetAttribute_ptsz)},
  {"cuStreamSetAttribute", 11000, fn(cuStreamSetAttribute), fn(cuStreamSetAttribute_ptsz)},
  {"cuStreamCopyAttributes", 11000, fn(cuStreamCopyAttributes), fn(cuStreamCopyAttributes_ptsz)},
  {"cuStreamGetId", 12000, fn(cuStreamGetId), fn(cuStreamGetId_ptsz)},
  {"cuStreamGetDevice", 12080, fn(cuStreamGetDevice), fn(cuStreamGetDevice_ptsz)},
  {"cuLaunchHostFunc", 10000, fn(cuLaunchHostFunc), fn(cuLaunchHostFunc_ptsz)},
  {"cuStreamGetPriority", 5050, fn(cuStreamGetPriority), fn(cuStreamGetPriority_ptsz)},
  // stream memory operations (stream_memops.cpp): the v1 forms, then the _v2 forms of 11.7
  {"cuStreamWaitValue32", 8000, fn(cuStreamWaitValue32), fn(cuStreamWaitValue32_ptsz)},
  {"cuStreamWaitValue32", 11070, fn(cuStreamWaitValue32_v2), fn(cuStreamWaitValue32_v2_ptsz)},
  {"cuStreamWaitValue64", 9000, fn(cuStreamWaitValue64), fn(cuStreamWaitValue64_ptsz)},
  {"cuStreamWaitValue64", 11070, fn(cuStreamWaitValue64_v2), fn(cuStreamWaitValue64_v2_ptsz)},
  {"cuStreamWriteValue32", 8000, fn(cuStreamWriteValue32), fn(cuStreamWriteValue32_ptsz)},
  {"cuStreamWriteValue32", 11070, fn(cuStreamWriteValue32_v2), fn(cuStreamWriteValue32_v2_ptsz)},
  {"cuStreamWriteValue64", 9000, fn(cuStreamWriteValue64), fn(cuStreamWriteValue64_ptsz)},
  {"cuStreamWriteValue64", 11070, fn(cuStreamWriteValue64_v2), fn(cuStreamWriteValue64_v2_ptsz)},
  {"cuStreamBatchMemOp", 8000, fn(cuStreamBatchMemOp), fn(cuStreamBatchMemOp_ptsz)},
  {"cuStreamBatchMemOp", 11070, fn(cuStreamBatchMemOp_v2), fn(cuStreamBatchMemOp_v2_ptsz)},
  // context settings, profiler (context_settings.cpp)
  {"cuCtxSetLimit", 3010, fn(cuCtxSetLimit), nullptr},
  {"cuCtxGetLimit", 3010, fn(cuCtxGetLimit), nullptr},
  {"cuCtxSetCacheConfig", 3020, fn(cuCtxSetCacheConfig), nullptr},
  {"cuCtxGetCacheConfig", 3020, fn(cuCtxGetCacheConfig), nullptr},
  {"cuCtxGetStreamPriorityRange", 5050, fn(cuCtxGetStreamPriorityRange), nullptr},
  {"cuProfilerStart", 4000, fn(cuProfilerStart), nullptr},
  {"cuProfilerStop", 4000, fn(cuProfilerStop), nullptr},
  // function attributes, occupancy (functions.cpp)
  {"cuFuncGetAttribute", 2020, fn(cuFuncGetAttribute), nullptr},
  {"cuOccupancyMaxPotentialClusterSize", 11070, fn(cuOccupancyMaxPotentialClusterSize), nullptr},
  {"cuOccupancyMaxActiveClusters", 11070, fn(cuOccupancyMaxActiveClusters), nullptr},
  {"cuFuncSetAttribute", 9000, fn(cuFuncSetAttribute), nullptr},
  {"cuFuncSetCacheConfig", 3000, fn(cuFuncSetCacheConfig), nullptr},
  {"cuFuncGetName", 12030, fn(cuFuncGetName), nullptr},
  {"cuKernelGetAttribute", 12000, fn(cuKernelGetAttribute), nullptr},
  {"cuKernelSetAttribute", 12000, fn(cuKernelSetAttribute), nullptr},
  {"cuKernelSetCacheConfig", 12000, fn(cuKernelSetCacheConfig), nullptr},
  {"cuKernelGetName", 12030, fn(cuKernelGetName), nullptr},
  {"cuKernelGetFunction", 12000, fn(cuKernelGetFunction), nullptr},
  {"cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, fn(cuOccupancyMaxActiveBlocksPerMultiprocessor), nullptr},
  {"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
   fn(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags), nullptr},
  {"cuOccupancyMaxPotentialBlockSize", 6050, fn(cuOccupancyMaxPotentialBlockSize), nullptr},
  {"cuOccupancyMaxPotentialBlockSizeWithFlags", 7000, fn(cuOccupancyMaxPotentialBlockSizeWithFlags), nullptr},
  {"cuOccupancyAvailableDynamicSMemPerBlock", 10020, fn(cuOccupancyAvailableDynamicSMemPerBlock), nullptr},
  // stream capture and graphs
  {"cuGraphCreate", 10000, fn(cuGraphCreate), nullptr},
  {"cuGraphAddEmptyNode", 10000, fn(cuGraphAddEmptyNode), nullptr},
  {"cuGraphAddHostNode", 10000, fn(cuGraphAddHostNode), nullptr},
  {"cuGraphAddKernelNode", 10000, fn(cuGraphAddKernelNode), nullptr},
  {"cuGraphAddKernelNode", 12000, fn(cuGraphAddKernelNode_v2), nullptr},
  {"cuGraphAddMemsetNode", 10000, fn(cuGraphAddMemsetNode), nullptr},
  {"cuGraphAddMemcpyNode", 10000, fn(cuGraphAddMemcpyNode), nullptr},
  {"cuGraphGetNodes", 10000, fn(cuGraphGetNodes), nullptr},
  {"cuGraphGetRootNodes", 10000, fn(cuGraphGetRootNodes), nullptr},
  {"cuGraphNodeGetType", 10000, fn(cuGraphNodeGetType), nullptr},
  {"cuGraphNodeGetDependencies", 10000, fn(cuGraphNodeGetDependencies), nullptr},
  {"cuGraphNodeGetDependencies", 12030, fn(cuGraphNodeGetDependencies_v2), nullptr},
  {"cuGraphInstantiate", 10000, fn(cuGraphInstantiate), nullptr},
  {"cuGraphInstantiate", 11000, fn(cuGraphInstantiate_v2), nullptr},
  {"cuGraphInstantiateWithFlags", 11040, fn(cuGraphInstantiateWithFlags), nullptr},
  {"cuGraphInstantiateWithParams", 12000, fn(cuGraphInstantiateWithParams), fn(cuGraphInstantiateWithParams_ptsz)},
  {"cuGraphLaunch", 10000, fn(cuGraphLaunch), fn(cuGraphLaunch_ptsz)},
  {"cuGraphUpload", 11010, fn(cuGraphUpload), fn(cuGraphUpload_ptsz)},
  {"cuGraphExecDestroy", 10000, fn(cuGraphExecDestroy), nullptr},
  {"cuGraphAddMemAllocNode", 11040, fn(cuGraphAddMemAllocNode), nullptr},
  {"cuGraphAddMemFreeNode", 11040, fn(cuGraphAddMemFreeNode), nullptr},
  {"cuGraphMemAllocNodeGetParams", 11040, fn(cuGraphMemAllocNodeGetParams), nullptr},
  {"cuGraphMemFreeNodeGetParams", 11040, fn(cuGraphMemFreeNodeGetParams), nullptr},
  {"cuGraphClone", 10000, fn(cuGraphClone), nullptr},
  {"cuGraphHostNodeGetParams", 10000, fn(cuGraphHostNodeGetParams), nullptr},
  {"cuGraphHostNodeSetParams", 10000, fn(cuGraphHostNodeSetParams), nullptr},
  {"cuGraphAddChildGraphNode", 10000, fn(cuGraphAddChildGraphNode), nullptr},
  {"cuGraphChildGraphNodeGetGraph", 10000, fn(cuGraphChildGraphNodeGetGraph), nullptr},
  {"cuGraphDestroyNode", 10000, fn(cuGraphDestroyNode), nullptr},
  {"cuGraphAddDependencies", 10000, fn(cuGraphAddDependencies), nullptr},
  {"cuGraphAddDependencies", 12030, fn(cuGraphAddDependencies_v2), nullptr},
  {"cuGraphRemoveDependencies", 10000, fn(cuGraphRemoveDependencies), nullptr},
  {"cuGraphRemoveDependencies", 12030, fn(cuGraphRemoveDependencies_v2), nullptr},
  {"cuGraphGetEdges", 10000, fn(cuGraphGetEdges), nullptr},
  {"cuGraphGetEdges", 12030, fn(cuGraphGetEdges_v2), nullptr},
  {"cuStreamBeginCapture", 10000, fn(cuStreamBeginCapture), fn(cuStreamBeginCapture_ptsz)},  // CUDA 10.0's, no mode
  {"cuStreamBeginCaptureToGraph", 12030, fn(cuStreamBeginCaptureToGraph), fn(cuStreamBeginCaptureToGraph_ptsz)},
  {"cuStreamUpdateCaptureDependencies", 11030, fn(cuStreamUpdateCaptureDependencies),
   fn(cuStreamUpdateCaptureDependencies_ptsz)},
  {"cuStreamUpdateCaptureDependencies", 12030, fn(cuStreamUpdateCaptureDependencies_v2),
   fn(cuStreamUpdateCaptureDependencies_v2_ptsz)},
  {"cuStreamBeginCapture", 10010, fn(cuStreamBeginCapture_v2), fn(cuStreamBeginCapture_v2_ptsz)},
  {"cuStreamEndCapture", 10000, fn(cuStreamEndCapture), fn(cuStreamEndCapture_ptsz)},
  {"cuStreamGetCaptureInfo", 10010, fn(cuStreamGetCaptureInfo), fn(cuStreamGetCaptureInfo_ptsz)},
  {"cuStreamGetCaptureInfo", 11030, fn(cuStreamGetCaptureInfo_v2), fn(cuStreamGetCaptureInfo_v2_ptsz)},
  {"cuStreamGetCaptureInfo", 12030, fn(cuStreamGetCaptureInfo_v3), fn(cuStreamGetCaptureInfo_v3_ptsz)},
  {"cuThreadExchangeStreamCaptureMode", 10010, fn(cuThreadExchangeStreamCaptureMode), nullptr},
  {"cuGraphAddEventRecordNode", 11010, fn(cuGraphAddEventRecordNode), nullptr},
  {"cuGraphAddEventWaitNode", 11010, fn(cuGraphAddEventWaitNode), nullptr},
  {"cuGraphEventRecordNodeGetEvent", 11010, fn(cuGraphEventRecordNodeGetEvent), nullptr},
  {"cuGraphEventRecordNodeSetEvent", 11010, fn(cuGraphEventRecordNodeSetEvent), nullptr},
  {"cuGraphEventWaitNodeGetEvent", 11010, fn(cuGraphEventWaitNodeGetEvent), nullptr},
  {"cuGraphEventWaitNodeSetEvent", 11010, fn(cuGraphEventWaitNodeSetEvent), nullptr},
  {"cuGraphMemsetNodeGetParams", 10000, fn(cuGraphMemsetNodeGetParams), nullptr},
  {"cuGraphMemsetNodeSetParams", 10000, fn(cuGraphMemsetNodeSetParams), nullptr},
  {"cuGraphMemcpyNodeGetParams", 10000, fn(cuGraphMemcpyNodeGetParams), nullptr},
  {"cuGraphMemcpyNodeSetParams", 10000, fn(cuGraphMemcpyNodeSetParams), nullptr},
  {"cuGraphKernelNodeGetParams", 10000, fn(cuGraphKernelNodeGetParams), nullptr},
  {"cuGraphKernelNodeGetParams", 12000, fn(cuGraphKernelNodeGetParams_v2), nullptr},
  {"cuGraphKernelNodeSetParams", 10000, fn(cuGraphKernelNodeSetParams), nullptr},
  {"cuGraphKernelNodeSetParams", 12000, fn(cuGraphKernelNodeSetParams_v2), nullptr},
  {"cuGraphExecKernelNodeSetParams", 10010, fn(cuGraphExecKernelNodeSetParams), nullptr},
  {"cuGraphExecKernelNodeSetParams", 12000, fn(cuGraphExecKernelNodeSetParams_v2), nullptr},
  {"cuGraphExecMemcpyNodeSetParams", 10020, fn(cuGraphExecMemcpyNodeSetParams), nullptr},
  {"cuGraphExecMemsetNodeSetParams", 10020, fn(cuGraphExecMemsetNodeSetParams), nullptr},
  {"cuGraphExecHostNodeSetParams", 10020, fn(cuGraphExecHostNodeSetParams), nullptr},
  {"cuGraphExecChildGraphNodeSetParams", 11010, fn(cuGraphExecChildGraphNodeSetParams), nullptr},
  {"cuGraphExecEventRecordNodeSetEvent", 11010, fn(cuGraphExecEventRecordNodeSetEvent), nullptr},
  {"cuGraphExecEventWaitNodeSetEvent", 11010, fn(cuGraphExecEventWaitNodeSetEvent), nullptr},
  {"cuGraphExecUpdate", 10020, fn(cuGraphExecUpdate), nullptr},
  {"cuGraphExecUpdate", 12000, fn(cuGraphExecUpdate_v2), nullptr},
  {"cuGraphExecGetFlags", 12000, fn(cuGraphExecGetFlags), nullptr},
  {"cuGraphAddNode", 12020, fn<CUresult(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*)>(cuGraphAddNode), nullptr},
  {"cuGraphAddNode", 12030, fn(cuGraphAddNode_v2), nullptr},
  {"cuGraphNodeSetParams", 12020, fn(cuGraphNodeSetParams), nullptr},
  {"cuGraphExecNodeSetParams", 12020, fn(cuGraphExecNodeSetParams), nullptr},
  {"cuGraphNodeSetEnabled", 11060, fn(cuGraphNodeSetEnabled), nullptr},
  {"cuGraphNodeGetEnabled", 11060, fn(cuGraphNodeGetEnabled), nullptr},
  {"cuGraphKernelNodeGetAttribute", 11000, fn(cuGraphKernelNodeGetAttribute), nullptr},
  {"cuGraphKernelNodeSetAttribute", 11000, fn(cuGraphKernelNodeSetAttribute), nullptr},
  {"cuGraphKernelNodeCopyAttributes", 11000, fn(cuGraphKernelNodeCopyAttributes), nullptr},
  {"cuGraphDestroy", 10000, fn(cuGraphDestroy), nullptr},
  {"cuGraphConditionalHandleCreate", 12030, fn(cuGraphConditionalHandleCreate), nullptr},
  {"cuGraphDebugDotPrint", 11030, fn(cuGraphDebugDotPrint), nullptr},
  {"cuGraphNodeFindInClone", 10000, fn(cuGraphNodeFindInClone), nullptr},
  {"cuGraphNodeGetDependentNodes", 10000, fn(cuGraphNodeGetDependentNodes), nullptr},
  {"cuGraphNodeGetDependentNodes", 12030, fn(cuGraphNodeGetDependentNodes_v2), nullptr},
  {"cuUserObjectCreate", 11030, fn(cuUserObjectCreate), nullptr},
  {"cuUserObjectRetain", 11030, fn(cuUserObjectRetain), nullptr},
  {"cuUserObjectRelease", 11030, fn(cuUserObjectRelease), nullptr},
  {"cuGraphRetainUserObject", 11030, fn(cuGraphRetainUserObject), nullptr},
  {"cuGraphReleaseUserObject", 11030, fn(cuGraphReleaseUserObject), nullptr},
  {"cuGraphAddBatchMemOpNode", 11070, fn(cuGraphAddBatchMemOpNode), nullptr},
  {"cuGraphBatchMemOpNodeGetParams", 11070, fn(cuGraphBatchMemOpNodeGetParams), nullptr},
  {"cuGraphBatchMemOpNodeSetParams", 11070, fn(cuGraphBatchMemOpNodeSetParams), nullptr},
  {"cuGraphExecBatchMemOpNodeSetParams", 11070, fn(cuGraphExecBatchMemOpNodeSetParams), nullptr},
  {"cuDeviceGetGraphMemAttribute", 11040, fn(cuDeviceGetGraphMemAttribute), nullptr},
  {"cuDeviceSetGraphMemAttribute", 11040, fn(cuDeviceSetGraphMemAttribute), nullptr},
  {"cuDeviceGraphMemTrim", 11040, fn(cuDeviceGraphMemTrim), nullptr},
  // events
  {"cuEventCreate", 2000, fn(cuEventCreate), nullptr},
  {"cuCtxRecordEvent", 12050, fn(cuCtxRecordEvent), nullptr},
  {"cuCtxWaitEvent", 12050, fn(cuCtxWaitEvent), nullptr},
  {"cuEventRecord", 2000, fn(cuEventRecord), fn(cuEventRecord_ptsz)},
  {"cuEventRecordWithFlags", 11010, fn(cuEventRecordWithFlags), fn(cuEventRecordWithFlags_ptsz)},
  {"cuEventQuery", 2000, fn(cuEventQuery), nullptr},
  {"cuEventSynchronize", 2000, fn(cuEventSynchronize), nullptr},
  {"cuEventDestroy", 2000, fn(cuEventDestroy), nullptr},
  {"cuEventDestroy", 4000, fn(cuEventDestroy_v2), nullptr},
  {"cuEventElapsedTime", 2000, fn(cuEventElapsedTime), nullptr},
  {"cuEventElapsedTime", 12080, fn(cuEventElapsedTime_v2), nullptr},
  // stream-ordered pools
  {"cuDeviceGetDefaultMemPool", 11020, fn(cuDeviceGetDefaultMemPool), nullptr},
  {"cuDeviceGetMemPool", 11020, fn(cuDeviceGetMemPool), nullptr},
  {"cuDeviceSetMemPool", 11020, fn(cuDeviceSetMemPool), nullptr},
  {"cuMemGetDefaultMemPool", 13000, fn(cuMemGetDefaultMemPool), nullptr},
  {"cuMemGetMemPool", 13000, fn(cuMemGetMemPool), nullptr},
  {"cuMemSetMemPool", 13000, fn(cuMemSetMemPool), nullptr},
  {"cuMemcpyPeer", 4000, fn(cuMemcpyPeer), fn(cuMemcpyPeer_ptds)},
  {"cuMemcpyPeerAsync", 4000, fn(cuMemcpyPeerAsync), fn(cuMemcpyPeerAsync_ptsz)},
  {"cuMemPoolCreate", 11020, fn(cuMemPoolCreate), nullptr},
  {"cuMemPoolDestroy", 11020, fn(cuMemPoolDestroy), nullptr},
  {"cuMemPoolSetAttribute", 11020, fn(cuMemPoolSetAttribute), nullptr},
  {"cuMemPoolGetAttribute", 11020, fn(cuMemPoolGetAttribute), nullptr},
  {"cuMemPoolSetAccess", 11020, fn(cuMemPoolSetAccess), nullptr},
  {"cuMemPoolGetAccess", 11020, fn(cuMemPoolGetAccess), nullptr},
  {"cuMemPoolTrimTo", 11020, fn(cuMemPoolTrimTo), nullptr},
  {"cuMemPoolExportToShareableHandle", 11020, fn(cuMemPoolExportToShareableHandle), nullptr},
  {"cuMemPoolImportFromShareableHandle", 11020, fn(cuMemPoolImportFromShareableHandle), nullptr},
  {"cuMemPoolExportPointer", 11020, fn(cuMemPoolExportPointer), nullptr},
  {"cuMemPoolImportPointer", 11020, fn(cuMemPoolImportPointer), nullptr},
  {"cuMemAllocAsync", 11020, fn(cuMemAllocAsync), fn(cuMemAllocAsync_ptsz)},
  {"cuMemFreeAsync", 11020, fn(cuMemFreeAsync), fn(cuMemFreeAsync_ptsz)},
  {"cuMemAllocFromPoolAsync", 11020, fn(cuMemAllocFromPoolAsync), fn(cuMemAllocFromPoolAsync_ptsz)},
};
// clang-format on

CUresult lookup(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  auto report = [&](CUdriverProcAddressQueryResult s) {
    if (status != nullptr) *status = s;
  };
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  {
    Locked l;
    note_requested_name(l.st, symbol);
  }
  // A driver answers no entry point newer than itself, whatever version the caller asks for.
  cuda_version = std::min(cuda_version, driver_version());
  *pfn = nullptr;
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const ProcEntry& e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    known = true;
    if (e.version <= cuda_version && (best == nullptr || e.version > best->version)) best = &e;
  }
  if (!known || (best != nullptr && best->legacy == nullptr)) {
    report(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_ERROR_NOT_FOUND;
  }
  if (best == nullptr) {
    report(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    return CUDA_ERROR_NOT_FOUND;
  }
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 &&
                    cuda_version >= kPerThreadSince && best->per_thread != nullptr;
  *pfn = per_thread ? best->per_thread : best->legacy;
  report(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

CUDASIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbolStatus) {
  return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
