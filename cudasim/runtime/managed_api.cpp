// Managed memory: cudaMallocManaged (freed by cudaFree, which calls cuMemFree_v2). The driver's
// cuMemAllocManaged checks the flags and the size, as the runtime documents them.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"

namespace cudasim::runtime {
namespace {

cudaError_t allocate_managed(void** ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUdeviceptr address = 0;
    const cudaError_t result = call_driver<&DriverTable::cuMemAllocManaged>(&address, size, flags);
    if (result == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
    return result;
  });
}

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  return api_call([&] { return allocate_managed(devPtr, size, flags); });
}

}  // extern "C"
