// Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate, their destroys and queries).
//
// Bookkeeping: no kernel samples a texture here, so an object is the descriptors it was created
// with, checked as the driver API reference documents, stored and answered back unchanged. A handle
// is a number from one counter shared by both kinds (never 0, never handed out twice), so a
// destroyed object, or a surface handle given where a texture is expected, is no live object:
// CUDA_ERROR_INVALID_VALUE, the one error the reference lists for it. Objects belong to the
// context current at creation and go with it.
#include "array_queries.h"
#include "contexts.h"
#include "device_limits.h"
#include "state.h"
#include "texture_objects.h"

#include <map>
#include <optional>

namespace cudasim {

struct TextureObject {
  CUctx_st* ctx = nullptr;
  CUDA_RESOURCE_DESC resource{};
  CUDA_TEXTURE_DESC texture{};
  std::optional<CUDA_RESOURCE_VIEW_DESC> view;
};

struct SurfaceObject {
  CUctx_st* ctx = nullptr;
  CUDA_RESOURCE_DESC resource{};
};

struct TextureObjects {
  unsigned long long last_handle = 0;
  std::map<unsigned long long, TextureObject> textures;
  std::map<unsigned long long, SurfaceObject> surfaces;
};

}  // namespace cudasim

using namespace cudasim;

namespace {

constexpr unsigned kKnownTextureFlags = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
                                        CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;

TextureObjects& objects(State& st) {
  if (st.texture_objects == nullptr) st.texture_objects = std::make_shared<TextureObjects>();
  return *st.texture_objects;
}

// What a texture's resource is, once checked: the array's shape for the array kinds.
struct ResourceShape {
  bool is_array = false;     // an array or a mipmapped array
  CUDA_ARRAY3D_DESCRIPTOR array{};
  unsigned levels = 1;
};

// The element size of a linear or pitched resource's format and channel count (1, 2 or 4).
CUresult element_bytes(CUarray_format format, unsigned channels, std::size_t* out) {
  const std::optional<unsigned> bytes = format_channel_bytes(format);
  if (!bytes || (channels != 1 && channels != 2 && channels != 4)) return CUDA_ERROR_INVALID_VALUE;
  if (*bytes == 0) return CUDA_ERROR_NOT_SUPPORTED;  // listed in cuda.h, no layout simulated (as arrays)
  *out = std::size_t{*bytes} * channels;
  return CUDA_SUCCESS;
}

// Whether [ptr, ptr + bytes) is device memory the context's device can read (its own, or managed).
bool device_memory_of(State& st, CUctx_st* ctx, CUdeviceptr ptr, std::size_t bytes) {
  const Allocation* alloc = find_allocation(st, static_cast<std::uintptr_t>(ptr), bytes);
  return alloc != nullptr && (alloc->kind == AllocKind::Managed || alloc->device == ctx->device);
}

// Checks a resource descriptor as cuTexObjectCreate documents it.
CUresult check_resource(State& st, CUctx_st* ctx, const CUDA_RESOURCE_DESC& r, ResourceShape* shape) {
  if (r.flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "must be set to zero"
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      shape->is_array = true;
      return live_array_descriptor(st, r.res.array.hArray, &shape->array) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      shape->is_array = true;
      return live_mipmapped_array_descriptor(st, r.res.mipmap.hMipmappedArray, &shape->array, &shape->levels)
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_LINEAR: {
      const auto& linear = r.res.linear;
      std::size_t element = 0;
      if (CUresult rc = element_bytes(linear.format, linear.numChannels, &element); rc != CUDA_SUCCESS) return rc;
      if (linear.devPtr % kTextureAlignment != 0 || linear.sizeInBytes == 0 ||
          linear.sizeInBytes / element > static_cast<std::size_t>(kMaxTexture1DLinearWidth))
        return CUDA_ERROR_INVALID_VALUE;
      return device_memory_of(st, ctx, linear.devPtr, linear.sizeInBytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& pitched = r.res.pitch2D;
      std::size_t element = 0;
      if (CUresult rc = element_bytes(pitched.format, pitched.numChannels, &element); rc != CUDA_SUCCESS) return rc;
      if (pitched.devPtr % kTextureAlignment != 0 || pitched.width == 0 || pitched.height == 0 ||
          pitched.width > static_cast<std::size_t>(kMaxTexture2DLinearWidth) ||
          pitched.height > static_cast<std::size_t>(kMaxTexture2DLinearHeight) ||
          pitched.pitchInBytes % kTexturePitchAlignment != 0 ||
          pitched.pitchInBytes > static_cast<std::size_t>(kMaxTexture2DLinearPitch) ||
          pitched.pitchInBytes < pitched.width * element)
        return CUDA_ERROR_INVALID_VALUE;
      // The extents are bounded above, so this cannot overflow.
      const std::size_t bytes = pitched.pitchInBytes * (pitched.height - 1) + pitched.width * element;
      return device_memory_of(st, ctx, pitched.devPtr, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

bool known_address_mode(CUaddress_mode mode) { return static_cast<unsigned>(mode) <= CU_TR_ADDRESS_MODE_BORDER; }
bool known_filter_mode(CUfilter_mode mode) { return static_cast<unsigned>(mode) <= CU_TR_FILTER_MODE_LINEAR; }

// Checks a texture descriptor against its resource: known modes and flags (address and filter
// modes are ignored for linear memory, as documented), normalised coordinates for a mipmapped array,
// seamless cubemap filtering only over a cubemap array.
CUresult check_texture(const CUDA_TEXTURE_DESC& t, const CUDA_RESOURCE_DESC& r, const ResourceShape& shape) {
  if ((t.flags & ~kKnownTextureFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (r.resType != CU_RESOURCE_TYPE_LINEAR) {
    for (CUaddress_mode mode : t.addressMode) {
      if (!known_address_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
    }
    if (!known_filter_mode(t.filterMode)) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!known_filter_mode(t.mipmapFilterMode)) return CUDA_ERROR_INVALID_VALUE;
  if (r.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY && (t.flags & CU_TRSF_NORMALIZED_COORDINATES) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if ((t.flags & CU_TRSF_SEAMLESS_CUBEMAP) != 0 &&
      (!shape.is_array || (shape.array.Flags & CUDA_ARRAY3D_CUBEMAP) == 0))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// Block-compressed view formats: 0 for none, else the channel count of the UNSIGNED_INT32 array
// they view (2 for BC1 and BC4, 4 for the others).
unsigned block_compressed_channels(CUresourceViewFormat format) {
  switch (format) {
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC1:
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC4:
    case CU_RES_VIEW_FORMAT_SIGNED_BC4: return 2;
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC2:
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC3:
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC5:
    case CU_RES_VIEW_FORMAT_SIGNED_BC5:
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC6H:
    case CU_RES_VIEW_FORMAT_SIGNED_BC6H:
    case CU_RES_VIEW_FORMAT_UNSIGNED_BC7: return 4;
    default: return 0;
  }
}

// Checks a resource view against its (array) resource, as documented: a known format; the
// resource's extents (4x its width and height for a block-compressed view of an UNSIGNED_INT32 array
// of 2 or 4 channels); mipmap levels within a mipmapped array's, else 0; layers within a layered
// array's, else 0.
CUresult check_view(const CUDA_RESOURCE_VIEW_DESC& v, const ResourceShape& shape) {
  if (!shape.is_array) return CUDA_ERROR_INVALID_VALUE;  // only over arrays and mipmapped arrays
  if (static_cast<unsigned>(v.format) > CU_RES_VIEW_FORMAT_UNSIGNED_BC7) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY3D_DESCRIPTOR& a = shape.array;
  std::size_t scale = 1;
  if (const unsigned channels = block_compressed_channels(v.format); channels != 0) {
    if (a.Format != CU_AD_FORMAT_UNSIGNED_INT32 || a.NumChannels != channels) return CUDA_ERROR_INVALID_VALUE;
    scale = 4;
  }
  if (v.width != a.Width * scale || v.height != a.Height * scale || v.depth != a.Depth) return CUDA_ERROR_INVALID_VALUE;
  if (v.firstMipmapLevel > v.lastMipmapLevel || v.lastMipmapLevel >= shape.levels) return CUDA_ERROR_INVALID_VALUE;
  const bool layered = (a.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  const std::size_t layers = !layered ? 1 : (a.Flags & CUDA_ARRAY3D_CUBEMAP) != 0 ? a.Depth / 6 : a.Depth;
  if (v.firstLayer > v.lastLayer || v.lastLayer >= layers) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// Locks the state, checks cuInit and the current context, and returns body(state, context).
template <typename Body>
CUresult in_context(Body body) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  return body(l.st, ctx);
}

// The live object `handle` names in `live`, or null.
template <typename Object>
Object* find_object(std::map<unsigned long long, Object>& live, unsigned long long handle) {
  auto it = live.find(handle);
  return it == live.end() ? nullptr : &it->second;
}

// Stores a new object under the next handle and returns the handle.
template <typename Object>
unsigned long long add_object(TextureObjects& live, std::map<unsigned long long, Object> TextureObjects::*kind,
                              const Object& object) {
  (live.*kind).emplace(++live.last_handle, object);
  return live.last_handle;
}

template <typename Object>
CUresult destroy_object(std::map<unsigned long long, Object> TextureObjects::*live, unsigned long long handle) {
  return in_context([&](State& st, CUctx_st*) {
    return (objects(st).*live).erase(handle) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

// Copies one descriptor of a live object into `out` (non-null).
template <typename Object, typename Out, typename Read>
CUresult read_object(std::map<unsigned long long, Object> TextureObjects::*live, unsigned long long handle,
                     Out* out, Read read) {
  return in_context([&](State& st, CUctx_st*) {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Object* object = find_object(objects(st).*live, handle);
    if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return read(*object, out);
  });
}

template <typename Object>
CUresult copy_resource(const Object& object, CUDA_RESOURCE_DESC* out) {
  *out = object.resource;
  return CUDA_SUCCESS;
}

}  // namespace

namespace cudasim {

void free_context_texture_objects(State& st, CUctx_st* ctx) {
  if (st.texture_objects == nullptr) return;
  std::erase_if(st.texture_objects->textures, [ctx](const auto& entry) { return entry.second.ctx == ctx; });
  std::erase_if(st.texture_objects->surfaces, [ctx](const auto& entry) { return entry.second.ctx == ctx; });
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuTexObjectCreate(CUtexObject* pTexObject, const CUDA_RESOURCE_DESC* pResDesc,
                                          const CUDA_TEXTURE_DESC* pTexDesc,
                                          const CUDA_RESOURCE_VIEW_DESC* pResViewDesc) {
  return in_context([&](State& st, CUctx_st* ctx) {
    if (pTexObject == nullptr || pResDesc == nullptr || pTexDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ResourceShape shape;
    if (CUresult rc = check_resource(st, ctx, *pResDesc, &shape); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_texture(*pTexDesc, *pResDesc, shape); rc != CUDA_SUCCESS) return rc;
    if (pResViewDesc != nullptr) {
      if (CUresult rc = check_view(*pResViewDesc, shape); rc != CUDA_SUCCESS) return rc;
    }
    TextureObject object;
    object.ctx = ctx;
    object.resource = *pResDesc;
    object.texture = *pTexDesc;
    if (pResViewDesc != nullptr) object.view = *pResViewDesc;
    *pTexObject = add_object(objects(st), &TextureObjects::textures, object);
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexObjectDestroy(CUtexObject texObject) {
  return destroy_object(&TextureObjects::textures, texObject);
}

CUDASIM_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUtexObject texObject) {
  return read_object(&TextureObjects::textures, texObject, pResDesc, copy_resource<TextureObject>);
}

CUDASIM_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* pTexDesc, CUtexObject texObject) {
  return read_object(&TextureObjects::textures, texObject, pTexDesc, [](const TextureObject& o, CUDA_TEXTURE_DESC* out) {
    *out = o.texture;
    return CUDA_SUCCESS;
  });
}

// Documented: an object created without a resource view has none to return (CUDA_ERROR_INVALID_VALUE).
CUDASIM_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* pResViewDesc, CUtexObject texObject) {
  return read_object(&TextureObjects::textures, texObject, pResViewDesc,
                     [](const TextureObject& o, CUDA_RESOURCE_VIEW_DESC* out) {
                       if (!o.view) return CUDA_ERROR_INVALID_VALUE;
                       *out = *o.view;
                       return CUDA_SUCCESS;
                     });
}

// A surface: a live CUDA array created with CUDA_ARRAY3D_SURFACE_LDST, flags 0.
CUDASIM_EXPORT CUresult cuSurfObjectCreate(CUsurfObject* pSurfObject, const CUDA_RESOURCE_DESC* pResDesc) {
  return in_context([&](State& st, CUctx_st* ctx) {
    if (pSurfObject == nullptr || pResDesc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (pResDesc->resType != CU_RESOURCE_TYPE_ARRAY || pResDesc->flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR array{};
    if (!live_array_descriptor(st, pResDesc->res.array.hArray, &array) ||
        (array.Flags & CUDA_ARRAY3D_SURFACE_LDST) == 0)
      return CUDA_ERROR_INVALID_VALUE;
    *pSurfObject = add_object(objects(st), &TextureObjects::surfaces, SurfaceObject{ctx, *pResDesc});
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject surfObject) {
  return destroy_object(&TextureObjects::surfaces, surfObject);
}

CUDASIM_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* pResDesc, CUsurfObject surfObject) {
  return read_object(&TextureObjects::surfaces, surfObject, pResDesc, copy_resource<SurfaceObject>);
}
