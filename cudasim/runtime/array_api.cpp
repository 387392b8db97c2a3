// CUDA arrays: cudaMallocArray, cudaMalloc3DArray, cudaMallocMipmappedArray and their frees, over
// the driver's cuArray3DCreate / cuMipmappedArrayCreate. cudaArray_t and cudaMipmappedArray_t are
// the driver's CUarray and CUmipmappedArray; the array rules (shapes, flags, sizes) are the driver's.
#include "channel_formats.h"
#include "context.h"
#include "driver_table.h"
#include "error_state.h"

namespace cudasim::runtime {
namespace {

// The driver format for `bits`-bit channels of a signed, unsigned or float kind; false when the
// runtime has no such format.
bool plain_format(cudaChannelFormatKind kind, int bits, CUarray_format* format) {
  switch (kind) {
    case cudaChannelFormatKindSigned:
      if (bits == 8) *format = CU_AD_FORMAT_SIGNED_INT8;
      else if (bits == 16) *format = CU_AD_FORMAT_SIGNED_INT16;
      else if (bits == 32) *format = CU_AD_FORMAT_SIGNED_INT32;
      else return false;
      return true;
    case cudaChannelFormatKindUnsigned:
      if (bits == 8) *format = CU_AD_FORMAT_UNSIGNED_INT8;
      else if (bits == 16) *format = CU_AD_FORMAT_UNSIGNED_INT16;
      else if (bits == 32) *format = CU_AD_FORMAT_UNSIGNED_INT32;
      else return false;
      return true;
    case cudaChannelFormatKindFloat:
      if (bits == 16) *format = CU_AD_FORMAT_HALF;
      else if (bits == 32) *format = CU_AD_FORMAT_FLOAT;
      else return false;
      return true;
    default:
      return false;
  }
}

// The kinds cudaChannelFormatKind lists beyond signed, unsigned and float: packed normalised,
// block-compressed and NV12 formats, which the simulated driver has no layout for.
bool specialised_kind(cudaChannelFormatKind kind) {
  switch (kind) {
    case cudaChannelFormatKindNV12:
    case cudaChannelFormatKindUnsignedNormalized8X1:
    case cudaChannelFormatKindUnsignedNormalized8X2:
    case cudaChannelFormatKindUnsignedNormalized8X4:
    case cudaChannelFormatKindUnsignedNormalized16X1:
    case cudaChannelFormatKindUnsignedNormalized16X2:
    case cudaChannelFormatKindUnsignedNormalized16X4:
    case cudaChannelFormatKindSignedNormalized8X1:
    case cudaChannelFormatKindSignedNormalized8X2:
    case cudaChannelFormatKindSignedNormalized8X4:
    case cudaChannelFormatKindSignedNormalized16X1:
    case cudaChannelFormatKindSignedNormalized16X2:
    case cudaChannelFormatKindSignedNormalized16X4:
    case cudaChannelFormatKindUnsignedBlockCompressed1:
    case cudaChannelFormatKindUnsignedBlockCompressed1SRGB:
    case cudaChannelFormatKindUnsignedBlockCompressed2:
    case cudaChannelFormatKindUnsignedBlockCompressed2SRGB:
    case cudaChannelFormatKindUnsignedBlockCompressed3:
    case cudaChannelFormatKindUnsignedBlockCompressed3SRGB:
    case cudaChannelFormatKindUnsignedBlockCompressed4:
    case cudaChannelFormatKindSignedBlockCompressed4:
    case cudaChannelFormatKindUnsignedBlockCompressed5:
    case cudaChannelFormatKindSignedBlockCompressed5:
    case cudaChannelFormatKindUnsignedBlockCompressed6H:
    case cudaChannelFormatKindSignedBlockCompressed6H:
    case cudaChannelFormatKindUnsignedBlockCompressed7:
    case cudaChannelFormatKindUnsignedBlockCompressed7SRGB:
    case cudaChannelFormatKindUnsignedNormalized1010102:
      return true;
    default:
      return false;
  }
}

}  // namespace

// cudaChannelFormatDesc -> the driver's format and channel count. The channels are x, y, z, w in
// that order: 1, 2 or 4 of them, all of x's width (8, 16 or 32 bits; float: 16 or 32), the rest 0.
cudaError_t driver_channel_format(const cudaChannelFormatDesc& desc, CUarray_format* format, unsigned* channels) {
  if (specialised_kind(desc.f)) return cudaErrorNotSupported;
  const int widths[4] = {desc.x, desc.y, desc.z, desc.w};
  unsigned count = 0;
  while (count < 4 && widths[count] != 0) {
    if (widths[count] != desc.x) return cudaErrorInvalidValue;
    ++count;
  }
  for (unsigned i = count; i < 4; ++i) {
    if (widths[i] != 0) return cudaErrorInvalidValue;
  }
  if ((count != 1 && count != 2 && count != 4) || !plain_format(desc.f, desc.x, format)) return cudaErrorInvalidValue;
  *channels = count;
  return cudaSuccess;
}

// The runtime's channel description of a driver format and channel count (the inverse of
// driver_channel_format): channels x, y, z, w in that order, all of the format's width.
cudaChannelFormatDesc channel_desc(CUarray_format format, unsigned channels) {
  int bits = 32;
  cudaChannelFormatKind kind = cudaChannelFormatKindUnsigned;
  switch (format) {
    case CU_AD_FORMAT_SIGNED_INT8: bits = 8, kind = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_UNSIGNED_INT8: bits = 8; break;
    case CU_AD_FORMAT_SIGNED_INT16: bits = 16, kind = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: bits = 16; break;
    case CU_AD_FORMAT_HALF: bits = 16, kind = cudaChannelFormatKindFloat; break;
    case CU_AD_FORMAT_SIGNED_INT32: kind = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_FLOAT: kind = cudaChannelFormatKindFloat; break;
    default: break;  // CU_AD_FORMAT_UNSIGNED_INT32: the only other format the driver accepts here
  }
  const int width[4] = {bits, channels >= 2 ? bits : 0, channels == 4 ? bits : 0, channels == 4 ? bits : 0};
  return cudaChannelFormatDesc{width[0], width[1], width[2], width[3], kind};
}

namespace {

cudaError_t driver_descriptor(const cudaChannelFormatDesc& desc, size_t width, size_t height, size_t depth,
                              unsigned int flags, CUDA_ARRAY3D_DESCRIPTOR* out) {
  CUDA_ARRAY3D_DESCRIPTOR converted{};
  const cudaError_t status = driver_channel_format(desc, &converted.Format, &converted.NumChannels);
  if (status != cudaSuccess) return status;
  converted.Width = width;
  converted.Height = height;
  converted.Depth = depth;
  converted.Flags = flags;
  *out = converted;
  return cudaSuccess;
}

cudaError_t malloc_array(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width, size_t height,
                         size_t depth, unsigned int flags) {
  if (array == nullptr || desc == nullptr) return cudaErrorInvalidValue;
  CUDA_ARRAY3D_DESCRIPTOR converted{};
  const cudaError_t status = driver_descriptor(*desc, width, height, depth, flags, &converted);
  if (status != cudaSuccess) return status;
  return with_context([&] {
    CUarray handle = nullptr;
    const cudaError_t result = call_driver<&DriverTable::cuArray3DCreate>(&handle, &converted);
    if (result == cudaSuccess) *array = reinterpret_cast<cudaArray_t>(handle);
    return result;
  });
}

cudaError_t malloc_mipmapped_array(cudaMipmappedArray_t* array, const cudaChannelFormatDesc* desc,
                                   cudaExtent extent, unsigned int levels, unsigned int flags) {
  if (array == nullptr || desc == nullptr) return cudaErrorInvalidValue;
  CUDA_ARRAY3D_DESCRIPTOR converted{};
  const cudaError_t status =
      driver_descriptor(*desc, extent.width, extent.height, extent.depth, flags, &converted);
  if (status != cudaSuccess) return status;
  return with_context([&] {
    CUmipmappedArray handle = nullptr;
    const cudaError_t result = call_driver<&DriverTable::cuMipmappedArrayCreate>(&handle, &converted, levels);
    if (result == cudaSuccess) *array = reinterpret_cast<cudaMipmappedArray_t>(handle);
    return result;
  });
}

// The frees document cudaErrorInvalidValue for a handle that is no (live) array.
cudaError_t invalid_value_for_bad_handle(cudaError_t result) {
  return result == cudaErrorInvalidResourceHandle ? cudaErrorInvalidValue : result;
}

cudaError_t free_array(cudaArray_t array) {
  if (array == nullptr) return cudaSuccess;  // documented: no operation
  return with_context([&] {
    return invalid_value_for_bad_handle(
        call_driver<&DriverTable::cuArrayDestroy>(reinterpret_cast<CUarray>(array)));
  });
}

cudaError_t free_mipmapped_array(cudaMipmappedArray_t array) {
  if (array == nullptr) return cudaSuccess;
  return with_context([&] {
    return invalid_value_for_bad_handle(
        call_driver<&DriverTable::cuMipmappedArrayDestroy>(reinterpret_cast<CUmipmappedArray>(array)));
  });
}

// cudaArrayGetInfo: any of the outputs may be NULL; a handle that is no live array is
// cudaErrorInvalidValue (the only error documented).
cudaError_t array_info(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned* flags, cudaArray_const_t array) {
  return with_context([&] {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    const cudaError_t status = call_driver<&DriverTable::cuArray3DGetDescriptor>(
        &d, reinterpret_cast<CUarray>(const_cast<cudaArray_t>(array)));
    if (status != cudaSuccess) return invalid_value_for_bad_handle(status);
    if (desc != nullptr) *desc = channel_desc(d.Format, d.NumChannels);
    if (extent != nullptr) *extent = cudaExtent{d.Width, d.Height, d.Depth};
    if (flags != nullptr) *flags = d.Flags;
    return cudaSuccess;
  });
}

// The driver's requirements of a deferred-mapping array (cudaArrayDeferredMapping), as it answers them.
template <auto Entry, typename Handle>
cudaError_t memory_requirements(cudaArrayMemoryRequirements* out, Handle array, int device) {
  if (out == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUdevice handle = 0;
    if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
    CUDA_ARRAY_MEMORY_REQUIREMENTS driver{};
    if (cudaError_t status = call_driver<Entry>(&driver, array, handle); status != cudaSuccess) return status;
    *out = cudaArrayMemoryRequirements{};
    out->size = driver.size;
    out->alignment = driver.alignment;
    return cudaSuccess;
  });
}

// The driver answers every array: none is sparse.
template <auto Entry, typename Handle>
cudaError_t sparse_properties(cudaArraySparseProperties* out, Handle array) {
  return with_context([&] {
    CUDA_ARRAY_SPARSE_PROPERTIES driver{};
    if (cudaError_t status = call_driver<Entry>(&driver, array); status != cudaSuccess) return status;
    if (out == nullptr) return cudaErrorInvalidValue;
    *out = cudaArraySparseProperties{};
    out->tileExtent.width = driver.tileExtent.width;
    out->tileExtent.height = driver.tileExtent.height;
    out->tileExtent.depth = driver.tileExtent.depth;
    out->miptailFirstLevel = driver.miptailFirstLevel;
    out->miptailSize = driver.miptailSize;
    out->flags = driver.flags;
    return cudaSuccess;
  });
}

// The element limit of a 1D linear texture of this channel format: a format the runtime can express
// for the driver, else cudaErrorInvalidValue.
cudaError_t texture_1d_linear_max_width(size_t* width, const cudaChannelFormatDesc* desc, int device) {
  if (width == nullptr || desc == nullptr) return cudaErrorInvalidValue;
  CUdevice handle = 0;
  if (cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  CUDA_ARRAY3D_DESCRIPTOR converted{};
  if (driver_descriptor(*desc, 1, 0, 0, 0, &converted) != cudaSuccess) return cudaErrorInvalidValue;
  return call_driver<&DriverTable::cuDeviceGetTexture1DLinearMaxWidth>(width, converted.Format,
                                                                        converted.NumChannels, handle);
}

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

// The descriptor cudaCreateChannelDesc<T>() builds: the bit widths and kind as given (no check, as
// NVIDIA's runtime does none).
cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}

cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width, size_t height,
                            unsigned int flags) {
  return api_call([&] { return malloc_array(array, desc, width, height, 0, flags); });
}
cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                              unsigned int flags) {
  return api_call([&] { return malloc_array(array, desc, extent.width, extent.height, extent.depth, flags); });
}
cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* mipmappedArray, const cudaChannelFormatDesc* desc,
                                     cudaExtent extent, unsigned int numLevels, unsigned int flags) {
  return api_call([&] { return malloc_mipmapped_array(mipmappedArray, desc, extent, numLevels, flags); });
}
cudaError_t cudaFreeArray(cudaArray_t array) { return api_call([&] { return free_array(array); }); }
cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray) {
  return api_call([&] { return free_mipmapped_array(mipmappedArray); });
}

cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc* desc, struct cudaExtent* extent, unsigned int* flags,
                             cudaArray_t array) {
  return api_call([&] { return array_info(desc, extent, flags, array); });
}
cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  return api_call([&] { return desc == nullptr ? cudaErrorInvalidValue : array_info(desc, nullptr, nullptr, array); });
}
cudaError_t cudaArrayGetMemoryRequirements(struct cudaArrayMemoryRequirements* memoryRequirements, cudaArray_t array,
                                           int device) {
  return api_call([&] {
    return memory_requirements<&DriverTable::cuArrayGetMemoryRequirements>(
        memoryRequirements, reinterpret_cast<CUarray>(array), device);
  });
}
cudaError_t cudaMipmappedArrayGetMemoryRequirements(struct cudaArrayMemoryRequirements* memoryRequirements,
                                                    cudaMipmappedArray_t mipmap, int device) {
  return api_call([&] {
    return memory_requirements<&DriverTable::cuMipmappedArrayGetMemoryRequirements>(
        memoryRequirements, reinterpret_cast<CUmipmappedArray>(mipmap), device);
  });
}

cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* levelArray, cudaMipmappedArray_const_t mipmappedArray,
                                       unsigned int level) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuMipmappedArrayGetLevel>(
          reinterpret_cast<CUarray*>(levelArray),
          reinterpret_cast<CUmipmappedArray>(const_cast<cudaMipmappedArray_t>(mipmappedArray)), level);
    });
  });
}

}  // extern "C"

extern "C" {

cudaError_t cudaDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements, const struct cudaChannelFormatDesc* fmtDesc,
                                                 int device) {
  return api_call([&] { return texture_1d_linear_max_width(maxWidthInElements, fmtDesc, device); });
}
// Only multi-planar arrays have planes; the driver makes none (cudaErrorInvalidValue for every
// live array).
cudaError_t cudaArrayGetPlane(cudaArray_t* pPlaneArray, cudaArray_t hArray, unsigned int planeIdx) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuArrayGetPlane>(reinterpret_cast<CUarray*>(pPlaneArray),
                                                        reinterpret_cast<CUarray>(hArray), planeIdx);
    });
  });
}
cudaError_t cudaArrayGetSparseProperties(struct cudaArraySparseProperties* sparseProperties, cudaArray_t array) {
  return api_call([&] {
    return sparse_properties<&DriverTable::cuArrayGetSparseProperties>(sparseProperties,
                                                                       reinterpret_cast<CUarray>(array));
  });
}
cudaError_t cudaMipmappedArrayGetSparseProperties(struct cudaArraySparseProperties* sparseProperties,
                                                  cudaMipmappedArray_t mipmap) {
  return api_call([&] {
    return sparse_properties<&DriverTable::cuMipmappedArrayGetSparseProperties>(
        sparseProperties, reinterpret_cast<CUmipmappedArray>(mipmap));
  });
}

}  // extern "C"
