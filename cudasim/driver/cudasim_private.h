// The simulated driver's private entry points: exported by the simulator's libcuda.so.1 for the
// simulated NVML (libnvidia-ml.so.1) only. NVIDIA's libcuda.so.1 has no such symbols; nothing but
// the simulator's own libraries may use them.
#pragma once

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

// The number of simulated devices. Before cuInit it reads the configuration (CUDASIM_DEVICES,
// CUDASIM_DEVICE_MEMORY) as cuInit would, without initialising the driver. CUDA_ERROR_INVALID_VALUE
// for a NULL count or a malformed configuration.
CUresult cudasimDeviceCount(int* count);

// A device's total memory and the memory this process has committed on it: context overheads,
// cuMemAlloc/cuMemAllocPitch memory, pool reservations, arrays and every other allocation charged
// to the device (0 before cuInit, when nothing can be); with CUDASIM_SHARED_DEVICES, what every
// process sharing the device took. CUDA_ERROR_INVALID_DEVICE for an unknown
// ordinal; CUDA_ERROR_INVALID_VALUE for a NULL output or a malformed configuration.
CUresult cudasimDeviceMemory(int ordinal, unsigned long long* total, unsigned long long* used);

#ifdef __cplusplus
}

// The 16 bytes of a simulated device's UUID, as cuDeviceGetUuid_v2 reports them and NVML prints
// them ("GPU-" and the bytes in hex, grouped 4-2-2-2-6): "cudasim", zeros, the ordinal last.
inline void cudasim_device_uuid(int ordinal, unsigned char (&bytes)[16]) {
  for (unsigned char& b : bytes) b = 0;
  const char name[] = "cudasim";
  for (int i = 0; i < 7; ++i) bytes[i] = static_cast<unsigned char>(name[i]);
  bytes[15] = static_cast<unsigned char>(ordinal);
}
#endif
