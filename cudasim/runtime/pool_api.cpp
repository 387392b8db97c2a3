// Stream-ordered allocation: cudaMallocAsync / cudaFreeAsync and memory pools. cudaMemPool_t is the
// driver's CUmemoryPool; the pool rules (reuse, release threshold) are the driver's.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

namespace cudasim::runtime {

CUmemPoolProps driver_pool_properties(const cudaMemPoolProps& props) {
  CUmemPoolProps converted{};
  converted.allocType = static_cast<CUmemAllocationType>(props.allocType);
  converted.handleTypes = static_cast<CUmemAllocationHandleType>(props.handleTypes);
  converted.location.type = static_cast<CUmemLocationType>(props.location.type);
  converted.location.id = props.location.id;
  converted.win32SecurityAttributes = props.win32SecurityAttributes;
  converted.maxSize = props.maxSize;
  converted.usage = props.usage;
  return converted;
}

namespace {

cudaError_t create_pool(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    const CUmemPoolProps converted = driver_pool_properties(*props);
    return call_driver<&DriverTable::cuMemPoolCreate>(pool, &converted);
  });
}

cudaError_t default_pool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return cudaErrorInvalidValue;
  CUdevice handle = 0;
  const cudaError_t status = device_handle(device, &handle);
  if (status != cudaSuccess) return status;
  return with_context([&] { return call_driver<&DriverTable::cuDeviceGetDefaultMemPool>(pool, handle); });
}

// The device's current pool (cudaDeviceGetMemPool), or makes `pool` its current one.
cudaError_t device_pool(cudaMemPool_t* pool, int device, bool set) {
  if (!set && pool == nullptr) return cudaErrorInvalidValue;
  CUdevice handle = 0;
  if (const cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  return with_context([&] {
    return set ? call_driver<&DriverTable::cuDeviceSetMemPool>(handle, *pool)
               : call_driver<&DriverTable::cuDeviceGetMemPool>(pool, handle);
  });
}

// The pools of a location and allocation type (cudaMemGetDefaultMemPool, cudaMemGetMemPool,
// cudaMemSetMemPool): a device location names a runtime device, the driver's ordinal once the device
// is known; other locations go to the driver as they are (cudaMemLocation has CUmemLocation's layout).
enum class LocationPool { default_pool, current, set_current };
cudaError_t location_pool(cudaMemPool_t* pool, cudaMemLocation* location, cudaMemAllocationType type, LocationPool which) {
  static_assert(sizeof(cudaMemLocation) == sizeof(CUmemLocation));
  if (pool == nullptr || location == nullptr) return cudaErrorInvalidValue;
  CUmemLocation converted{static_cast<CUmemLocationType>(location->type), location->id};
  if (location->type == cudaMemLocationTypeDevice) {
    CUdevice handle = 0;
    if (const cudaError_t status = device_handle(location->id, &handle); status != cudaSuccess) return status;
    converted.id = handle;
  }
  const auto driver_type = static_cast<CUmemAllocationType>(type);
  return with_context([&] {
    switch (which) {
      case LocationPool::default_pool:
        return call_driver<&DriverTable::cuMemGetDefaultMemPool>(pool, &converted, driver_type);
      case LocationPool::current: return call_driver<&DriverTable::cuMemGetMemPool>(pool, &converted, driver_type);
      case LocationPool::set_current:
        break;
    }
    return call_driver<&DriverTable::cuMemSetMemPool>(&converted, driver_type, *pool);
  });
}

static_assert(sizeof(cudaMemPoolPtrExportData) == sizeof(CUmemPoolPtrExportData));

// cudaMemPoolAttr and CUmemPool_attribute share their numbering and value types.
CUmemPool_attribute driver_attribute(cudaMemPoolAttr attribute) {
  return static_cast<CUmemPool_attribute>(attribute);
}

}  // namespace

cudaError_t malloc_async(void** ptr, size_t size, CUstream stream) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUdeviceptr address = 0;
    const cudaError_t result = call_driver<&DriverTable::cuMemAllocAsync>(&address, size, stream);
    if (result == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
    return result;
  });
}

cudaError_t free_async(void* ptr, CUstream stream) {
  return with_context([&] {
    return call_driver<&DriverTable::cuMemFreeAsync>(reinterpret_cast<CUdeviceptr>(ptr), stream);
  });
}

cudaError_t malloc_from_pool_async(void** ptr, size_t size, cudaMemPool_t pool, CUstream stream) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUdeviceptr address = 0;
    const cudaError_t result =
        call_driver<&DriverTable::cuMemAllocFromPoolAsync>(&address, size, pool, stream);
    if (result == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
    return result;
  });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return api_call([&] { return malloc_async(devPtr, size, hStream); });
}
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) { return api_call([&] { return free_async(devPtr, hStream); }); }
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return api_call([&] { return malloc_from_pool_async(ptr, size, memPool, stream); });
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  return api_call([&] { return default_pool(memPool, device); });
}
cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* poolProps) {
  return api_call([&] { return create_pool(memPool, poolProps); });
}
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuMemPoolDestroy>(memPool); }); });
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  return api_call([&] { return with_context(
      [&] { return call_driver<&DriverTable::cuMemPoolSetAttribute>(memPool, driver_attribute(attr), value); }); });
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  return api_call([&] { return with_context(
      [&] { return call_driver<&DriverTable::cuMemPoolGetAttribute>(memPool, driver_attribute(attr), value); }); });
}
// cudaMemAccessDesc and cudaMemLocation have the driver's layouts (CUmemAccessDesc, CUmemLocation).
cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const cudaMemAccessDesc* descList, size_t count) {
  static_assert(sizeof(cudaMemAccessDesc) == sizeof(CUmemAccessDesc));
  return api_call([&] { return with_context([&] {
    return call_driver<&DriverTable::cuMemPoolSetAccess>(memPool, reinterpret_cast<const CUmemAccessDesc*>(descList),
                                                         count);
  }); });
}
cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t memPool, cudaMemLocation* location) {
  static_assert(sizeof(cudaMemLocation) == sizeof(CUmemLocation));
  return api_call([&] { return with_context([&] {
    return call_driver<&DriverTable::cuMemPoolGetAccess>(reinterpret_cast<CUmemAccess_flags*>(flags), memPool,
                                                         reinterpret_cast<CUmemLocation*>(location));
  }); });
}
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  return api_call([&] { return device_pool(memPool, device, false); });
}
cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  return api_call([&] { return device_pool(&memPool, device, true); });
}
cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t* memPool, cudaMemLocation* location, cudaMemAllocationType type) {
  return api_call([&] { return location_pool(memPool, location, type, LocationPool::default_pool); });
}
cudaError_t cudaMemGetMemPool(cudaMemPool_t* memPool, cudaMemLocation* location, cudaMemAllocationType type) {
  return api_call([&] { return location_pool(memPool, location, type, LocationPool::current); });
}
cudaError_t cudaMemSetMemPool(cudaMemLocation* location, cudaMemAllocationType type, cudaMemPool_t memPool) {
  return api_call([&] { return location_pool(&memPool, location, type, LocationPool::set_current); });
}

// Sharing pools between processes: the driver's calls (cudaMemAllocationHandleType and
// CUmemAllocationHandleType share their values; the export data is the same 64 bytes).
cudaError_t cudaMemPoolExportToShareableHandle(void* shareableHandle, cudaMemPool_t memPool,
                                               enum cudaMemAllocationHandleType handleType, unsigned int flags) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemPoolExportToShareableHandle>(
          shareableHandle, memPool, static_cast<CUmemAllocationHandleType>(handleType), flags);
    });
  });
}
cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t* memPool, void* shareableHandle,
                                                 enum cudaMemAllocationHandleType handleType, unsigned int flags) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemPoolImportFromShareableHandle>(
          memPool, shareableHandle, static_cast<CUmemAllocationHandleType>(handleType), flags);
    });
  });
}
cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData* exportData, void* ptr) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemPoolExportPointer>(reinterpret_cast<CUmemPoolPtrExportData*>(exportData),
                                                               reinterpret_cast<CUdeviceptr>(ptr));
    });
  });
}
cudaError_t cudaMemPoolImportPointer(void** ptr, cudaMemPool_t memPool, struct cudaMemPoolPtrExportData* exportData) {
  return api_call([&] {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    return with_context([&] {
      CUdeviceptr address = 0;
      const cudaError_t status = call_driver<&DriverTable::cuMemPoolImportPointer>(
          &address, memPool, reinterpret_cast<CUmemPoolPtrExportData*>(exportData));
      if (status == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
      return status;
    });
  });
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuMemPoolTrimTo>(memPool, minBytesToKeep); }); });
}

}  // extern "C"
