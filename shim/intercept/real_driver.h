// The real CUDA driver's entry points, as the shim calls them. Resolved lazily, never at load.
//
// CONTRACT (the interposition component owns this file and real_driver.cpp and may add entries).
// Every call the shim makes into CUDA goes through this table, so it never re-enters its own hooks.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace gpumem::shim {

// Invariant: after real_driver() returned with `available` true, every pointer below that the
// driver provides is non-null and points into the real driver, never at one of the shim's hooks.
// A pointer the driver lacks stays null; callers check before use. Each field is named exactly as
// the driver exports it and needs its line in real_driver.cpp's resolve_table() (a static_assert
// there counts them).
struct RealDriver {
  bool available = false;  // false: the program never loaded a CUDA driver we could find

  PFN_cuGetProcAddress_v12000 cuGetProcAddress_v2 = nullptr;
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem_v2 = nullptr;
  PFN_cuDevicePrimaryCtxGetState_v7000 cuDevicePrimaryCtxGetState = nullptr;
  PFN_cuDevicePrimaryCtxReset_v11000 cuDevicePrimaryCtxReset_v2 = nullptr;
  // Retain + release name a device's primary context (to forget its arena on reset) without creating it.
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease_v2 = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  // To synchronise a context that is not current where cuCtxSynchronize_v2 is missing (before 13.0).
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent_v2 = nullptr;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent_v2 = nullptr;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize = nullptr;
  PFN_cuCtxSynchronize_v13000 cuCtxSynchronize_v2 = nullptr;
  PFN_cuCtxDestroy_v4000 cuCtxDestroy_v2 = nullptr;
  PFN_cuMemAlloc_v3020 cuMemAlloc_v2 = nullptr;
  PFN_cuMemFree_v3020 cuMemFree_v2 = nullptr;
  PFN_cuMemAllocPitch_v3020 cuMemAllocPitch_v2 = nullptr;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo_v2 = nullptr;
  PFN_cuMemGetAddressRange_v3020 cuMemGetAddressRange_v2 = nullptr;
  // Pointer queries answered for blocks of a VMM-backed arena (managers/memory_service.cpp).
  PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute = nullptr;
  PFN_cuPointerGetAttributes_v7000 cuPointerGetAttributes = nullptr;
  // Peer access, which a VMM-backed arena passes on to its mappings (managers/peer_access.h).
  PFN_cuCtxEnablePeerAccess_v4000 cuCtxEnablePeerAccess = nullptr;
  PFN_cuCtxDisablePeerAccess_v4000 cuCtxDisablePeerAccess = nullptr;
  PFN_cuMemAllocAsync_v11020 cuMemAllocAsync = nullptr;
  PFN_cuMemAllocAsync_v11020_ptsz cuMemAllocAsync_ptsz = nullptr;
  PFN_cuMemFreeAsync_v11020 cuMemFreeAsync = nullptr;
  PFN_cuMemFreeAsync_v11020_ptsz cuMemFreeAsync_ptsz = nullptr;
  PFN_cuMemAllocFromPoolAsync_v11020 cuMemAllocFromPoolAsync = nullptr;
  PFN_cuMemAllocFromPoolAsync_v11020_ptsz cuMemAllocFromPoolAsync_ptsz = nullptr;
  PFN_cuDeviceGetDefaultMemPool_v11020 cuDeviceGetDefaultMemPool = nullptr;
  PFN_cuMemPoolSetAttribute_v11020 cuMemPoolSetAttribute = nullptr;
  PFN_cuMemPoolGetAttribute_v11020 cuMemPoolGetAttribute = nullptr;
  PFN_cuMemPoolTrimTo_v11020 cuMemPoolTrimTo = nullptr;
  // cuda_async mode opens its pool to the devices that enabled peer access to its context.
  PFN_cuMemPoolSetAccess_v11020 cuMemPoolSetAccess = nullptr;
  PFN_cuMemPoolGetAccess_v11020 cuMemPoolGetAccess = nullptr;
  // Memory opened from another process is opened to the devices that can access it (ipc/).
  PFN_cuDeviceCanAccessPeer_v4000 cuDeviceCanAccessPeer = nullptr;
  // cuda_async mode's own IPC-capable pool and sharing its blocks (ipc/pool_blocks.cpp).
  PFN_cuMemPoolCreate_v11020 cuMemPoolCreate = nullptr;
  PFN_cuMemPoolDestroy_v11020 cuMemPoolDestroy = nullptr;
  PFN_cuMemPoolExportToShareableHandle_v11020 cuMemPoolExportToShareableHandle = nullptr;
  PFN_cuMemPoolImportFromShareableHandle_v11020 cuMemPoolImportFromShareableHandle = nullptr;
  PFN_cuMemPoolExportPointer_v11020 cuMemPoolExportPointer = nullptr;
  PFN_cuMemPoolImportPointer_v11020 cuMemPoolImportPointer = nullptr;
  PFN_cuIpcGetMemHandle_v4010 cuIpcGetMemHandle = nullptr;
  PFN_cuIpcOpenMemHandle_v11000 cuIpcOpenMemHandle_v2 = nullptr;
  PFN_cuIpcCloseMemHandle_v4010 cuIpcCloseMemHandle = nullptr;
  PFN_cuStreamCreate_v2000 cuStreamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy_v2 = nullptr;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize = nullptr;
  PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent = nullptr;
  PFN_cuStreamIsCapturing_v10000 cuStreamIsCapturing = nullptr;
  PFN_cuStreamIsCapturing_v10000_ptsz cuStreamIsCapturing_ptsz = nullptr;
  PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture_v2 = nullptr;
  PFN_cuStreamBeginCapture_v10010_ptsz cuStreamBeginCapture_v2_ptsz = nullptr;
  PFN_cuStreamEndCapture_v10000 cuStreamEndCapture = nullptr;
  PFN_cuStreamEndCapture_v10000_ptsz cuStreamEndCapture_ptsz = nullptr;
  PFN_cuEventCreate_v2000 cuEventCreate = nullptr;
  PFN_cuEventRecord_v2000 cuEventRecord = nullptr;
  PFN_cuEventQuery_v2000 cuEventQuery = nullptr;
  PFN_cuEventDestroy_v4000 cuEventDestroy_v2 = nullptr;
  // The other paths that take device memory, charged to the budget (budget/other_paths.cpp), and
  // what matches an NVML device to a CUDA one (budget/nvml_hooks.cpp).
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid_v2 = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemRetainAllocationHandle_v11000 cuMemRetainAllocationHandle = nullptr;
  PFN_cuMemAllocManaged_v6000 cuMemAllocManaged = nullptr;
  PFN_cuArrayCreate_v3020 cuArrayCreate_v2 = nullptr;
  PFN_cuArray3DCreate_v3020 cuArray3DCreate_v2 = nullptr;
  PFN_cuArrayDestroy_v2000 cuArrayDestroy = nullptr;
  PFN_cuArrayGetMemoryRequirements_v11060 cuArrayGetMemoryRequirements = nullptr;
  PFN_cuMipmappedArrayCreate_v5000 cuMipmappedArrayCreate = nullptr;
  PFN_cuMipmappedArrayDestroy_v5000 cuMipmappedArrayDestroy = nullptr;
  PFN_cuMipmappedArrayGetMemoryRequirements_v11060 cuMipmappedArrayGetMemoryRequirements = nullptr;
  // The arena's virtual-memory region source (managers/vmm_region_source.cpp).
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  // Legacy IPC of a VMM-backed arena's blocks (ipc/vmm_blocks.cpp).
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
};

// The table, resolved on first use (thread-safe). Cheap after the first call.
const RealDriver& real_driver();

// The driver's name for `result` (cuGetErrorName), or "unknown error": for log lines.
const char* driver_error_name(CUresult result);

}  // namespace gpumem::shim
