// Texture and surface objects: cudaCreateTextureObject, cudaCreateSurfaceObject, their destroys and
// queries, over the driver's cuTexObject* / cuSurfObject* (the handles are the driver's). The
// runtime's descriptors become the driver's and back: channel descriptions as arrays translate them
// (channel_formats.h), readMode cudaReadModeElementType as CU_TRSF_READ_AS_INTEGER and the other
// switches of cudaTextureDesc as their CU_TRSF_* flags; resource types, address, filter and view
// formats have the same values in both. The rules and errors are the driver's.
#include "channel_formats.h"
#include "context.h"
#include "driver_table.h"
#include "error_state.h"

namespace cudasim::runtime {
namespace {

cudaError_t to_driver(const cudaResourceDesc& in, CUDA_RESOURCE_DESC* out) {
  *out = CUDA_RESOURCE_DESC{};
  out->resType = static_cast<CUresourcetype>(in.resType);
  out->flags = in.flags;
  switch (in.resType) {
    case cudaResourceTypeArray:
      out->res.array.hArray = reinterpret_cast<CUarray>(in.res.array.array);
      return cudaSuccess;
    case cudaResourceTypeMipmappedArray:
      out->res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(in.res.mipmap.mipmap);
      return cudaSuccess;
    case cudaResourceTypeLinear:
      out->res.linear.devPtr = reinterpret_cast<CUdeviceptr>(in.res.linear.devPtr);
      out->res.linear.sizeInBytes = in.res.linear.sizeInBytes;
      return driver_channel_format(in.res.linear.desc, &out->res.linear.format, &out->res.linear.numChannels);
    case cudaResourceTypePitch2D:
      out->res.pitch2D.devPtr = reinterpret_cast<CUdeviceptr>(in.res.pitch2D.devPtr);
      out->res.pitch2D.width = in.res.pitch2D.width;
      out->res.pitch2D.height = in.res.pitch2D.height;
      out->res.pitch2D.pitchInBytes = in.res.pitch2D.pitchInBytes;
      return driver_channel_format(in.res.pitch2D.desc, &out->res.pitch2D.format, &out->res.pitch2D.numChannels);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaResourceDesc from_driver(const CUDA_RESOURCE_DESC& in) {
  cudaResourceDesc out{};
  out.resType = static_cast<cudaResourceType>(in.resType);
  out.flags = in.flags;
  switch (in.resType) {
    case CU_RESOURCE_TYPE_ARRAY: out.res.array.array = reinterpret_cast<cudaArray_t>(in.res.array.hArray); break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      out.res.mipmap.mipmap = reinterpret_cast<cudaMipmappedArray_t>(in.res.mipmap.hMipmappedArray);
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      out.res.linear.devPtr = reinterpret_cast<void*>(in.res.linear.devPtr);
      out.res.linear.desc = channel_desc(in.res.linear.format, in.res.linear.numChannels);
      out.res.linear.sizeInBytes = in.res.linear.sizeInBytes;
      break;
    default:  // CU_RESOURCE_TYPE_PITCH2D, the only other type the driver stores
      out.res.pitch2D.devPtr = reinterpret_cast<void*>(in.res.pitch2D.devPtr);
      out.res.pitch2D.desc = channel_desc(in.res.pitch2D.format, in.res.pitch2D.numChannels);
      out.res.pitch2D.width = in.res.pitch2D.width;
      out.res.pitch2D.height = in.res.pitch2D.height;
      out.res.pitch2D.pitchInBytes = in.res.pitch2D.pitchInBytes;
      break;
  }
  return out;
}

// cudaTextureDesc's switches and the driver flags they are.
struct FlagSwitch {
  int cudaTextureDesc::*field;
  unsigned flag;
};
constexpr FlagSwitch kSwitches[] = {
    {&cudaTextureDesc::normalizedCoords, CU_TRSF_NORMALIZED_COORDINATES},
    {&cudaTextureDesc::sRGB, CU_TRSF_SRGB},
    {&cudaTextureDesc::disableTrilinearOptimization, CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION},
    {&cudaTextureDesc::seamlessCubemap, CU_TRSF_SEAMLESS_CUBEMAP},
};

cudaError_t to_driver(const cudaTextureDesc& in, CUDA_TEXTURE_DESC* out) {
  if (in.readMode != cudaReadModeElementType && in.readMode != cudaReadModeNormalizedFloat)
    return cudaErrorInvalidValue;
  *out = CUDA_TEXTURE_DESC{};
  for (int i = 0; i < 3; ++i) out->addressMode[i] = static_cast<CUaddress_mode>(in.addressMode[i]);
  out->filterMode = static_cast<CUfilter_mode>(in.filterMode);
  out->mipmapFilterMode = static_cast<CUfilter_mode>(in.mipmapFilterMode);
  out->flags = in.readMode == cudaReadModeElementType ? CU_TRSF_READ_AS_INTEGER : 0;
  for (const FlagSwitch& s : kSwitches) {
    if (in.*s.field != 0) out->flags |= s.flag;
  }
  out->maxAnisotropy = in.maxAnisotropy;
  out->mipmapLevelBias = in.mipmapLevelBias;
  out->minMipmapLevelClamp = in.minMipmapLevelClamp;
  out->maxMipmapLevelClamp = in.maxMipmapLevelClamp;
  for (int i = 0; i < 4; ++i) out->borderColor[i] = in.borderColor[i];
  return cudaSuccess;
}

cudaTextureDesc from_driver(const CUDA_TEXTURE_DESC& in) {
  cudaTextureDesc out{};
  for (int i = 0; i < 3; ++i) out.addressMode[i] = static_cast<cudaTextureAddressMode>(in.addressMode[i]);
  out.filterMode = static_cast<cudaTextureFilterMode>(in.filterMode);
  out.mipmapFilterMode = static_cast<cudaTextureFilterMode>(in.mipmapFilterMode);
  out.readMode = (in.flags & CU_TRSF_READ_AS_INTEGER) != 0 ? cudaReadModeElementType : cudaReadModeNormalizedFloat;
  for (const FlagSwitch& s : kSwitches) out.*s.field = (in.flags & s.flag) != 0 ? 1 : 0;
  out.maxAnisotropy = in.maxAnisotropy;
  out.mipmapLevelBias = in.mipmapLevelBias;
  out.minMipmapLevelClamp = in.minMipmapLevelClamp;
  out.maxMipmapLevelClamp = in.maxMipmapLevelClamp;
  for (int i = 0; i < 4; ++i) out.borderColor[i] = in.borderColor[i];
  return out;
}

// The view fields are the same in both; the formats share their values.
template <typename Out, typename In, typename Format>
Out copy_view(const In& in) {
  Out out{};
  out.format = static_cast<Format>(in.format);
  out.width = in.width;
  out.height = in.height;
  out.depth = in.depth;
  out.firstMipmapLevel = in.firstMipmapLevel;
  out.lastMipmapLevel = in.lastMipmapLevel;
  out.firstLayer = in.firstLayer;
  out.lastLayer = in.lastLayer;
  return out;
}

cudaError_t create_texture(cudaTextureObject_t* object, const cudaResourceDesc* resource,
                           const cudaTextureDesc* texture, const cudaResourceViewDesc* view) {
  if (object == nullptr || resource == nullptr || texture == nullptr) return cudaErrorInvalidValue;
  CUDA_RESOURCE_DESC driver_resource{};
  if (cudaError_t status = to_driver(*resource, &driver_resource); status != cudaSuccess) return status;
  CUDA_TEXTURE_DESC driver_texture{};
  if (cudaError_t status = to_driver(*texture, &driver_texture); status != cudaSuccess) return status;
  CUDA_RESOURCE_VIEW_DESC driver_view{};
  if (view != nullptr) driver_view = copy_view<CUDA_RESOURCE_VIEW_DESC, cudaResourceViewDesc, CUresourceViewFormat>(*view);
  return with_context([&] {
    CUtexObject handle = 0;
    const cudaError_t status = call_driver<&DriverTable::cuTexObjectCreate>(
        &handle, &driver_resource, &driver_texture, view != nullptr ? &driver_view : nullptr);
    if (status == cudaSuccess) *object = handle;
    return status;
  });
}

cudaError_t create_surface(cudaSurfaceObject_t* object, const cudaResourceDesc* resource) {
  if (object == nullptr || resource == nullptr) return cudaErrorInvalidValue;
  CUDA_RESOURCE_DESC driver_resource{};
  if (cudaError_t status = to_driver(*resource, &driver_resource); status != cudaSuccess) return status;
  return with_context([&] {
    CUsurfObject handle = 0;
    const cudaError_t status = call_driver<&DriverTable::cuSurfObjectCreate>(&handle, &driver_resource);
    if (status == cudaSuccess) *object = handle;
    return status;
  });
}

// Reads a descriptor through the driver entry point `Entry` and hands it out translated.
template <auto Entry, typename DriverDesc, typename Out, typename Translate>
cudaError_t read_desc(Out* out, unsigned long long object, Translate translate) {
  if (out == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    DriverDesc desc{};
    const cudaError_t status = call_driver<Entry>(&desc, object);
    if (status == cudaSuccess) *out = translate(desc);
    return status;
  });
}

cudaResourceDesc resource_from_driver(const CUDA_RESOURCE_DESC& in) { return from_driver(in); }
cudaTextureDesc texture_from_driver(const CUDA_TEXTURE_DESC& in) { return from_driver(in); }

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaCreateTextureObject(cudaTextureObject_t* pTexObject, const struct cudaResourceDesc* pResDesc,
                                    const struct cudaTextureDesc* pTexDesc,
                                    const struct cudaResourceViewDesc* pResViewDesc) {
  return api_call([&] { return create_texture(pTexObject, pResDesc, pTexDesc, pResViewDesc); });
}

cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuTexObjectDestroy>(texObject); }); });
}

cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc* pResDesc, cudaTextureObject_t texObject) {
  return api_call([&] {
    return read_desc<&DriverTable::cuTexObjectGetResourceDesc, CUDA_RESOURCE_DESC>(pResDesc, texObject,
                                                                                   resource_from_driver);
  });
}

cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc* pTexDesc, cudaTextureObject_t texObject) {
  return api_call([&] {
    return read_desc<&DriverTable::cuTexObjectGetTextureDesc, CUDA_TEXTURE_DESC>(pTexDesc, texObject,
                                                                                 texture_from_driver);
  });
}

cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc* pResViewDesc,
                                                 cudaTextureObject_t texObject) {
  return api_call([&] {
    return read_desc<&DriverTable::cuTexObjectGetResourceViewDesc, CUDA_RESOURCE_VIEW_DESC>(
        pResViewDesc, texObject,
        copy_view<cudaResourceViewDesc, CUDA_RESOURCE_VIEW_DESC, cudaResourceViewFormat>);
  });
}

cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* pSurfObject, const struct cudaResourceDesc* pResDesc) {
  return api_call([&] { return create_surface(pSurfObject, pResDesc); });
}

cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuSurfObjectDestroy>(surfObject); }); });
}

cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc* pResDesc, cudaSurfaceObject_t surfObject) {
  return api_call([&] {
    return read_desc<&DriverTable::cuSurfObjectGetResourceDesc, CUDA_RESOURCE_DESC>(pResDesc, surfObject,
                                                                                    resource_from_driver);
  });
}

}  // extern "C"
