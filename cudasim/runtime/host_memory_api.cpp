// Page-locked host memory: cudaMallocHost, cudaHostAlloc, cudaFreeHost, cudaHostRegister and the
// queries, each on the driver's form. With unified addressing the device pointer of pinned memory
// is its host pointer.
#include "context.h"
#include "driver_table.h"
#include "entry_point.h"

namespace cudasim::runtime {
namespace {

constexpr unsigned kHostAllocFlags = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;

// A zero-byte request succeeds with a null pointer, as cudaMalloc's does.
cudaError_t allocate_host(void** ptr, size_t size, unsigned flags) {
  if (ptr == nullptr || (flags & ~kHostAllocFlags) != 0) return cudaErrorInvalidValue;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  return with_context([&] {
    const cudaError_t status = call_driver<&DriverTable::cuMemHostAlloc>(ptr, size, flags);
    return status == cudaErrorMemoryAllocation ? cudaErrorMemoryAllocation : status;
  });
}

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMallocHost(void** ptr, size_t size) { return api_call([&] { return allocate_host(ptr, size, 0); }); }
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return api_call([&] { return allocate_host(pHost, size, flags); });
}
cudaError_t cudaFreeHost(void* ptr) {
  return api_call([&] {
    return with_context([&] { return ptr == nullptr ? cudaSuccess : call_driver<&DriverTable::cuMemFreeHost>(ptr); });
  });
}
cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (pDevice == nullptr) return api_call([] { return cudaErrorInvalidValue; });
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemHostGetDevicePointer>(reinterpret_cast<CUdeviceptr*>(pDevice), pHost,
                                                                  flags);
    });
  });
}
cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuMemHostGetFlags>(pFlags, pHost); }); });
}
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuMemHostRegister>(ptr, size, flags); }); });
}
cudaError_t cudaHostUnregister(void* ptr) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuMemHostUnregister>(ptr); }); });
}

}  // extern "C"
