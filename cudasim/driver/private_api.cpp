// The simulator's private entry points (cudasim_private.h), which let the simulated NVML read the
// same device state as the driver in the same process without the program calling cuInit.
#include "cudasim_private.h"

#include "shared_devices.h"
#include "state.h"

#include <algorithm>

using namespace cudasim;

namespace {

// Before cuInit the process has committed nothing; the devices are the ones cuInit would create.
// Needs State::mu held.
CUresult device_memory(State& st, int ordinal, unsigned long long* total, unsigned long long* used,
                       int* count) {
  if (st.initialized) {
    if (st.init_result != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;  // malformed configuration
    if (count != nullptr) *count = static_cast<int>(st.devices.size());
    if (total == nullptr) return CUDA_SUCCESS;
    if (!valid_device(st, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    const Device& dev = st.device(ordinal);
    *total = dev.total;
    *used = std::min(dev.total, dev.committed + shared_devices::others(ordinal));
    return CUDA_SUCCESS;
  }
  const Config config = read_config();
  if (!config.valid) return CUDA_ERROR_INVALID_VALUE;
  if (count != nullptr) *count = config.device_count;
  if (total == nullptr) return CUDA_SUCCESS;
  if (ordinal < 0 || ordinal >= config.device_count) return CUDA_ERROR_INVALID_DEVICE;
  *total = config.device_memory[static_cast<std::size_t>(ordinal)];
  *used = 0;
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cudasimDeviceCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  return device_memory(l.st, 0, nullptr, nullptr, count);
}

CUDASIM_EXPORT CUresult cudasimDeviceMemory(int ordinal, unsigned long long* total, unsigned long long* used) {
  if (total == nullptr || used == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  return device_memory(l.st, ordinal, total, used, nullptr);
}
