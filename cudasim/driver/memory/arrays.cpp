// CUDA arrays and mipmapped arrays (cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate, ...).
//
// An array is opaque device memory: it has no device address, so it is never in
// State::allocations. A plain array's level 0 is kept in host memory of its own (rows without
// padding, mapped MAP_NORESERVE so it costs no RAM until copied to), which the array copies
// (copies_3d.cpp) read and write; a mipmapped array's levels become such arrays when
// cuMipmappedArrayGetLevel first asks for them (owned by the mipmapped array, charged with it).
// What an array is charged is a size, like cuMemAlloc memory:
//
//   level bytes = round_up(Width x element size, 512) x max(Height, 1) x max(Depth, 1)
//   array bytes = round_up(sum of its levels' bytes, 2 MiB)
//
// (element size = format bytes x NumChannels; a plain array has one level; a mipmapped array's
// level l halves Width, Height and, for 3D arrays, Depth, each at least 1; layers and cubemap faces
// are not halved). cuArrayGetMemoryRequirements reports exactly that size and a 2 MiB alignment.
// An array created with CUDA_ARRAY3D_DEFERRED_MAPPING holds no memory until cuMemMapArrayAsync
// backs it with `size` bytes of a cuMemCreate allocation (a view of them, vmm.cpp, which its copies
// then read and write; a mipmapped array's levels lie one after the other in it, each at its
// padded size); only such arrays answer the memory-requirement queries, as cuda.h documents. No
// array is sparse (CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED reads 0, creation refuses
// CUDA_ARRAY3D_SPARSE) or multi-planar (NV12 and the other YUV formats are refused), so the
// sparse-property and plane queries answer the documented error for every array.
//
// Array objects are deleted when destroyed; every entry point looks the handle up in the live set
// (under State::mu) before touching it, so a stale handle is CUDA_ERROR_INVALID_HANDLE.
#include "array_queries.h"
#include "contexts.h"
#include "device_limits.h"
#include "state.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

using namespace cudasim;

namespace {

constexpr std::uint64_t kArrayRowAlignment = 512;   // rows padded as cuMemAllocPitch pads them
constexpr std::uint64_t kArrayAlignment = kLargePage;  // arrays are charged in 2 MiB units

constexpr unsigned kKnownArrayFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                                      CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_DEPTH_TEXTURE |
                                      CUDA_ARRAY3D_COLOR_ATTACHMENT | CUDA_ARRAY3D_SPARSE |
                                      CUDA_ARRAY3D_DEFERRED_MAPPING | CUDA_ARRAY3D_VIDEO_ENCODE_DECODE;

// Bytes per channel of a simulated format; 0 for a format cuda.h lists that is not simulated
// (packed normalised, block-compressed, YUV), nullopt for a value that is no CUarray_format.
std::optional<unsigned> channel_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    case CU_AD_FORMAT_NV12:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X4:
    case CU_AD_FORMAT_BC1_UNORM:
    case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC2_UNORM:
    case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
    case CU_AD_FORMAT_BC5_UNORM:
    case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16:
    case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
    case CU_AD_FORMAT_P010:
    case CU_AD_FORMAT_P016:
    case CU_AD_FORMAT_NV16:
    case CU_AD_FORMAT_P210:
    case CU_AD_FORMAT_P216:
    case CU_AD_FORMAT_YUY2:
    case CU_AD_FORMAT_Y210:
    case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_AYUV:
    case CU_AD_FORMAT_Y410:
    case CU_AD_FORMAT_Y416:
    case CU_AD_FORMAT_Y444_PLANAR8:
    case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar:
    case CU_AD_FORMAT_UNORM_INT_101010_2: return 0;
    default: return std::nullopt;
  }
}

// Checks a descriptor against cuArray3DCreate's rules (the shapes of its table, NumChannels 1, 2
// or 4, known flags). The per-device extent maxima are not checked (those attributes read 0 here).
CUresult check_descriptor(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  auto bytes = channel_bytes(d.Format);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return CUDA_ERROR_INVALID_VALUE;
  if (d.Width == 0 || (d.Flags & ~kKnownArrayFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const bool layered = (d.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  const bool cubemap = (d.Flags & CUDA_ARRAY3D_CUBEMAP) != 0;
  if (cubemap) {
    // Width == Height, Depth six faces (a multiple of six when layered).
    if (d.Height == 0 || d.Width != d.Height || d.Depth == 0) return CUDA_ERROR_INVALID_VALUE;
    if (layered ? d.Depth % 6 != 0 : d.Depth != 6) return CUDA_ERROR_INVALID_VALUE;
  } else if (layered) {
    if (d.Depth == 0) return CUDA_ERROR_INVALID_VALUE;  // Depth is the number of layers
  } else if (d.Height == 0 && d.Depth != 0) {
    return CUDA_ERROR_INVALID_VALUE;  // 1D, 2D or 3D only
  }
  // Texture gather only on 2D arrays.
  if ((d.Flags & CUDA_ARRAY3D_TEXTURE_GATHER) != 0 && (d.Height == 0 || d.Depth != 0 || layered || cubemap))
    return CUDA_ERROR_INVALID_VALUE;
  // Formats cuda.h lists that the simulator has no layout for, and sparse arrays (the simulated
  // device reports CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED = 0).
  if (*bytes == 0 || (d.Flags & CUDA_ARRAY3D_SPARSE) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

// Bytes one level of these extents takes (rows padded); nullopt on overflow.
std::optional<std::uint64_t> level_bytes(std::uint64_t width, std::uint64_t height, std::uint64_t depth,
                                         std::uint64_t element) {
  std::uint64_t row = 0, rows = 0, bytes = 0;
  if (__builtin_mul_overflow(width, element, &row) || row > UINT64_MAX - kArrayRowAlignment) return std::nullopt;
  row = round_up(row, kArrayRowAlignment);
  if (__builtin_mul_overflow(std::max<std::uint64_t>(height, 1), std::max<std::uint64_t>(depth, 1), &rows) ||
      __builtin_mul_overflow(row, rows, &bytes))
    return std::nullopt;
  return bytes;
}

// 1 + floor(log2(max(Width, Height, Depth))): the most levels a mipmapped array can have.
unsigned max_levels(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  std::uint64_t largest = std::max({d.Width, d.Height, d.Depth});
  unsigned levels = 0;
  for (; largest != 0; largest >>= 1) ++levels;
  return levels;
}

// The extents of level `level` of a mipmapped array: Width, Height and a 3D array's Depth halved
// `level` times (at least 1); layers and cubemap faces keep their count.
CUDA_ARRAY3D_DESCRIPTOR level_descriptor(CUDA_ARRAY3D_DESCRIPTOR d, unsigned level) {
  auto halve = [level](std::size_t extent) { return extent == 0 ? 0 : std::max<std::size_t>(extent >> level, 1); };
  const bool depth_is_count = (d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  d.Width = halve(d.Width);
  d.Height = halve(d.Height);
  if (!depth_is_count) d.Depth = halve(d.Depth);
  return d;
}

// The device memory an array of `levels` levels takes; nullopt when it cannot be represented.
std::optional<std::uint64_t> array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  const std::uint64_t element = std::uint64_t{*channel_bytes(d.Format)} * d.NumChannels;
  std::uint64_t total = 0;
  for (unsigned level = 0; level < levels; ++level) {
    const CUDA_ARRAY3D_DESCRIPTOR extents = level_descriptor(d, level);
    auto bytes = level_bytes(extents.Width, extents.Height, extents.Depth, element);
    if (!bytes || __builtin_add_overflow(total, *bytes, &total)) return std::nullopt;
  }
  if (total > UINT64_MAX - kArrayAlignment) return std::nullopt;
  return round_up(total, kArrayAlignment);
}

// Where level `level` starts in a mipmapped array's memory: after the levels before it (which
// array_bytes bounded when the array was created).
std::uint64_t level_offset(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned level) {
  const std::uint64_t element = std::uint64_t{*channel_bytes(d.Format)} * d.NumChannels;
  std::uint64_t offset = 0;
  for (unsigned l = 0; l < level; ++l) {
    const CUDA_ARRAY3D_DESCRIPTOR extents = level_descriptor(d, l);
    offset += *level_bytes(extents.Width, extents.Height, extents.Depth, element);
  }
  return offset;
}

}  // namespace

namespace cudasim {
// Invariant: while in State::arrays / State::mipmapped_arrays, `bytes` is charged to `device`
// (committed, bytes_reserved, array_bytes) unless `deferred`, and `ctx` is alive.
struct ArrayObject {
  CUctx_st* ctx = nullptr;
  int device = 0;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  unsigned levels = 1;
  std::uint64_t bytes = 0;
  bool deferred = false;  // CUDA_ARRAY3D_DEFERRED_MAPPING: no memory of its own
  // A plain array's level-0 bytes. A deferred-mapping array's are null while it is unmapped and
  // its view of the allocation while mapped (a mipmapped array's whole view, a level its part of
  // it); a mipmapped array without the flag has none. Queued copies share them, so neither
  // destroying nor unmapping the array frees bytes a copy still uses.
  std::shared_ptr<unsigned char> storage;
  // A level of a mipmapped array (cuMipmappedArrayGetLevel): charged and destroyed with it.
  ArrayObject* owner = nullptr;
  // A mipmapped array's levels handed out so far (null where none was asked for yet).
  std::vector<CUarray_st*> level_arrays;
};
}  // namespace cudasim
struct CUarray_st : cudasim::ArrayObject {};
struct CUmipmappedArray_st : cudasim::ArrayObject {};

namespace {

// Level `level`'s part of a mapped mipmapped array's view (sharing its ownership).
std::shared_ptr<unsigned char> level_view(const std::shared_ptr<unsigned char>& view,
                                          const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned level) {
  return std::shared_ptr<unsigned char>(view, view.get() + level_offset(d, level));
}

// Level 0 of an array as its copies see it: rows of Width elements, unpadded.
ArrayLayout layout_of(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  ArrayLayout layout;
  layout.element = *channel_bytes(d.Format) * d.NumChannels;
  layout.row_bytes = d.Width * layout.element;
  layout.rows = std::max<std::size_t>(d.Height, 1);
  layout.slices = std::max<std::size_t>(d.Depth, 1);
  return layout;
}

// Zeroed host memory for an array's bytes (no RAM until touched); null when none can be mapped.
std::shared_ptr<unsigned char> map_storage(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return std::shared_ptr<unsigned char>(static_cast<unsigned char*>(p), [bytes](unsigned char* q) { munmap(q, bytes); });
}

// Creates an array of `levels` levels in the current context and charges its memory.
template <typename Handle>
CUresult create_array(Handle** out, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels,
                      std::unordered_set<Handle*> State::*live) {
  Locked l;
  State& st = l.st;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_descriptor(*desc); rc != CUDA_SUCCESS) return rc;
  levels = std::clamp(levels, 1u, max_levels(*desc));
  auto bytes = array_bytes(*desc, levels);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;  // beyond any extent a device supports
  const bool deferred = (desc->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) != 0;
  std::shared_ptr<unsigned char> storage;
  if (!deferred && std::is_same_v<Handle, CUarray_st>) {
    // Its level 0 never exceeds what it is charged, which array_bytes bounded.
    const ArrayLayout layout = layout_of(*desc);
    storage = map_storage(layout.row_bytes * layout.rows * layout.slices);
    if (storage == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Device& dev = st.device(ctx->device);
  if (!deferred) {
    owe_latency(st.config.alloc_latency_us);  // as every cuMemAlloc
    if (!take_device_memory(st, dev, *bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    dev.stats.array_bytes += *bytes;
    dev.stats.array_peak_bytes = std::max(dev.stats.array_peak_bytes, dev.stats.array_bytes);
  }
  dev.stats.array_creates++;
  auto* array = new Handle();
  array->ctx = ctx;
  array->device = ctx->device;
  array->desc = *desc;
  array->levels = levels;
  array->bytes = *bytes;
  array->deferred = deferred;
  array->storage = std::move(storage);
  (st.*live).insert(array);
  *out = array;
  return CUDA_SUCCESS;
}

// Gives an array's memory back to its device and deletes it (it must be in its live set), with the
// level arrays handed out for it.
template <typename Handle>
void release_array(State& st, Handle* array, std::unordered_set<Handle*> State::*live) {
  for (CUarray_st* level : array->level_arrays) {
    if (level == nullptr) continue;
    st.arrays.erase(level);
    delete level;
  }
  if (!array->deferred && array->owner == nullptr) {
    Device& dev = st.device(array->device);
    give_device_memory(dev, array->bytes);
    dev.stats.array_bytes -= array->bytes;
    owe_latency(st.config.free_latency_us);  // as every cuMemFree
  }
  const bool deferred = array->deferred;
  (st.*live).erase(array);
  delete array;
  // Memory it showed (mapped still, or unmapped while work held it) is free unless work holds it.
  if (deferred) vmm_sweep_array_views(st);
}

template <typename Handle>
CUresult destroy_array(Handle* array, std::unordered_set<Handle*> State::*live) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if ((l.st.*live).count(array) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (array->owner != nullptr) return CUDA_ERROR_INVALID_VALUE;  // a level goes with its mipmapped array
  l.st.device(array->device).stats.array_destroys++;
  release_array(l.st, array, live);
  return CUDA_SUCCESS;
}

// cuArrayGetMemoryRequirements / cuMipmappedArrayGetMemoryRequirements: only for arrays created
// with CUDA_ARRAY3D_DEFERRED_MAPPING; every failure is CUDA_ERROR_INVALID_VALUE, as documented.
template <typename Handle>
CUresult memory_requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements, Handle* array, CUdevice device,
                             std::unordered_set<Handle*> State::*live) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (requirements == nullptr || (l.st.*live).count(array) == 0 || !array->deferred ||
      !valid_device(l.st, device))
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(requirements, 0, sizeof *requirements);
  requirements->size = array->bytes;
  requirements->alignment = kArrayAlignment;
  return CUDA_SUCCESS;
}

CUresult get_descriptor(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray array) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (l.st.arrays.count(array) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *out = array->desc;
  return CUDA_SUCCESS;
}

}  // namespace

namespace cudasim {

bool array_layout(State& st, CUarray array, ArrayLayout* out) {
  if (st.arrays.count(array) == 0 || array->storage == nullptr) return false;
  *out = layout_of(array->desc);
  out->storage = array->storage;
  return true;
}

bool live_array_descriptor(State& st, CUarray array, CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (st.arrays.count(array) == 0) return false;
  *desc = array->desc;
  return true;
}

bool live_mipmapped_array_descriptor(State& st, CUmipmappedArray array, CUDA_ARRAY3D_DESCRIPTOR* desc,
                                     unsigned* levels) {
  if (st.mipmapped_arrays.count(array) == 0) return false;
  *desc = array->desc;
  *levels = array->levels;
  return true;
}

std::optional<unsigned> format_channel_bytes(CUarray_format format) { return channel_bytes(format); }

void free_context_arrays(State& st, CUctx_st* ctx) {
  for (auto it = st.arrays.begin(); it != st.arrays.end();) {
    CUarray_st* array = *it++;  // release_array erases it
    if (array->ctx == ctx && array->owner == nullptr) release_array(st, array, &State::arrays);
  }
  for (auto it = st.mipmapped_arrays.begin(); it != st.mipmapped_arrays.end();) {
    CUmipmappedArray_st* array = *it++;
    if (array->ctx == ctx) release_array(st, array, &State::mipmapped_arrays);
  }
}

std::optional<unsigned> array_format_bytes(CUarray_format format) { return channel_bytes(format); }

const CUDA_ARRAY3D_DESCRIPTOR* array_descriptor(State& st, CUarray array) {
  return st.arrays.contains(array) ? &array->desc : nullptr;
}

const CUDA_ARRAY3D_DESCRIPTOR* mipmapped_array_descriptor(State& st, CUmipmappedArray array) {
  return st.mipmapped_arrays.contains(array) ? &array->desc : nullptr;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  // A 1D (Height 0) or 2D array: the 3D rules with Depth 0 and no flags.
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  if (pAllocateArray != nullptr) {
    desc.Width = pAllocateArray->Width;
    desc.Height = pAllocateArray->Height;
    desc.Format = pAllocateArray->Format;
    desc.NumChannels = pAllocateArray->NumChannels;
  }
  return create_array(pHandle, pAllocateArray != nullptr ? &desc : nullptr, 1, &State::arrays);
}

CUDASIM_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  return create_array(pHandle, pAllocateArray, 1, &State::arrays);
}

CUDASIM_EXPORT CUresult cuArrayDestroy(CUarray hArray) { return destroy_array(hArray, &State::arrays); }

CUDASIM_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) {
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  if (CUresult rc = get_descriptor(&desc, hArray); rc != CUDA_SUCCESS) return rc;
  // A layered, cubemap or 3D array has no 1D/2D description.
  if (desc.Depth != 0) return CUDA_ERROR_INVALID_VALUE;
  pArrayDescriptor->Width = desc.Width;
  pArrayDescriptor->Height = desc.Height;
  pArrayDescriptor->Format = desc.Format;
  pArrayDescriptor->NumChannels = desc.NumChannels;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  return get_descriptor(pArrayDescriptor, hArray);
}

CUDASIM_EXPORT CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements,
                                                     CUarray array, CUdevice device) {
  return memory_requirements(memoryRequirements, array, device, &State::arrays);
}

CUDASIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                               const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                               unsigned int numMipmapLevels) {
  return create_array(pHandle, pMipmappedArrayDesc, numMipmapLevels, &State::mipmapped_arrays);
}

CUDASIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return destroy_array(hMipmappedArray, &State::mipmapped_arrays);
}

CUDASIM_EXPORT CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements,
                                                              CUmipmappedArray mipmap, CUdevice device) {
  return memory_requirements(memoryRequirements, mipmap, device, &State::mipmapped_arrays);
}

// A level of a mipmapped array as an array of its own: made on first request (with bytes of its
// own unless the mipmapped array defers its memory), the same handle afterwards; charged with the
// mipmapped array and destroyed with it (cuArrayDestroy of it: CUDA_ERROR_INVALID_VALUE).
CUDASIM_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray hMipmappedArray,
                                                 unsigned int level) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (pLevelArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (l.st.mipmapped_arrays.count(hMipmappedArray) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (level >= hMipmappedArray->levels) return CUDA_ERROR_INVALID_VALUE;
  auto& levels = hMipmappedArray->level_arrays;
  levels.resize(hMipmappedArray->levels, nullptr);
  if (levels[level] == nullptr) {
    const CUDA_ARRAY3D_DESCRIPTOR desc = level_descriptor(hMipmappedArray->desc, level);
    std::shared_ptr<unsigned char> storage;
    if (!hMipmappedArray->deferred) {
      const ArrayLayout layout = layout_of(desc);
      storage = map_storage(layout.row_bytes * layout.rows * layout.slices);
      if (storage == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    } else if (hMipmappedArray->storage != nullptr) {  // mapped: its part of the view
      storage = level_view(hMipmappedArray->storage, hMipmappedArray->desc, level);
    }
    auto* array = new CUarray_st();
    array->ctx = hMipmappedArray->ctx;
    array->device = hMipmappedArray->device;
    array->desc = desc;
    array->deferred = hMipmappedArray->deferred;
    array->storage = std::move(storage);
    array->owner = hMipmappedArray;
    l.st.arrays.insert(array);
    levels[level] = array;
  }
  *pLevelArray = levels[level];
  return CUDA_SUCCESS;
}

// The plain formats (integers, half and float) with 1, 2 or 4 channels are what a linear texture
// holds; each has the same element limit on the simulated device.
CUDASIM_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements, CUarray_format format,
                                                           unsigned numChannels, CUdevice dev) {
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  auto bytes = channel_bytes(format);
  if (maxWidthInElements == nullptr || !bytes || *bytes == 0 ||
      (numChannels != 1 && numChannels != 2 && numChannels != 4))
    return CUDA_ERROR_INVALID_VALUE;
  *maxWidthInElements = kMaxTexture1DLinearWidth;
  return CUDA_SUCCESS;
}

// Only multi-planar formats (NV12, ...) have planes, and the simulator makes no array of them.
CUDASIM_EXPORT CUresult cuArrayGetPlane(CUarray* pPlaneArray, CUarray hArray, unsigned int) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (pPlaneArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (l.st.arrays.count(hArray) == 0) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_INVALID_VALUE;  // not a multi-planar array
}

namespace {

// No array is sparse: every query is CUDA_ERROR_INVALID_VALUE, the one error documented.
template <typename Handle>
CUresult sparse_properties(CUDA_ARRAY_SPARSE_PROPERTIES*, Handle*) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return CUDA_ERROR_INVALID_VALUE;
}

// cuMemMapArrayAsync: each entry checked as documented (a valid one names a deferred-mapping
// array, as no sparse array exists; its subresource is ignored, as documented for those), the
// array it names in *out. An array named twice in one list is CUDA_ERROR_INVALID_VALUE, so that
// every entry is checked against the state it will be applied to.
CUresult check_map_entry(State& st, const CUarrayMapInfo& info, const std::shared_ptr<CUstream_st>& stream,
                         ArrayObject** out) {
  ArrayObject* array = nullptr;
  if (info.resourceType == CU_RESOURCE_TYPE_ARRAY) {
    if (st.arrays.count(info.resource.array) == 0) return CUDA_ERROR_INVALID_HANDLE;
    array = info.resource.array;
    if (array->owner != nullptr) return CUDA_ERROR_INVALID_VALUE;  // a mipmapped array's level
  } else if (info.resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    if (st.mipmapped_arrays.count(info.resource.mipmap) == 0) return CUDA_ERROR_INVALID_HANDLE;
    array = info.resource.mipmap;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!array->deferred) return CUDA_ERROR_INVALID_VALUE;  // neither sparse nor deferred
  // Only 2D, 2D layered and 3D arrays are mapped.
  if (array->desc.Height == 0 || (array->desc.Flags & CUDA_ARRAY3D_CUBEMAP) != 0) return CUDA_ERROR_INVALID_VALUE;
  const bool map = info.memOperationType == CU_MEM_OPERATION_TYPE_MAP;
  if (!map && info.memOperationType != CU_MEM_OPERATION_TYPE_UNMAP) return CUDA_ERROR_INVALID_VALUE;
  if (map ? info.memHandleType != CU_MEM_HANDLE_TYPE_GENERIC : info.memHandle.memHandle != 0)
    return CUDA_ERROR_INVALID_VALUE;
  // Exactly one device, the stream's.
  const int device = context_device(stream->ctx);
  if (device >= 32 || info.deviceBitMask != (1u << device)) return CUDA_ERROR_INVALID_VALUE;
  if (info.flags != 0 || info.reserved[0] != 0 || info.reserved[1] != 0) return CUDA_ERROR_INVALID_VALUE;
  // A map backs an unmapped array; an unmap detaches a mapped one.
  if (map == (array->storage != nullptr)) return CUDA_ERROR_INVALID_VALUE;
  *out = array;
  return CUDA_SUCCESS;
}

// Applies a checked entry; `view` is a map's view of its allocation. A map shows it to the array
// (and to the levels handed out) at once: work queued before could not use the unbacked array. An
// unmap detaches the array at once for work queued after it, while work queued before keeps the
// view it took (and with it the allocation) until done.
void apply_map_entry(ArrayObject* array, std::shared_ptr<unsigned char> view) {
  for (unsigned level = 0; level < array->level_arrays.size(); ++level) {
    CUarray_st* level_array = array->level_arrays[level];
    if (level_array != nullptr) level_array->storage = view ? level_view(view, array->desc, level) : nullptr;
  }
  array->storage = std::move(view);
}

CUresult map_arrays(CUarrayMapInfo* list, unsigned count, CUstream handle, bool per_thread) {
  return with_stream(handle, per_thread, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (list == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    std::vector<ArrayObject*> arrays(count, nullptr);
    for (unsigned i = 0; i < count; ++i) {
      if (CUresult rc = check_map_entry(st, list[i], stream, &arrays[i]); rc != CUDA_SUCCESS) return rc;
      if (std::find(arrays.begin(), arrays.begin() + i, arrays[i]) != arrays.begin() + i)
        return CUDA_ERROR_INVALID_VALUE;
    }
    // Every map's view first, so that a refused handle or offset leaves the whole list undone.
    const int device = context_device(stream->ctx);
    std::vector<std::shared_ptr<unsigned char>> views(count);
    for (unsigned i = 0; i < count; ++i) {
      if (list[i].memOperationType != CU_MEM_OPERATION_TYPE_MAP) continue;
      if (CUresult rc = vmm_map_array(st, list[i].memHandle.memHandle, list[i].offset, arrays[i]->bytes, device,
                                      &views[i]);
          rc != CUDA_SUCCESS) {
        views.clear();
        vmm_sweep_array_views(st);
        return rc;
      }
    }
    for (unsigned i = 0; i < count; ++i) apply_map_entry(arrays[i], std::move(views[i]));
    vmm_sweep_array_views(st);  // what the unmaps detached, unless queued work still holds it
    return CUDA_SUCCESS;
  });
}

}  // namespace

CUDASIM_EXPORT CUresult cuArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* sparseProperties, CUarray array) {
  return sparse_properties(sparseProperties, array);
}
CUDASIM_EXPORT CUresult cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES* sparseProperties,
                                                            CUmipmappedArray mipmap) {
  return sparse_properties(sparseProperties, mipmap);
}
CUDASIM_EXPORT CUresult cuMemMapArrayAsync(CUarrayMapInfo* mapInfoList, unsigned int count, CUstream hStream) {
  return map_arrays(mapInfoList, count, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo* mapInfoList, unsigned int count, CUstream hStream) {
  return map_arrays(mapInfoList, count, hStream, true);
}
