// Synchronising contexts that are not current.
#include "context/context_sync.h"

#include <algorithm>
#include <vector>

#include "context/peer_access.h"
#include "driver/real_driver.h"

namespace gpumem::shim {

bool name_primary_context(CUdevice device, CUcontext& primary) noexcept {
  const RealDriver& driver = real_driver();
  primary = nullptr;
  unsigned int flags = 0;
  int active = 0;
  if (driver.cuDevicePrimaryCtxGetState == nullptr || driver.cuDevicePrimaryCtxRetain == nullptr ||
      driver.cuDevicePrimaryCtxRelease_v2 == nullptr ||
      driver.cuDevicePrimaryCtxGetState(device, &flags, &active) != CUDA_SUCCESS) {
    return false;
  }
  if (active == 0) return true;
  // Retaining an active primary context only names it.
  if (driver.cuDevicePrimaryCtxRetain(&primary, device) != CUDA_SUCCESS) {
    primary = nullptr;
    return false;
  }
  driver.cuDevicePrimaryCtxRelease_v2(device);
  return true;
}

CUcontext active_primary_context(CUdevice device) noexcept {
  CUcontext primary = nullptr;
  return name_primary_context(device, primary) ? primary : nullptr;
}

CUresult synchronize_context(CUcontext context) noexcept {
  const RealDriver& driver = real_driver();
  CUcontext current = nullptr;
  if (driver.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context) return driver.cuCtxSynchronize();
  if (driver.cuCtxSynchronize_v2 != nullptr) return driver.cuCtxSynchronize_v2(context);
  // cuCtxSynchronize waits for the current context only: make this one current for the call.
  if (driver.cuCtxPushCurrent_v2 == nullptr || driver.cuCtxPopCurrent_v2 == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult pushed = driver.cuCtxPushCurrent_v2(context);
  if (pushed != CUDA_SUCCESS) return pushed;
  const CUresult result = driver.cuCtxSynchronize();
  CUcontext popped = nullptr;
  driver.cuCtxPopCurrent_v2(&popped);
  return result;
}

CUresult synchronize_contexts_reaching(CUcontext owner, CUdevice device) noexcept {
  try {
    std::vector<CUcontext> contexts{owner};
    for (const CUcontext accessor : peer_access::contexts_with_access(owner)) contexts.push_back(accessor);
    for (const CUdevice peer : peer_access::devices_able_to_access(device)) {
      if (const CUcontext primary = active_primary_context(peer)) contexts.push_back(primary);
    }
    std::sort(contexts.begin(), contexts.end());
    contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
    CUresult first_failure = CUDA_SUCCESS;
    for (const CUcontext context : contexts) {
      const CUresult result = synchronize_context(context);
      if (result != CUDA_SUCCESS && first_failure == CUDA_SUCCESS) first_failure = result;
    }
    return first_failure;
  } catch (...) {  // no host memory for the list: the owner at least
    return synchronize_context(owner);
  }
}

}  // namespace gpumem::shim
