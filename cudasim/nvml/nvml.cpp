// The simulated NVML (libnvidia-ml.so.1): device count and memory information of the simulated
// devices, read from the simulated driver's state in the same process through its private entry
// points (cudasim_private.h), so the program need not call cuInit. Like NVIDIA's, it sees every
// device whatever CUDA_VISIBLE_DEVICES says (index = the simulated device's number; devices are
// matched to CUDA's by UUID). `used` is what this process has committed on the device, or what
// every process took of it when CUDASIM_SHARED_DEVICES shares it.
#include "nvml_api.h"

#include "cudasim_private.h"
#include "device_limits.h"

#include <array>
#include <cstdio>
#include <cstdint>
#include <mutex>

// A device handle: one per possible simulated device, never freed, so handles stay valid (and
// compare equal) across nvmlShutdown / nvmlInit.
struct nvmlDevice_st {
  unsigned int index;
};

#define CUDASIM_NVML_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr unsigned int kMaxDevices = 64;  // CUDASIM_DEVICES is at most 64

constexpr std::array<nvmlDevice_st, kMaxDevices> device_table() {
  std::array<nvmlDevice_st, kMaxDevices> devices{};
  for (unsigned int i = 0; i < kMaxDevices; ++i) devices[i].index = i;
  return devices;
}
constinit std::array<nvmlDevice_st, kMaxDevices> g_devices = device_table();

// Invariant: init_count is the number of successful nvmlInit calls not yet matched by nvmlShutdown.
struct Library {
  std::mutex mu;
  unsigned long init_count = 0;
};

Library& library() {
  static Library* lib = new Library();  // never destroyed: usable from other libraries' destructors
  return *lib;
}

bool initialized() {
  std::lock_guard lock(library().mu);
  return library().init_count > 0;
}

// The device count the driver reports; 0 (and false) when its configuration is malformed.
bool device_count(unsigned int* count) {
  int n = 0;
  if (cudasimDeviceCount(&n) != CUDA_SUCCESS || n < 0) return false;
  *count = static_cast<unsigned int>(n);
  return true;
}

// A handle this library gave out for a device that exists.
bool valid_device(nvmlDevice_t device) {
  const auto address = reinterpret_cast<std::uintptr_t>(device);
  const auto first = reinterpret_cast<std::uintptr_t>(g_devices.data());
  if (address < first || address - first >= sizeof g_devices || (address - first) % sizeof(nvmlDevice_st) != 0)
    return false;
  unsigned int count = 0;
  return device_count(&count) && device->index < count;
}

// The device's total memory and what this process has committed on it.
nvmlReturn_t read_memory(nvmlDevice_t device, unsigned long long* total, unsigned long long* used) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (!valid_device(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (cudasimDeviceMemory(static_cast<int>(device->index), total, used) != CUDA_SUCCESS) return NVML_ERROR_UNKNOWN;
  return NVML_SUCCESS;
}

nvmlReturn_t init() {
  unsigned int count = 0;
  if (!device_count(&count)) return NVML_ERROR_UNKNOWN;  // the simulator's configuration is malformed
  std::lock_guard lock(library().mu);
  ++library().init_count;
  return NVML_SUCCESS;
}

}  // namespace

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(); }
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return init(); }

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard lock(library().mu);
  if (library().init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --library().init_count;
  return NVML_SUCCESS;
}

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return device_count(deviceCount) ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  unsigned int count = 0;
  if (!device_count(&count)) return NVML_ERROR_UNKNOWN;
  if (device == nullptr || index >= count) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || !valid_device(device)) return NVML_ERROR_INVALID_ARGUMENT;
  constexpr unsigned int kLength = 4 + 32 + 4 + 1;  // "GPU-", 16 bytes in hex, 4 dashes, NUL
  if (length < kLength) return NVML_ERROR_INSUFFICIENT_SIZE;
  char text[kLength];
  cudasim_device_uuid_text(static_cast<int>(device->index), text);
  std::snprintf(uuid, length, "%s", text);
  return NVML_SUCCESS;
}

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long total = 0, used = 0;
  if (nvmlReturn_t rc = read_memory(device, &total, &used); rc != NVML_SUCCESS) return rc;
  memory->total = total;
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  unsigned long long total = 0, used = 0;
  if (nvmlReturn_t rc = read_memory(device, &total, &used); rc != NVML_SUCCESS) return rc;
  memory->total = total;
  memory->reserved = 0;  // no memory set aside for the driver or firmware here
  memory->used = used;
  memory->free = total - used;
  return NVML_SUCCESS;
}

CUDASIM_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC Not Supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency Not Supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU Not Found";
    case NVML_ERROR_INVALID_STATE: return "Invalid State";
    default: return "Unknown Error";  // NVML_ERROR_UNKNOWN and codes NVML does not define
  }
}

// NVML's first, unversioned entry points, which libraries that look their functions up by name
// (NCCL) still ask for: the same answers as the _v2 ones.
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

// The simulated devices are sm_90-class (the driver's device_limits.h).
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (major == nullptr || minor == nullptr || !valid_device(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *major = cudasim::kComputeCapabilityMajor;
  *minor = cudasim::kComputeCapabilityMinor;
  return NVML_SUCCESS;
}

// The device at a PCI address (as cuDeviceGetPCIBusId writes it: domain 0, bus = device number + 1,
// device 0, function 0); NVML's accepted forms are "domain:bus:device.function" and
// "bus:device.function", hexadecimal. A malformed address: NVML_ERROR_INVALID_ARGUMENT; one no
// simulated device has: NVML_ERROR_NOT_FOUND. The first version differs only for GPUs this process
// may not use, which the simulator does not have.
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (pciBusId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  int physical = -1;
  switch (cudasimDeviceByPciBusId(pciBusId, &physical)) {
    case CUDA_SUCCESS: break;
    case CUDA_ERROR_INVALID_VALUE: return NVML_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_INVALID_DEVICE: return NVML_ERROR_NOT_FOUND;
    default: return NVML_ERROR_UNKNOWN;
  }
  if (physical < 0 || static_cast<unsigned>(physical) >= kMaxDevices) return NVML_ERROR_UNKNOWN;
  *device = &g_devices[static_cast<unsigned>(physical)];
  return NVML_SUCCESS;
}
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

// Peer to peer between two devices, as the simulated driver has it (cuDeviceCanAccessPeer,
// cuDeviceGetP2PAttribute): reading, writing, native atomics and the PCI path are OK between two
// distinct devices unless CUDASIM_PEER_ACCESS=none; NVLink is not simulated (nvmlDeviceGetNvLink*
// answer NVML_ERROR_NOT_SUPPORTED), so its capability is NVML_P2P_STATUS_NOT_SUPPORTED. A device
// is not its own peer (cuDeviceCanAccessPeer says 0): NVML_P2P_STATUS_NOT_SUPPORTED, with success,
// as NCCL asks about every ordered pair, the device and itself included, and stops on an error.
CUDASIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuP2PCapsIndex_t p2pIndex,
                                                        nvmlGpuP2PStatus_t* p2pStatus) {
  if (!initialized()) return NVML_ERROR_UNINITIALIZED;
  if (p2pStatus == nullptr || !valid_device(device1) || !valid_device(device2)) return NVML_ERROR_INVALID_ARGUMENT;
  bool capability_simulated = false;
  switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
    case NVML_P2P_CAPS_INDEX_PCI: capability_simulated = true; break;
    case NVML_P2P_CAPS_INDEX_NVLINK: break;
    default: return NVML_ERROR_INVALID_ARGUMENT;  // NVML_P2P_CAPS_INDEX_UNKNOWN and beyond
  }
  int peers = 0;
  if (cudasimDevicePeerAccess(static_cast<int>(device1->index), static_cast<int>(device2->index), &peers) !=
      CUDA_SUCCESS)
    return NVML_ERROR_UNKNOWN;
  *p2pStatus = capability_simulated && peers != 0 ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

// Functions NCCL looks up and calls without checking that they were found: not simulated. Each
// reads no argument, answers NVML_ERROR_NOT_SUPPORTED and says so once on stderr, rather than
// leaving the caller a null pointer to call.
namespace {
template <const char* Name>
nvmlReturn_t not_simulated() {
  static std::once_flag said;
  std::call_once(said, [] {
    std::fprintf(stderr, "cudasim: NVML's %s is not simulated; it returns NVML_ERROR_NOT_SUPPORTED\n", Name);
  });
  return NVML_ERROR_NOT_SUPPORTED;
}
}  // namespace
#define CUDASIM_NVML_NOT_SIMULATED(name)          \
  constexpr char name##_name[] = #name;           \
  CUDASIM_NVML_EXPORT nvmlReturn_t name() { return not_simulated<name##_name>(); }
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetIndex)
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetNvLinkState)
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetNvLinkCapability)
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetNvLinkRemotePciInfo)
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetFieldValues)
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetGpuFabricInfoV)
CUDASIM_NVML_NOT_SIMULATED(nvmlDeviceGetPlatformInfo)
CUDASIM_NVML_NOT_SIMULATED(nvmlSystemGetConfComputeState)
CUDASIM_NVML_NOT_SIMULATED(nvmlSystemGetConfComputeSettings)
#undef CUDASIM_NVML_NOT_SIMULATED
