/* The part of NVIDIA's NVML API (nvml.h) that the simulated libnvidia-ml.so.1 implements: exactly
 * these types and functions, with the values and layouts of NVML's API reference (the toolkit here
 * ships no nvml.h). Include it instead of nvml.h to build against the simulator; a program built
 * against NVIDIA's nvml.h calls the same symbols with the same layouts. C and C++. */
#ifndef CUDASIM_NVML_API_H
#define CUDASIM_NVML_API_H

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes (nvmlReturn_t). */
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* The status of one peer-to-peer capability between two devices (nvmlGpuP2PStatus_t). */
typedef enum nvmlGpuP2PStatus_enum {
  NVML_P2P_STATUS_OK = 0,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED,
  NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

/* The peer-to-peer capability asked about (nvmlGpuP2PCapsIndex_t). */
typedef enum nvmlGpuP2PCapsIndex_enum {
  NVML_P2P_CAPS_INDEX_READ = 0,
  NVML_P2P_CAPS_INDEX_WRITE = 1,
  NVML_P2P_CAPS_INDEX_NVLINK = 2,
  NVML_P2P_CAPS_INDEX_ATOMICS = 3,
  NVML_P2P_CAPS_INDEX_PCI = 4,
  NVML_P2P_CAPS_INDEX_PROP = NVML_P2P_CAPS_INDEX_PCI, /* the older name */
  NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

/* An opaque device handle. */
typedef struct nvmlDevice_st* nvmlDevice_t;

/* Memory information (v1): total = free + used. */
typedef struct nvmlMemory_st {
  unsigned long long total; /* total physical device memory, bytes */
  unsigned long long free;  /* unallocated device memory, bytes */
  unsigned long long used;  /* reserved and allocated device memory, bytes */
} nvmlMemory_t;

/* Memory information (v2): `version` must be nvmlMemory_v2. */
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved; /* device memory reserved for system use (driver or firmware) */
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2): the structure's size with the version number in the top byte. */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24u)))

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInit(void); /* the unversioned export: behaves as nvmlInit_v2 */
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
/* "GPU-" then the CUDA UUID in hex, 4-2-2-2-6 bytes; `length` must hold it and its NUL (41 bytes;
 * NVML_ERROR_INSUFFICIENT_SIZE otherwise). */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory);
/* The device at a PCI address: "domain:bus:device.function" or "bus:device.function", hexadecimal
 * (as cuDeviceGetPCIBusId writes it). NVML_ERROR_INVALID_ARGUMENT for NULL or a malformed address,
 * NVML_ERROR_NOT_FOUND when no device has it. */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device); /* as _v2 */
/* Whether `device2` can use capability `p2pIndex` on `device1` (NVML_P2P_STATUS_OK) or why not;
 * NVML_ERROR_INVALID_ARGUMENT for a handle that is no device, an index of UNKNOWN or beyond, or a
 * NULL status. */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t* p2pStatus);

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_NVML_API_H */
