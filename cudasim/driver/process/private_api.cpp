// The simulator's private entry points (cudasim_private.h), which let the simulated NVML read the
// same device state as the driver in the same process without the program calling cuInit.
#include "cudasim_private.h"

#include "state.h"

#include <algorithm>

using namespace cudasim;

namespace {

// Before cuInit the process has committed nothing; the devices are the ones cuInit would create.
// Needs State::mu held.
CUresult device_memory(State& st, int physical, unsigned long long* total, unsigned long long* used,
                       int* count) {
  if (st.initialized) {
    if (!st.config.valid) return CUDA_ERROR_INVALID_VALUE;  // malformed (no visible device is fine: NVML sees all)
    if (count != nullptr) *count = st.config.device_count;
    if (total == nullptr) return CUDA_SUCCESS;
    if (physical < 0 || physical >= st.config.device_count) return CUDA_ERROR_INVALID_DEVICE;
    const int ordinal = ordinal_of_physical(st, physical);
    *total = st.config.device_memory[static_cast<std::size_t>(physical)];
    // A hidden device: nothing committed here; a shared one: what every process took of it.
    *used = ordinal >= 0 ? std::min<unsigned long long>(*total, device_used(st.device(ordinal))) : 0;
    return CUDA_SUCCESS;
  }
  const Config config = read_config();
  if (!config.valid) return CUDA_ERROR_INVALID_VALUE;
  if (count != nullptr) *count = config.device_count;
  if (total == nullptr) return CUDA_SUCCESS;
  if (physical < 0 || physical >= config.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *total = config.device_memory[static_cast<std::size_t>(physical)];
  *used = 0;
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cudasimDeviceCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  return device_memory(l.st, 0, nullptr, nullptr, count);
}

CUDASIM_EXPORT CUresult cudasimDeviceMemory(int physical, unsigned long long* total, unsigned long long* used) {
  if (total == nullptr || used == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  return device_memory(l.st, physical, total, used, nullptr);
}

CUDASIM_EXPORT CUresult cudasimDevicePeerAccess(int physical, int peer, int* can_access) {
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  const Config config = l.st.initialized ? l.st.config : read_config();
  if (!config.valid) return CUDA_ERROR_INVALID_VALUE;
  if (physical < 0 || physical >= config.device_count || peer < 0 || peer >= config.device_count)
    return CUDA_ERROR_INVALID_DEVICE;
  *can_access = devices_are_peers(config, physical, peer) ? 1 : 0;
  return CUDA_SUCCESS;
}
