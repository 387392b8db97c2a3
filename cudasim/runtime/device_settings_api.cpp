// Device flags, limits, cache configuration, the stream priority range and the profiler switches of
// the runtime API, over the primary context's settings in the driver (context_settings.cpp there).
#include "context.h"
#include "driver_table.h"
#include "error_state.h"

using namespace cudasim::runtime;

namespace {

// cudaDeviceScheduleAuto/Spin/Yield/BlockingSync (at most one), cudaDeviceMapHost,
// cudaDeviceLmemResizeToMax and cudaDeviceSyncMemops: the driver's CU_CTX_* flags, bit for bit.
constexpr unsigned kDeviceFlags = cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax |
                                  cudaDeviceSyncMemops;

bool valid_device_flags(unsigned flags) {
  const unsigned schedule = flags & cudaDeviceScheduleMask;
  return (flags & ~kDeviceFlags) == 0 && (schedule & (schedule - 1)) == 0;  // one scheduling policy at most
}

// As the CUDA 12 runtime: the flags become the current device's primary context's (also while it
// is active), and the device is initialised with them.
cudaError_t set_device_flags(unsigned flags) {
  if (!valid_device_flags(flags)) return cudaErrorInvalidValue;
  int device = 0;
  CUdevice handle = 0;
  if (cudaError_t status = current_device(&device); status != cudaSuccess) return status;
  if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  if (cudaError_t status = call_driver<&DriverTable::cuDevicePrimaryCtxSetFlags>(handle, flags); status != cudaSuccess)
    return status;
  return ensure_context();
}

// The current device's flags; mapped host memory is always on (unified addressing).
cudaError_t get_device_flags(unsigned* flags) {
  if (flags == nullptr) return cudaErrorInvalidValue;
  int device = 0, active = 0;
  CUdevice handle = 0;
  unsigned primary = 0;
  if (cudaError_t status = current_device(&device); status != cudaSuccess) return status;
  if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  if (cudaError_t status = call_driver<&DriverTable::cuDevicePrimaryCtxGetState>(handle, &primary, &active);
      status != cudaSuccess)
    return status;
  *flags = primary | cudaDeviceMapHost;
  return cudaSuccess;
}

// cudaInitDevice: the device's primary context initialised (not made current), with deviceFlags
// when flags says they are valid; any other flag is cudaErrorInvalidValue.
cudaError_t init_device(int device, unsigned device_flags, unsigned flags) {
  CUdevice handle = 0;
  if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  if ((flags & ~unsigned{cudaInitDeviceFlagsAreValid}) != 0) return cudaErrorInvalidValue;
  if ((flags & cudaInitDeviceFlagsAreValid) != 0) {
    if (!valid_device_flags(device_flags)) return cudaErrorInvalidValue;
    if (cudaError_t status = call_driver<&DriverTable::cuDevicePrimaryCtxSetFlags>(handle, device_flags);
        status != cudaSuccess)
      return status;
  }
  CUcontext context = nullptr;
  return primary_context(device, &context);
}

}  // namespace

extern "C" {

cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  return api_call([&] { return init_device(device, deviceFlags, flags); });
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) { return api_call([&] { return set_device_flags(flags); }); }
cudaError_t cudaGetDeviceFlags(unsigned int* flags) { return api_call([&] { return get_device_flags(flags); }); }

// cudaLimit and CUlimit, cudaFuncCache and CUfunc_cache share their values.
cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
  return api_call([&] {
    return with_context([&] { return call_driver<&DriverTable::cuCtxSetLimit>(static_cast<CUlimit>(limit), value); });
  });
}
cudaError_t cudaDeviceGetLimit(size_t* pValue, enum cudaLimit limit) {
  return api_call([&] {
    if (pValue == nullptr) return cudaErrorInvalidValue;
    return with_context([&] { return call_driver<&DriverTable::cuCtxGetLimit>(pValue, static_cast<CUlimit>(limit)); });
  });
}
cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig) {
  return api_call([&] {
    return with_context(
        [&] { return call_driver<&DriverTable::cuCtxSetCacheConfig>(static_cast<CUfunc_cache>(cacheConfig)); });
  });
}
cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache* pCacheConfig) {
  return api_call([&] {
    if (pCacheConfig == nullptr) return cudaErrorInvalidValue;
    return with_context([&] {
      return call_driver<&DriverTable::cuCtxGetCacheConfig>(reinterpret_cast<CUfunc_cache*>(pCacheConfig));
    });
  });
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return api_call([&] {
    return with_context(
        [&] { return call_driver<&DriverTable::cuCtxGetStreamPriorityRange>(leastPriority, greatestPriority); });
  });
}

// No profiler runs over the simulator: starting and stopping it succeed and do nothing.
cudaError_t cudaProfilerStart() {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuProfilerStart>(); }); });
}
cudaError_t cudaProfilerStop() {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuProfilerStop>(); }); });
}

// No persisting line exists to reset; the driver checks the context.
cudaError_t cudaCtxResetPersistingL2Cache() {
  return api_call(
      [&] { return with_context([&] { return call_driver<&DriverTable::cuCtxResetPersistingL2Cache>(); }); });
}
// cudaFlushGPUDirectRDMAWritesTarget/Scope and the driver's enumerations share their values.
cudaError_t cudaDeviceFlushGPUDirectRDMAWrites(enum cudaFlushGPUDirectRDMAWritesTarget target,
                                               enum cudaFlushGPUDirectRDMAWritesScope scope) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuFlushGPUDirectRDMAWrites>(
          static_cast<CUflushGPUDirectRDMAWritesTarget>(target), static_cast<CUflushGPUDirectRDMAWritesScope>(scope));
    });
  });
}

}  // extern "C"
