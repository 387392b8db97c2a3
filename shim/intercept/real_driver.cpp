#include "intercept/real_driver.h"

#include <atomic>
#include <mutex>
#include <string>

#include "intercept/driver_object.h"
#include "fork_safe_lock.h"
#include "log.h"
#include "intercept/resolution_guard.h"

namespace gpumem::shim {
namespace {

constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

// Invariant: g_table is written only under g_mutex before g_ready is set, and never after; it is
// leaked with the process (static storage, trivially destructible), so hooks running during exit
// can still read it.
RealDriver g_table;
const RealDriver g_unavailable;
std::atomic<bool> g_ready{false};
std::mutex g_mutex;

// The entry points resolve_table() fills, cuGetProcAddress_v2 included.
constexpr std::size_t kEntryPoints = 82;
static_assert(sizeof(RealDriver) == sizeof(void*) * (kEntryPoints + 1),
              "a RealDriver field was added or removed: resolve it in resolve_table() and update "
              "kEntryPoints");

// `missing` collects the names the driver did not provide (an older driver lacks the newest ones).
template <typename Function>
void resolve(Function& slot, std::string& missing, const char* versioned_name,
             const char* base_name, int version, cuuint64_t flags) {
  slot = reinterpret_cast<Function>(driver_entry_point(versioned_name, base_name, version, flags));
  if (slot == nullptr) (missing += ' ') += versioned_name;
}

// Each entry as (field = exact exported name, cuGetProcAddress base name, version of its ABI,
// flags).
#define GPUMEM_RESOLVE(field, base, version, flags) \
  resolve(table.field, missing, #field, base, version, flags)

void resolve_table(RealDriver& table, std::string& missing) {
  table.cuGetProcAddress_v2 = driver_proc_address_v2(/*load=*/true);
  if (table.cuGetProcAddress_v2 == nullptr && driver_handle(/*load=*/true) == nullptr) return;
  GPUMEM_RESOLVE(cuGetErrorName, "cuGetErrorName", 6000, kLegacy);
  GPUMEM_RESOLVE(cuDeviceGet, "cuDeviceGet", 2000, kLegacy);
  GPUMEM_RESOLVE(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, kLegacy);
  GPUMEM_RESOLVE(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 7000, kLegacy);
  GPUMEM_RESOLVE(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, kLegacy);
  GPUMEM_RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, kLegacy);
  GPUMEM_RESOLVE(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, kLegacy);
  GPUMEM_RESOLVE(cuCtxGetCurrent, "cuCtxGetCurrent", 4000, kLegacy);
  GPUMEM_RESOLVE(cuCtxPushCurrent_v2, "cuCtxPushCurrent", 4000, kLegacy);
  GPUMEM_RESOLVE(cuCtxPopCurrent_v2, "cuCtxPopCurrent", 4000, kLegacy);
  GPUMEM_RESOLVE(cuCtxGetDevice, "cuCtxGetDevice", 2000, kLegacy);
  GPUMEM_RESOLVE(cuCtxSynchronize, "cuCtxSynchronize", 2000, kLegacy);
  GPUMEM_RESOLVE(cuCtxSynchronize_v2, "cuCtxSynchronize", 13000, kLegacy);
  GPUMEM_RESOLVE(cuCtxDestroy_v2, "cuCtxDestroy", 4000, kLegacy);
  GPUMEM_RESOLVE(cuMemAlloc_v2, "cuMemAlloc", 3020, kLegacy);
  GPUMEM_RESOLVE(cuMemFree_v2, "cuMemFree", 3020, kLegacy);
  GPUMEM_RESOLVE(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, kLegacy);
  GPUMEM_RESOLVE(cuMemGetInfo_v2, "cuMemGetInfo", 3020, kLegacy);
  GPUMEM_RESOLVE(cuMemGetAddressRange_v2, "cuMemGetAddressRange", 3020, kLegacy);
  GPUMEM_RESOLVE(cuPointerGetAttribute, "cuPointerGetAttribute", 4000, kLegacy);
  GPUMEM_RESOLVE(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, kLegacy);
  GPUMEM_RESOLVE(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 4000, kLegacy);
  GPUMEM_RESOLVE(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", 4000, kLegacy);
  GPUMEM_RESOLVE(cuMemAllocAsync, "cuMemAllocAsync", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, kPerThread);
  GPUMEM_RESOLVE(cuMemFreeAsync, "cuMemFreeAsync", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, kPerThread);
  GPUMEM_RESOLVE(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, kPerThread);
  GPUMEM_RESOLVE(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolSetAccess, "cuMemPoolSetAccess", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolGetAccess, "cuMemPoolGetAccess", 11020, kLegacy);
  GPUMEM_RESOLVE(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 4000, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolCreate, "cuMemPoolCreate", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolExportPointer, "cuMemPoolExportPointer", 11020, kLegacy);
  GPUMEM_RESOLVE(cuMemPoolImportPointer, "cuMemPoolImportPointer", 11020, kLegacy);
  GPUMEM_RESOLVE(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, kLegacy);
  GPUMEM_RESOLVE(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, kLegacy);
  GPUMEM_RESOLVE(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, kLegacy);
  GPUMEM_RESOLVE(cuStreamCreate, "cuStreamCreate", 2000, kLegacy);
  GPUMEM_RESOLVE(cuStreamDestroy_v2, "cuStreamDestroy", 4000, kLegacy);
  GPUMEM_RESOLVE(cuStreamSynchronize, "cuStreamSynchronize", 2000, kLegacy);
  GPUMEM_RESOLVE(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, kLegacy);
  GPUMEM_RESOLVE(cuStreamIsCapturing, "cuStreamIsCapturing", 10000, kLegacy);
  GPUMEM_RESOLVE(cuStreamIsCapturing_ptsz, "cuStreamIsCapturing", 10000, kPerThread);
  GPUMEM_RESOLVE(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, kLegacy);
  GPUMEM_RESOLVE(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, kPerThread);
  GPUMEM_RESOLVE(cuStreamEndCapture, "cuStreamEndCapture", 10000, kLegacy);
  GPUMEM_RESOLVE(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, kPerThread);
  GPUMEM_RESOLVE(cuEventCreate, "cuEventCreate", 2000, kLegacy);
  GPUMEM_RESOLVE(cuEventRecord, "cuEventRecord", 2000, kLegacy);
  GPUMEM_RESOLVE(cuEventQuery, "cuEventQuery", 2000, kLegacy);
  GPUMEM_RESOLVE(cuEventDestroy_v2, "cuEventDestroy", 4000, kLegacy);
  GPUMEM_RESOLVE(cuDeviceGetCount, "cuDeviceGetCount", 2000, kLegacy);
  GPUMEM_RESOLVE(cuDeviceGetUuid_v2, "cuDeviceGetUuid", 11040, kLegacy);
  GPUMEM_RESOLVE(cuMemCreate, "cuMemCreate", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemRelease, "cuMemRelease", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemMap, "cuMemMap", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemUnmap, "cuMemUnmap", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, kLegacy);
  GPUMEM_RESOLVE(cuMemAllocManaged, "cuMemAllocManaged", 6000, kLegacy);
  GPUMEM_RESOLVE(cuArrayCreate_v2, "cuArrayCreate", 3020, kLegacy);
  GPUMEM_RESOLVE(cuArray3DCreate_v2, "cuArray3DCreate", 3020, kLegacy);
  GPUMEM_RESOLVE(cuArrayDestroy, "cuArrayDestroy", 2000, kLegacy);
  GPUMEM_RESOLVE(cuArrayGetMemoryRequirements, "cuArrayGetMemoryRequirements", 11060, kLegacy);
  GPUMEM_RESOLVE(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, kLegacy);
  GPUMEM_RESOLVE(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, kLegacy);
  GPUMEM_RESOLVE(cuMipmappedArrayGetMemoryRequirements, "cuMipmappedArrayGetMemoryRequirements", 11060, kLegacy);
  GPUMEM_RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000, kLegacy);
  GPUMEM_RESOLVE(cuMemAddressReserve, "cuMemAddressReserve", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemAddressFree, "cuMemAddressFree", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemSetAccess, "cuMemSetAccess", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020, kLegacy);
  GPUMEM_RESOLVE(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020, kLegacy);
  table.available = true;
}

#undef GPUMEM_RESOLVE

}  // namespace

const RealDriver& real_driver() {
  if (g_ready.load(std::memory_order_acquire)) return g_table;
  // Re-entered from inside our own resolution on this thread: the table is not there yet.
  if (ResolutionGuard::active()) return g_unavailable;
  const ResolutionGuard guard;
  log::Pending message;
  try {
    const auto lock = lock_fork_safely<g_mutex>();
    if (!g_ready.load(std::memory_order_relaxed)) {
      RealDriver table;
      std::string missing;
      resolve_table(table, missing);
      if (!table.available) return g_unavailable;  // no driver yet: try again on the next call
      g_table = table;
      g_ready.store(true, std::memory_order_release);
      message.add(LogLevel::debug, "real driver resolved; entry points it lacks:{}",
                  missing.empty() ? " none" : missing);
    }
  } catch (...) {  // std::mutex failing: report "no driver" rather than throw into a C caller
    return g_unavailable;
  }
  message.flush();
  return g_table;
}

const char* driver_error_name(CUresult result) {
  const RealDriver& driver = real_driver();
  const char* name = nullptr;
  if (driver.cuGetErrorName == nullptr || driver.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return "unknown error";
  }
  return name;
}

}  // namespace gpumem::shim
