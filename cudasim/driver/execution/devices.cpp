// cuInit, the driver version and the device queries.
#include "cuda_api.h"  // first: cuda.h with every versioned name declared (v1 cuDeviceGetUuid too)
#include "cudasim_private.h"
#include "device_limits.h"
#include "report.h"
#include "shared_device.h"
#include "state.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

using namespace cudasim;

#include <cstdlib>

namespace {

// Attribute values of the simulated device (an sm_90-class part). Attributes not listed read 0.
int attribute_value(CUdevice_attribute attrib, int physical) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return kComputeCapabilityMajor;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return kComputeCapabilityMinor;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return kMultiprocessors;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;  // cuLaunchCooperativeKernel (kernels.cpp)
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: return 1;  // cuLaunchCooperativeKernelMultiDevice
    // cuFlushGPUDirectRDMAWrites works (no remote writer exists, so it has nothing to wait for); the
    // stream memory operations' flush does not (stream_memops.cpp), and no GPUDirect RDMA API
    // (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED) is simulated.
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: return CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;      // cluster dimensions (kernels.cpp)
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;  // cuIpcGetEventHandle (ipc_events.cpp)
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;  // cuMemHostRegister (host_memory.cpp)
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
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return kTextureAlignment;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return kTexturePitchAlignment;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: return kMaxTexture1DLinearWidth;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: return kMaxTexture2DLinearWidth;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: return kMaxTexture2DLinearHeight;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: return kMaxTexture2DLinearPitch;
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

// --- identities and older queries ---

namespace {

// A device's PCI address: domain 0, bus = device number + 1 (CU_DEVICE_ATTRIBUTE_PCI_BUS_ID), device 0,
// function 0.
constexpr int kPciDomain = 0;
constexpr int kPciDevice = 0;

// Parses one hexadecimal field of a PCI bus id up to `end` (a character or the string's end).
bool hex_field(const char*& p, char end, unsigned* value) {
  const char* start = p;
  unsigned v = 0;
  for (; std::isxdigit(static_cast<unsigned char>(*p)) && p - start < 8; ++p) {
    v = v * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(*p)) ? *p - '0'
                                                                                     : std::tolower(*p) - 'a' + 10);
  }
  if (p == start || *p != end) return false;
  if (end != '\0') ++p;
  *value = v;
  return true;
}

// [domain]:[bus]:[device].[function], [domain]:[bus]:[device] or [bus]:[device].[function], hexadecimal.
// The function is 0 when the text has none.
bool parse_pci_bus_id(const char* text, unsigned* domain, unsigned* bus, unsigned* device, unsigned* function) {
  const int colons = static_cast<int>(std::count(text, text + std::strlen(text), ':'));
  const bool has_function = std::strchr(text, '.') != nullptr;
  const char* p = text;
  *domain = 0;
  *function = 0;
  if (colons == 2) {
    if (!hex_field(p, ':', domain) || !hex_field(p, ':', bus)) return false;
    return has_function ? hex_field(p, '.', device) && hex_field(p, '\0', function) : hex_field(p, '\0', device);
  }
  return colons == 1 && has_function && hex_field(p, ':', bus) && hex_field(p, '.', device) &&
         hex_field(p, '\0', function);
}

}  // namespace

// The pre-11.4 form: the same identity as cuDeviceGetUuid_v2 (no MIG instances are simulated).
CUDASIM_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUDASIM_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  const int physical = l.st.device(dev).physical;
  *major = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, physical);
  *minor = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, physical);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  const int physical = l.st.device(dev).physical;
  auto value = [physical](CUdevice_attribute a) { return attribute_value(a, physical); };
  *prop = CUdevprop{};
  prop->maxThreadsPerBlock = value(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = value(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = value(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = value(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = value(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = value(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = value(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->sharedMemPerBlock = value(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->totalConstantMemory = value(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->SIMDWidth = value(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = value(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->regsPerBlock = value(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->clockRate = value(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  prop->textureAlign = value(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

// "domain:bus:device.function" in hexadecimal, shortened to `len` bytes (NUL included) as the
// name is; 13 bytes hold all of it.
CUDASIM_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  const int bus = attribute_value(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, l.st.device(dev).physical);
  std::snprintf(pciBusId, static_cast<std::size_t>(len), "%04x:%02x:%02x.0", kPciDomain, bus, kPciDevice);
  return CUDA_SUCCESS;
}

// The visible device at that address; a well-formed address no visible device has:
// CUDA_ERROR_INVALID_DEVICE; a malformed one: CUDA_ERROR_INVALID_VALUE.
CUDASIM_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  unsigned domain = 0, bus = 0, device = 0, function = 0;  // the function is not compared
  if (dev == nullptr || pciBusId == nullptr || !parse_pci_bus_id(pciBusId, &domain, &bus, &device, &function))
    return CUDA_ERROR_INVALID_VALUE;
  for (const Device& d : l.st.devices) {
    if (domain == kPciDomain && device == kPciDevice &&
        bus == static_cast<unsigned>(attribute_value(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d.physical))) {
      *dev = d.ordinal;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

// For the simulated NVML: the device at that address among all simulated devices, whatever
// CUDA_VISIBLE_DEVICES hides (NVML sees them all), before cuInit too. The function must be 0 (each
// simulated device is function 0 of its own bus).
CUDASIM_EXPORT CUresult cudasimDeviceByPciBusId(const char* pci_bus_id, int* physical) {
  Locked l;
  const Config config = l.st.initialized ? l.st.config : read_config();
  if (!config.valid) return CUDA_ERROR_UNKNOWN;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (physical == nullptr || pci_bus_id == nullptr || !parse_pci_bus_id(pci_bus_id, &domain, &bus, &device, &function))
    return CUDA_ERROR_INVALID_VALUE;
  for (int d = 0; d < config.device_count; ++d) {
    if (domain == kPciDomain && device == kPciDevice && function == 0 &&
        bus == static_cast<unsigned>(attribute_value(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d))) {
      *physical = d;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

// Contexts with execution affinity are not simulated (cuCtxCreate_v3 checks only their shape), so
// the device reports no support for any affinity type.
CUDASIM_EXPORT CUresult cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType type, CUdevice dev) {
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  if (pi == nullptr || type < 0 || type >= CU_EXEC_AFFINITY_TYPE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *pi = 0;
  return CUDA_SUCCESS;
}

// The link to the host supports no atomic operation natively (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED
// reads 0): every capability mask is 0.
CUDASIM_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned int* capabilities,
                                                          const CUatomicOperation* operations, unsigned int count,
                                                          CUdevice dev) {
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  if (capabilities == nullptr || operations == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    if (operations[i] < 0 || operations[i] >= CU_ATOMIC_OPERATION_MAX) return CUDA_ERROR_INVALID_VALUE;
  }
  std::fill(capabilities, capabilities + count, 0u);
  return CUDA_SUCCESS;
}

// --- async notifications ---
// Registered and unregistered as documented; the simulated devices send none (no over-budget
// notification exists without a budget), so no callback is ever called.
struct CUasyncCallbackEntry_st {
  CUdevice device;
  CUasyncCallback function;
  void* user_data;
};

namespace {

// The live registrations, guarded by State::mu (a handle is looked up before it is used).
std::map<CUasyncCallbackEntry_st*, std::unique_ptr<CUasyncCallbackEntry_st>>& async_callbacks() {
  static auto* callbacks = new std::map<CUasyncCallbackEntry_st*, std::unique_ptr<CUasyncCallbackEntry_st>>;
  return *callbacks;
}

}  // namespace

CUDASIM_EXPORT CUresult cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc,
                                                          void* userData, CUasyncCallbackHandle* callback) {
  Locked l;
  if (CUresult rc = device_status(l, device); rc != CUDA_SUCCESS) return rc;
  if (callbackFunc == nullptr || callback == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto entry = std::make_unique<CUasyncCallbackEntry_st>(CUasyncCallbackEntry_st{device, callbackFunc, userData});
  *callback = entry.get();
  async_callbacks().emplace(entry.get(), std::move(entry));
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceUnregisterAsyncNotification(CUdevice device, CUasyncCallbackHandle callback) {
  Locked l;
  if (CUresult rc = device_status(l, device); rc != CUDA_SUCCESS) return rc;
  auto it = async_callbacks().find(callback);
  if (it == async_callbacks().end() || it->second->device != device) return CUDA_ERROR_INVALID_VALUE;
  async_callbacks().erase(it);
  return CUDA_SUCCESS;
}

// --- GPUDirect RDMA ---
// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS says this is supported; nothing writes
// into a simulated device from outside, so once the arguments are valid there is nothing to wait for.
CUDASIM_EXPORT CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                                   CUflushGPUDirectRDMAWritesScope scope) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX) return CUDA_ERROR_INVALID_VALUE;
  if (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
