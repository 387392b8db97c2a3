// Device management, versions and last-error queries of the runtime API.
#include <cstring>
#include <utility>

#include "context.h"
#include "driver_table.h"
#include "error_state.h"

using namespace cudasim::runtime;

namespace {

// The version of the toolkit headers this runtime implements (CUDART_VERSION).
constexpr int kRuntimeVersion = 13000;

int query_attribute(CUdevice device, CUdevice_attribute attribute) {
  int value = 0;
  if (call_driver<&DriverTable::cuDeviceGetAttribute>(&value, attribute, device) != cudaSuccess)
    return 0;  // an attribute the driver cannot answer stays 0, as for absent hardware features
  return value;
}

// Fills every cudaDeviceProp field that has a matching device attribute.
void fill_properties(cudaDeviceProp& prop, CUdevice device) {
  const auto attribute = [device](CUdevice_attribute which) { return query_attribute(device, which); };
  prop.sharedMemPerBlock = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  prop.regsPerBlock = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop.warpSize = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop.memPitch = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_PITCH));
  prop.maxThreadsPerBlock = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop.maxThreadsDim[0] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop.maxThreadsDim[1] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop.maxThreadsDim[2] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop.maxGridSize[0] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop.maxGridSize[1] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop.maxGridSize[2] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop.totalConstMem = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY));
  prop.major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  prop.minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  prop.textureAlignment = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT));
  prop.texturePitchAlignment = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT));
  prop.multiProcessorCount = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  prop.integrated = attribute(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  prop.canMapHostMemory = attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  prop.concurrentKernels = attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  prop.ECCEnabled = attribute(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  prop.pciBusID = attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  prop.pciDeviceID = attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  prop.pciDomainID = attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  prop.asyncEngineCount = attribute(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  prop.unifiedAddressing = attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  prop.memoryBusWidth = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  prop.l2CacheSize = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  prop.maxThreadsPerMultiProcessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  prop.streamPrioritiesSupported = attribute(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  prop.sharedMemPerMultiprocessor =
      static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  prop.regsPerMultiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  prop.managedMemory = attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  prop.concurrentManagedAccess = attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  prop.maxBlocksPerMultiProcessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  prop.memoryPoolsSupported = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  prop.memoryPoolSupportedHandleTypes =
      static_cast<unsigned int>(attribute(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES));
}

cudaError_t get_device_properties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  CUdevice handle = 0;
  cudaError_t status = device_handle(device, &handle);
  if (status != cudaSuccess) return status;
  cudaDeviceProp filled{};
  status = call_driver<&DriverTable::cuDeviceGetName>(filled.name, static_cast<int>(sizeof filled.name), handle);
  if (status != cudaSuccess) return status;
  status = call_driver<&DriverTable::cuDeviceTotalMem>(&filled.totalGlobalMem, handle);
  if (status != cudaSuccess) return status;
  fill_properties(filled, handle);
  *prop = filled;
  return cudaSuccess;
}

cudaError_t get_device_attribute(int* value, cudaDeviceAttr attribute, int device) {
  if (value == nullptr) return cudaErrorInvalidValue;
  CUdevice handle = 0;
  const cudaError_t status = device_handle(device, &handle);
  if (status != cudaSuccess) return status;
  // cudaDeviceAttr and CUdevice_attribute share their numbering.
  return call_driver<&DriverTable::cuDeviceGetAttribute>(
      value, static_cast<CUdevice_attribute>(attribute), handle);
}

cudaError_t get_device_count(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  return device_count(count);  // leaves *count untouched on failure, as NVIDIA's does
}

cudaError_t get_device(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  return current_device(device);
}

cudaError_t synchronize_device() {
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuCtxSynchronize>(nullptr);  // the current context
}

cudaError_t get_driver_version(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = loaded_driver_version();  // 0 when no driver is installed, still a success
  return cudaSuccess;
}

cudaError_t get_pci_bus_id(char* bus_id, int len, int device) {
  CUdevice handle = 0;
  if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuDeviceGetPCIBusId>(bus_id, len, handle);
}

cudaError_t get_device_by_pci_bus_id(int* device, const char* bus_id) {
  if (cudaError_t status = driver_status(); status != cudaSuccess) return status;
  CUdevice handle = 0;
  const cudaError_t status = call_driver<&DriverTable::cuDeviceGetByPCIBusId>(&handle, bus_id);
  if (status == cudaSuccess) *device = handle;  // the runtime's ordinals are the driver's
  return status;
}

// The device that meets the most of the properties a caller asks for that differ between simulated
// devices (total memory, then compute capability; every other property is the same on all of them);
// the lowest ordinal among equals.
cudaError_t choose_device(int* device, const cudaDeviceProp* prop) {
  if (device == nullptr || prop == nullptr) return cudaErrorInvalidValue;
  int count = 0;
  if (cudaError_t status = device_count(&count); status != cudaSuccess) return status;
  int best = 0, best_score = -1;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp have{};
    if (cudaError_t status = get_device_properties(&have, ordinal); status != cudaSuccess) return status;
    const int score = (have.totalGlobalMem >= prop->totalGlobalMem ? 2 : 0) +
                      (have.major > prop->major || (have.major == prop->major && have.minor >= prop->minor) ? 1 : 0);
    if (score > best_score) best = ordinal, best_score = score;
  }
  *device = best;
  return cudaSuccess;
}

cudaError_t get_host_atomic_capabilities(unsigned* capabilities, const cudaAtomicOperation* operations,
                                         unsigned count, int device) {
  CUdevice handle = 0;
  if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  // cudaAtomicOperation and CUatomicOperation share their values.
  return call_driver<&DriverTable::cuDeviceGetHostAtomicCapabilities>(
      capabilities, reinterpret_cast<const CUatomicOperation*>(operations), count, handle);
}

}  // namespace

extern "C" {

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  return api_call([&] { return get_pci_bus_id(pciBusId, len, device); });
}
cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  return api_call([&] {
    if (device == nullptr) return cudaErrorInvalidValue;
    return get_device_by_pci_bus_id(device, pciBusId);
  });
}
cudaError_t cudaChooseDevice(int* device, const struct cudaDeviceProp* prop) {
  return api_call([&] { return choose_device(device, prop); });
}
cudaError_t cudaSetValidDevices(int* device_arr, int len) {
  return api_call([&] { return set_valid_devices(device_arr, len); });
}
cudaError_t cudaDeviceGetHostAtomicCapabilities(unsigned int* capabilities, const enum cudaAtomicOperation* operations,
                                                unsigned int count, int device) {
  return api_call([&] { return get_host_atomic_capabilities(capabilities, operations, count, device); });
}
// Shared memory banks are four bytes wide on every simulated device and cannot be changed: as
// documented for such devices, the setting is accepted and has no effect.
cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig* pConfig) {
  return api_call([&] {
    if (pConfig == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t status = driver_status(); status != cudaSuccess) return status;
    *pConfig = cudaSharedMemBankSizeFourByte;
    return cudaSuccess;
  });
}
cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config) {
  return api_call([&] {
    if (config != cudaSharedMemBankSizeDefault && config != cudaSharedMemBankSizeFourByte &&
        config != cudaSharedMemBankSizeEightByte)
      return cudaErrorInvalidValue;
    return ensure_context();
  });
}

cudaError_t cudaGetDeviceCount(int* count) { return api_call([&] { return get_device_count(count); }); }
cudaError_t cudaGetDevice(int* device) { return api_call([&] { return get_device(device); }); }
cudaError_t cudaSetDevice(int device) { return api_call([&] { return select_device(device); }); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  return api_call([&] { return get_device_properties(prop, device); });
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  return api_call([&] { return get_device_attribute(value, attr, device); });
}
cudaError_t cudaDeviceSynchronize() { return api_call([&] { return synchronize_device(); }); }
cudaError_t cudaDeviceReset() { return api_call([&] { return reset_current_device(); }); }

cudaError_t cudaGetLastError() { return take_last_error(); }
cudaError_t cudaPeekAtLastError() { return peek_last_error(); }

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return finish(cudaErrorInvalidValue);
  *runtimeVersion = kRuntimeVersion;
  return cudaSuccess;
}
// Needs no working driver: reports 0 when none could be loaded.
cudaError_t cudaDriverGetVersion(int* driverVersion) { return finish(get_driver_version(driverVersion)); }

// The driver's registrations (the simulated devices send no notification).
cudaError_t cudaDeviceRegisterAsyncNotification(int device, cudaAsyncCallback callbackFunc, void* userData,
                                                cudaAsyncCallbackHandle_t* callback) {
  return api_call([&] {
    CUdevice handle = 0;
    if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuDeviceRegisterAsyncNotification>(
        handle, reinterpret_cast<CUasyncCallback>(callbackFunc), userData,
        reinterpret_cast<CUasyncCallbackHandle*>(callback));
  });
}
cudaError_t cudaDeviceUnregisterAsyncNotification(int device, cudaAsyncCallbackHandle_t callback) {
  return api_call([&] {
    CUdevice handle = 0;
    if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuDeviceUnregisterAsyncNotification>(
        handle, reinterpret_cast<CUasyncCallbackHandle>(callback));
  });
}

}  // extern "C"
