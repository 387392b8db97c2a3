// Managed memory: cudaMallocManaged (freed by cudaFree, which calls cuMemFree_v2). The driver's
// cuMemAllocManaged checks the flags and the size, as the runtime documents them. Its hints
// (cudaMemAdvise, cudaMemPrefetchAsync, cudaStreamAttachMemAsync, cudaMemRangeGetAttribute(s)) are the
// driver's: the
// runtime's advice, location types and range attributes have the driver's values.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

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

CUmemLocation driver_location(const cudaMemLocation& location) {
  return CUmemLocation{static_cast<CUmemLocationType>(location.type), location.id};
}

}  // namespace

cudaError_t prefetch_async(const void* ptr, size_t count, cudaMemLocation location, unsigned int flags,
                           CUstream stream) {
  return with_context([&] {
    return call_driver<&DriverTable::cuMemPrefetchAsync>(reinterpret_cast<CUdeviceptr>(ptr), count,
                                                         driver_location(location), flags, stream);
  });
}

// cudaMemLocation and a device pointer array are the driver's CUmemLocation and CUdeviceptr array.
cudaError_t memory_batch_async(void** ptrs, size_t* sizes, size_t count, cudaMemLocation* locations,
                               size_t* first_of, size_t location_count, Batch kind, unsigned long long flags,
                               CUstream stream) {
  static_assert(sizeof(cudaMemLocation) == sizeof(CUmemLocation) && sizeof(void*) == sizeof(CUdeviceptr));
  auto* dptrs = reinterpret_cast<CUdeviceptr*>(ptrs);
  auto* driver_locations = reinterpret_cast<CUmemLocation*>(locations);
  return with_context([&] {
    if (kind == Batch::kDiscard)
      return call_driver<&DriverTable::cuMemDiscardBatchAsync>(dptrs, sizes, count, flags, stream);
    if (locations == nullptr) return cudaErrorInvalidValue;
    if (kind == Batch::kDiscardAndPrefetch)
      return call_driver<&DriverTable::cuMemDiscardAndPrefetchBatchAsync>(dptrs, sizes, count, driver_locations,
                                                                          first_of, location_count, flags, stream);
    return call_driver<&DriverTable::cuMemPrefetchBatchAsync>(dptrs, sizes, count, driver_locations, first_of,
                                                              location_count, flags, stream);
  });
}

cudaError_t attach_mem_async(CUstream stream, void* ptr, size_t length, unsigned int flags) {
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamAttachMemAsync>(stream, reinterpret_cast<CUdeviceptr>(ptr), length,
                                                             flags);
  });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  return api_call([&] { return allocate_managed(devPtr, size, flags); });
}

cudaError_t cudaMemAdvise(const void* devPtr, size_t count, enum cudaMemoryAdvise advice,
                          struct cudaMemLocation location) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemAdvise>(reinterpret_cast<CUdeviceptr>(devPtr), count,
                                                    static_cast<CUmem_advise>(advice), driver_location(location));
    });
  });
}

cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, struct cudaMemLocation location, unsigned int flags,
                                 cudaStream_t stream) {
  return api_call([&] { return prefetch_async(devPtr, count, location, flags, stream); });
}

cudaError_t cudaMemPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count, struct cudaMemLocation* prefetchLocs,
                                      size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                      cudaStream_t stream) {
  return api_call([&] {
    return memory_batch_async(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, Batch::kPrefetch,
                              flags, stream);
  });
}
cudaError_t cudaMemDiscardBatchAsync(void** dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                     cudaStream_t stream) {
  return api_call(
      [&] { return memory_batch_async(dptrs, sizes, count, nullptr, nullptr, 0, Batch::kDiscard, flags, stream); });
}
cudaError_t cudaMemDiscardAndPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                                struct cudaMemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                size_t numPrefetchLocs, unsigned long long flags,
                                                cudaStream_t stream) {
  return api_call([&] {
    return memory_batch_async(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs,
                              Batch::kDiscardAndPrefetch, flags, stream);
  });
}

// cudaMemAttachGlobal, cudaMemAttachHost and cudaMemAttachSingle are the driver's flags.
cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* devPtr, size_t length, unsigned int flags) {
  return api_call([&] { return attach_mem_async(stream, devPtr, length, flags); });
}

cudaError_t cudaMemRangeGetAttribute(void* data, size_t dataSize, enum cudaMemRangeAttribute attribute,
                                     const void* devPtr, size_t count) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemRangeGetAttribute>(data, dataSize,
                                                               static_cast<CUmem_range_attribute>(attribute),
                                                               reinterpret_cast<CUdeviceptr>(devPtr), count);
    });
  });
}

cudaError_t cudaMemRangeGetAttributes(void** data, size_t* dataSizes, enum cudaMemRangeAttribute* attributes,
                                      size_t numAttributes, const void* devPtr, size_t count) {
  static_assert(sizeof(cudaMemRangeAttribute) == sizeof(CUmem_range_attribute));
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMemRangeGetAttributes>(
          data, dataSizes, reinterpret_cast<CUmem_range_attribute*>(attributes), numAttributes,
          reinterpret_cast<CUdeviceptr>(devPtr), count);
    });
  });
}

}  // extern "C"
