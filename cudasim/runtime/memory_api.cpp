// Device memory: allocation, information, copies, sets and pointer attributes.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

namespace cudasim::runtime {
namespace {

CUdeviceptr device_address(const void* ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

cudaError_t allocate(void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (size == 0) {  // documented: a zero-byte request succeeds with a null pointer
    *ptr = nullptr;
    return cudaSuccess;
  }
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  CUdeviceptr address = 0;
  const cudaError_t result = call_driver<&DriverTable::cuMemAlloc>(&address, size);
  if (result == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
  return result;
}

// cudaFree(0) only initialises the context. The wait for work still using the memory is the
// driver's (cuMemFree synchronises), so an interposed cuMemFree must provide it too.
cudaError_t release(void* ptr) {
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess || ptr == nullptr) return status;
  return call_driver<&DriverTable::cuMemFree>(device_address(ptr));
}

cudaError_t allocate_pitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  if (ptr == nullptr || pitch == nullptr) return cudaErrorInvalidValue;
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  // The element size only bounds the pitch alignment; 16 bytes fits every element type.
  constexpr unsigned int kElementSizeBytes = 16;
  CUdeviceptr address = 0;
  const cudaError_t result =
      call_driver<&DriverTable::cuMemAllocPitch>(&address, pitch, width, height, kElementSizeBytes);
  if (result == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
  return result;
}

// cudaMalloc3D: a pitched allocation of height x depth rows of `width` bytes.
cudaError_t allocate_3d(cudaPitchedPtr* out, cudaExtent extent) {
  if (out == nullptr) return cudaErrorInvalidValue;
  size_t rows = 0;
  if (__builtin_mul_overflow(extent.height, extent.depth, &rows)) return cudaErrorMemoryAllocation;
  void* ptr = nullptr;
  size_t pitch = 0;
  if (cudaError_t status = allocate_pitch(&ptr, &pitch, extent.width, rows); status != cudaSuccess) return status;
  *out = cudaPitchedPtr{ptr, pitch, extent.width, extent.height};
  return cudaSuccess;
}

cudaError_t memory_info(size_t* free, size_t* total) {
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuMemGetInfo>(free, total);
}

// A legacy-stream copy uses the driver's synchronous copies; any other stream copies
// asynchronously on it and, when asked, waits for that stream.
cudaError_t copy_on_stream(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                           CUstream stream) {
  const CUdeviceptr to = device_address(dst);
  const CUdeviceptr from = device_address(src);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return call_driver<&DriverTable::cuMemcpyHtoDAsync>(to, src, count, stream);
    case cudaMemcpyDeviceToHost:
      return call_driver<&DriverTable::cuMemcpyDtoHAsync>(dst, from, count, stream);
    case cudaMemcpyDeviceToDevice:
      return call_driver<&DriverTable::cuMemcpyDtoDAsync>(to, from, count, stream);
    default:  // cudaMemcpyHostToHost, cudaMemcpyDefault: unified addressing tells the kinds apart
      return call_driver<&DriverTable::cuMemcpyAsync>(to, from, count, stream);
  }
}

cudaError_t copy_on_legacy_stream(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const CUdeviceptr to = device_address(dst);
  const CUdeviceptr from = device_address(src);
  switch (kind) {
    case cudaMemcpyHostToDevice: return call_driver<&DriverTable::cuMemcpyHtoD>(to, src, count);
    case cudaMemcpyDeviceToHost: return call_driver<&DriverTable::cuMemcpyDtoH>(dst, from, count);
    case cudaMemcpyDeviceToDevice: return call_driver<&DriverTable::cuMemcpyDtoD>(to, from, count);
    default: return call_driver<&DriverTable::cuMemcpy>(to, from, count);
  }
}

bool is_legacy(CUstream stream) { return stream == nullptr || stream == CU_STREAM_LEGACY; }

cudaError_t pointer_attributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return cudaErrorInvalidValue;
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  const CUdeviceptr address = device_address(ptr);
  cudaPointerAttributes found{};
  unsigned int memory_type = 0;
  if (call_driver<&DriverTable::cuPointerGetAttribute>(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                       address) != cudaSuccess) {
    // Since CUDA 11 a pointer unknown to CUDA is plain host memory, not an error.
    found.type = cudaMemoryTypeUnregistered;
    found.device = -2;
    *attributes = found;
    return cudaSuccess;
  }
  found.type = memory_type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  int is_managed = 0;
  if (call_driver<&DriverTable::cuPointerGetAttribute>(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                                       address) == cudaSuccess && is_managed != 0)
    found.type = cudaMemoryTypeManaged;
  const cudaError_t ordinal = call_driver<&DriverTable::cuPointerGetAttribute>(
      &found.device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
  if (ordinal != cudaSuccess) return ordinal;
  CUdeviceptr device_pointer = 0;
  if (call_driver<&DriverTable::cuPointerGetAttribute>(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                                       address) == cudaSuccess)
    found.devicePointer = reinterpret_cast<void*>(device_pointer);
  void* host_pointer = nullptr;
  if (call_driver<&DriverTable::cuPointerGetAttribute>(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                                       address) == cudaSuccess)
    found.hostPointer = host_pointer;
  *attributes = found;
  return cudaSuccess;
}

}  // namespace

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, CUstream stream,
                 Completion completion) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess || count == 0) return status;
  if (completion == Completion::kSynchronous && is_legacy(stream))
    return copy_on_legacy_stream(dst, src, count, kind);
  const cudaError_t queued = copy_on_stream(dst, src, count, kind, stream);
  if (queued != cudaSuccess || completion == Completion::kAsynchronous) return queued;
  return call_driver<&DriverTable::cuStreamSynchronize>(stream);
}

cudaError_t set(void* dst, int value, size_t count, CUstream stream, Completion completion) {
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess || count == 0) return status;
  const auto byte = static_cast<unsigned char>(value);
  if (completion == Completion::kSynchronous && is_legacy(stream))
    return call_driver<&DriverTable::cuMemsetD8>(device_address(dst), byte, count);
  return call_driver<&DriverTable::cuMemsetD8Async>(device_address(dst), byte, count, stream);
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) { return api_call([&] { return allocate(devPtr, size); }); }
cudaError_t cudaFree(void* devPtr) { return api_call([&] { return release(devPtr); }); }
cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  return api_call([&] { return allocate_pitch(devPtr, pitch, width, height); });
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) { return api_call([&] { return memory_info(free, total); }); }
cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent) {
  return api_call([&] { return allocate_3d(pitchedDevPtr, extent); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return api_call([&] { return copy(dst, src, count, kind, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return api_call([&] { return copy(dst, src, count, kind, stream, Completion::kAsynchronous); });
}
cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return api_call([&] { return set(devPtr, value, count, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return api_call([&] { return set(devPtr, value, count, stream, Completion::kAsynchronous); });
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  return api_call([&] { return pointer_attributes(attributes, ptr); });
}

}  // extern "C"
