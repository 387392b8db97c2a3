// The simulated driver's private entry points: exported by the simulator's libcuda.so.1 for the
// simulated NVML (libnvidia-ml.so.1) only. NVIDIA's libcuda.so.1 has no such symbols; nothing but
// the simulator's own libraries may use them.
#pragma once

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

// The number of simulated devices (all of them: NVML ignores CUDA_VISIBLE_DEVICES, as NVIDIA's
// does). Before cuInit it reads the configuration (CUDASIM_DEVICES, CUDASIM_DEVICE_MEMORY) as cuInit
// would, without initialising the driver. CUDA_ERROR_INVALID_VALUE for a NULL count or a malformed
// configuration.
CUresult cudasimDeviceCount(int* count);

// A device's total memory and the memory this process has committed on it: context overheads,
// cuMemAlloc/cuMemAllocPitch memory, pool reservations, arrays and every other allocation charged
// to the device (0 before cuInit, when nothing can be, and for a device CUDA_VISIBLE_DEVICES hides);
// with CUDASIM_SHARED_DEVICES, what every process sharing the device took.
// `physical` numbers all simulated devices, as cudasimDeviceCount counts them.
// CUDA_ERROR_INVALID_DEVICE for an unknown number; CUDA_ERROR_INVALID_VALUE for a NULL output or a
// malformed configuration.
CUresult cudasimDeviceMemory(int physical, unsigned long long* total, unsigned long long* used);

// Whether device `peer` can access device `physical`'s memory, as cuDeviceCanAccessPeer answers
// for them (both numbered as cudasimDeviceCount counts, whatever CUDA_VISIBLE_DEVICES hides); like
// cudasimDeviceCount, it reads the configuration itself before cuInit. CUDA_ERROR_INVALID_DEVICE
// for an unknown number; CUDA_ERROR_INVALID_VALUE for a NULL output or a malformed configuration.
CUresult cudasimDevicePeerAccess(int physical, int peer, int* can_access);

// The number (as cudasimDeviceCount counts) of the device at a PCI address, as cuDeviceGetPCIBusId
// writes it ("domain:bus:device.function" or "bus:device.function", hexadecimal), whatever
// CUDA_VISIBLE_DEVICES hides; before cuInit too. CUDA_ERROR_INVALID_VALUE for NULL arguments or a
// malformed address, CUDA_ERROR_INVALID_DEVICE when no simulated device has it, CUDA_ERROR_UNKNOWN
// for a malformed configuration.
CUresult cudasimDeviceByPciBusId(const char* pci_bus_id, int* physical);

#ifdef __cplusplus
}

// The 16 bytes of a simulated device's UUID, as cuDeviceGetUuid_v2 reports them and NVML prints
// them: "cudasim", zeros, the device's number last. `physical` is the device's number among all
// simulated devices (CUDASIM_DEVICES), which CUDA_VISIBLE_DEVICES selects and orders: a device keeps
// its UUID whatever CUDA ordinal it gets.
inline void cudasim_device_uuid(int physical, unsigned char (&bytes)[16]) {
  for (unsigned char& b : bytes) b = 0;
  const char name[] = "cudasim";
  for (int i = 0; i < 7; ++i) bytes[i] = static_cast<unsigned char>(name[i]);
  bytes[15] = static_cast<unsigned char>(physical);
}

// The UUID as NVML and nvidia-smi print it: "GPU-" and the bytes in hex, grouped 4-2-2-2-6 (41
// characters with the NUL).
inline void cudasim_device_uuid_text(int physical, char (&text)[41]) {
  unsigned char b[16];
  cudasim_device_uuid(physical, b);
  const char digits[] = "0123456789abcdef";
  char* out = text;
  for (const char* prefix = "GPU-"; *prefix != '\0'; ++prefix) *out++ = *prefix;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *out++ = '-';
    *out++ = digits[b[i] >> 4];
    *out++ = digits[b[i] & 15];
  }
  *out = '\0';
}
#endif
