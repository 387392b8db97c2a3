// cuInit, the driver version and the device queries.
#include "cudasim_private.h"
#include "device_limits.h"
#include "report.h"
#include "shared_device.h"
#include "state.h"

#include <cstdio>
#include <cstring>

using namespace cudasim;

#include <cstdlib>

namespace {

// Attribute values of the simulated device (an sm_90-class part). Attributes not listed read 0.
int attribute_value(CUdevice_attribute attrib, int physical) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return kMultiprocessors;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return kWarpSize;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return static_cast<int>(kMaxThreadsPerBlock);
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return static_cast<int>(kMaxBlockDim[0]);
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return static_cast<int>(kMaxBlockDim[1]);
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return static_cast<int>(kMaxBlockDim[2]);
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return static_cast<int>(kMaxGridDim[0]);
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return static_cast<int>(kMaxGridDim[1]);
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return static_cast<int>(kMaxGridDim[2]);
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return kMaxSharedBytesPerBlock;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return kMaxSharedBytesPerBlockOptin;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return kSharedBytesPerMultiprocessor;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return kReservedSharedBytesPerBlock;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return kRegistersPerMultiprocessor;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return kMaxBlocksPerMultiprocessor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return static_cast<int>(kMaxPersistingL2Bytes);
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return kRegistersPerBlock;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return kL2Bytes;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;  // unless CUDASIM_VMM says otherwise
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: return 1;  // arrays.cpp
    // Stream memory operations (stream_memops.cpp): 64-bit ones and NOR waits; no remote-write flush.
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return physical + 1;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return kMaxThreadsPerMultiprocessor;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    default: return 0;
  }
}

}  // namespace

bool cudasim::valid_device(const State& st, CUdevice dev) {
  return dev >= 0 && static_cast<std::size_t>(dev) < st.devices.size();
}

int cudasim::ordinal_of_physical(const State& st, int physical) {
  for (const Device& dev : st.devices) {
    if (dev.physical == physical) return dev.ordinal;
  }
  return -1;
}

CUDASIM_EXPORT CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  State& st = l.st;
  claim_report();
  if (st.initialized) return st.init_result;
  st.initialized = true;
  st.config = read_config();
    if (!st.config.valid) {
    st.init_result = CUDA_ERROR_INVALID_VALUE;
    return st.init_result;
  }
  if (st.config.visible.empty()) {  // CUDA_VISIBLE_DEVICES names no device
    st.init_result = CUDA_ERROR_NO_DEVICE;
    return st.init_result;
  }
  for (const int physical : st.config.visible) {
    Device dev;
    dev.ordinal = static_cast<int>(st.devices.size());
    dev.physical = physical;
    dev.total = st.config.device_memory[static_cast<std::size_t>(physical)];
    st.devices.push_back(dev);
  }
  for (int i = 0; i < static_cast<int>(st.devices.size()); ++i) {
    Device& dev = st.device(i);
    dev.default_pool = dev.current_pool = create_default_pool(st, i);
    if (!st.config.shared_devices_dir.empty()) {
      dev.shared = attach_shared_device(st.config.shared_devices_dir, dev.physical, dev.total);
      if (dev.shared == nullptr) {  // said on stderr
        st.init_result = CUDA_ERROR_INVALID_VALUE;
        return st.init_result;
      }
    }
  }
  st.init_result = CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

int cudasim::driver_version() {
  {
    Locked l;
    if (l.st.initialized && l.st.config.valid) return l.st.config.driver_version;
  }
  // Before cuInit (cuDriverGetVersion and cuGetProcAddress work then): the variable as it is now; a
  // malformed one reads as the default here and makes cuInit fail.
  const char* v = std::getenv("CUDASIM_DRIVER_VERSION");
  return v == nullptr ? kDefaultDriverVersion : parse_driver_version(v).value_or(kDefaultDriverVersion);
}

CUDASIM_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = driver_version();
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, ordinal); rc != CUDA_SUCCESS) return rc;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  *count = static_cast<int>(l.st.devices.size());
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  std::snprintf(name, static_cast<std::size_t>(len), "Simulated CUDA Device %d", l.st.device(dev).physical);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  *bytes = l.st.device(dev).total;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  const int physical = l.st.device(dev).physical;
  *pi = attrib == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? supports_vmm(l.st.config, physical)
                                                                        : attribute_value(attrib, physical);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  unsigned char bytes[16];
  cudasim_device_uuid(l.st.device(dev).physical, bytes);
  std::memcpy(uuid->bytes, bytes, sizeof bytes);
  return CUDA_SUCCESS;
}
