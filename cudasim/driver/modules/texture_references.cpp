// The deprecated texture and surface references: a module's `.texref`/`.surfref` declarations
// (cuModuleGetTexRef, cuModuleGetSurfRef) and cuTexRefCreate's references, whose bindings and sampling
// settings are checked as cuda.h documents, kept and answered back (bookkeeping only: no device code
// runs, so nothing ever reads through them).
//
// A module's references live as long as the module (unloading it, destroying its context or
// unloading its library makes them stale); cuTexRefCreate's until cuTexRefDestroy. Reference objects
// are never freed, so a stale handle is recognised as stale rather than read as reused memory. The
// calls on a reference take no other handle error than CUDA_ERROR_INVALID_VALUE, as documented.
#include "contexts.h"
#include "device_limits.h"
#include "kernels.h"
#include "state.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

using namespace cudasim;

// Invariant: `module`, when set, is the module whose image declares it; otherwise cuTexRefCreate made
// it, and `destroyed` says cuTexRefDestroy ended it.
struct CUtexref_st {
  // What it reads from: the last binding call wins, superseding the others.
  enum class Binding { None, Linear, Pitch2D, Array, Mipmapped };
  CUmod_st* module = nullptr;
  bool destroyed = false;
  Binding binding = Binding::None;
  CUdeviceptr address = 0;  // Linear, Pitch2D: the base bound
  CUarray array = nullptr;
  CUmipmappedArray mipmapped_array = nullptr;
  // Starting values: one float channel; clamped, point-sampled unnormalised coordinates (the only
  // address mode cuda.h allows without CU_TRSF_NORMALIZED_COORDINATES).
  CUarray_format format = CU_AD_FORMAT_FLOAT;
  int channels = 1;
  CUaddress_mode address_mode[3] = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP};
  CUfilter_mode filter_mode = CU_TR_FILTER_MODE_POINT;
  CUfilter_mode mipmap_filter_mode = CU_TR_FILTER_MODE_POINT;
  float mipmap_level_bias = 0.0f;
  float min_mipmap_level_clamp = 0.0f, max_mipmap_level_clamp = 0.0f;
  unsigned max_anisotropy = 0;
  float border_color[4] = {};
  unsigned flags = 0;
};

// Invariant: `module` is the module whose image declares it (surface references are never created).
struct CUsurfref_st {
  CUmod_st* module = nullptr;
  bool destroyed = false;  // never set: kept so both kinds share their lookups
  CUarray array = nullptr;  // null until cuSurfRefSetArray
};

namespace cudasim {

// The references of one kind handed out so far: by (module, name), so one name gives one handle per
// module; `known` holds every object made (stale ones too), which `made` owns.
template <typename Ref>
struct ReferenceTable {
  std::map<std::pair<CUmod_st*, std::string>, Ref*> by_name;
  std::unordered_set<Ref*> known;
  std::vector<std::unique_ptr<Ref>> made;

  Ref* make(CUmod_st* module) {
    made.push_back(std::make_unique<Ref>());
    Ref* ref = made.back().get();
    ref->module = module;
    known.insert(ref);
    return ref;
  }
};

struct TextureRefState {
  ReferenceTable<CUtexref_st> textures;
  ReferenceTable<CUsurfref_st> surfaces;
};

}  // namespace cudasim

namespace {

using Binding = CUtexref_st::Binding;

constexpr unsigned kKnownTexRefFlags = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
                                       CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;

TextureRefState& references(State& st) {
  if (!st.texture_refs) st.texture_refs = std::make_shared<TextureRefState>();
  return *st.texture_refs;
}

template <typename Ref>
ReferenceTable<Ref>& table(TextureRefState& rs) {
  if constexpr (std::is_same_v<Ref, CUtexref_st>) return rs.textures;
  else return rs.surfaces;
}

// A handle this process made whose module is still loaded (or, for a created one, not destroyed).
template <typename Ref>
bool live(State& st, Ref* ref) {
  if (!table<Ref>(references(st)).known.contains(ref)) return false;
  return ref->module != nullptr ? kernels(st).modules.contains(ref->module) : !ref->destroyed;
}

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$'; }

// Whether `word` starts at `at` in `text` and ends there (no identifier character follows).
bool word_at(const std::string& text, std::size_t at, std::string_view word) {
  const std::size_t end = at + word.size();
  return text.compare(at, word.size(), word) == 0 && (end == text.size() || !identifier_char(text[end]));
}

std::size_t skip_space(const std::string& text, std::size_t at) {
  while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  return at;
}

// Whether the image's PTX declares `.global <kind> name` (`.texref` or `.surfref`; `.visible`,
// `.extern` or `.weak` may come first, and an array of references is found by its name).
bool ptx_declares(const std::string& image, std::string_view kind, std::string_view name) {
  if (name.empty()) return false;
  constexpr std::string_view global = ".global";
  for (std::size_t at = image.find(global); at != std::string::npos; at = image.find(global, at + 1)) {
    if (!word_at(image, at, global)) continue;
    std::size_t p = skip_space(image, at + global.size());
    if (!word_at(image, p, kind)) continue;
    p = skip_space(image, p + kind.size());
    if (word_at(image, p, name)) return true;
  }
  return false;
}

// cuInit's status, then the calling thread's current context (CUDA_ERROR_INVALID_CONTEXT without one).
CUresult context_status(Locked& l, CUctx_st** ctx) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return current_context(l.st, ctx);
}

// cuModuleGetTexRef / cuModuleGetSurfRef: the handle given out before for (module, name), else a new
// one when the module's PTX declares that reference.
template <typename Ref>
CUresult module_reference(Ref** out, CUmodule hmod, const char* name, std::string_view kind) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = context_status(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!kernels(l.st).modules.contains(hmod)) return CUDA_ERROR_INVALID_HANDLE;  // as cuModuleGetFunction
  ReferenceTable<Ref>& refs = table<Ref>(references(l.st));
  auto key = std::make_pair(hmod, std::string(name));
  if (auto it = refs.by_name.find(key); it != refs.by_name.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  if (!ptx_declares(hmod->image, kind, name)) return CUDA_ERROR_NOT_FOUND;
  Ref* ref = refs.make(hmod);
  refs.by_name.emplace(std::move(key), ref);
  *out = ref;
  return CUDA_SUCCESS;
}

// Locks, checks cuInit and the current context, and runs body(state, context, reference) on a live
// reference under State::mu; CUDA_ERROR_INVALID_VALUE for any other handle.
template <typename Ref, typename Body>
CUresult with_reference(Ref* handle, Body body) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = context_status(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (!live(l.st, handle)) return CUDA_ERROR_INVALID_VALUE;
  return body(l.st, ctx, *handle);
}

// with_reference for the calls that need only the reference: `body(reference)` answers the call.
template <typename Body>
CUresult with_texref(CUtexref handle, Body body) {
  return with_reference(handle, [&body](State&, CUctx_st*, CUtexref_st& t) { return body(t); });
}

// Writes `read(reference)` to `*out` (CUDA_ERROR_INVALID_VALUE when `out` is null).
template <typename T, typename Read>
CUresult get_texref(T* out, CUtexref handle, Read read) {
  return with_reference(handle, [out, &read](State&, CUctx_st*, CUtexref_st& t) {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *out = read(t);
    return CUDA_SUCCESS;
  });
}

// Whether [ptr, ptr + bytes) is device memory the current context's device reads: an allocation
// of that device, or managed memory.
bool readable_device_memory(State& st, CUctx_st* ctx, CUdeviceptr ptr, std::size_t bytes) {
  const Allocation* a = find_allocation(st, static_cast<std::uintptr_t>(ptr), bytes == 0 ? 1 : bytes);
  return a != nullptr && (a->kind == AllocKind::Managed || a->device == ctx->device);
}

bool valid_channels(long long channels) { return channels == 1 || channels == 2 || channels == 4; }
bool valid_address_mode(CUaddress_mode am) { return am >= CU_TR_ADDRESS_MODE_WRAP && am <= CU_TR_ADDRESS_MODE_BORDER; }
bool valid_filter_mode(CUfilter_mode fm) { return fm == CU_TR_FILTER_MODE_POINT || fm == CU_TR_FILTER_MODE_LINEAR; }
bool valid_dimension(int dim) { return dim >= 0 && dim <= 2; }

// Sets the filter mode or the mipmap filter mode: point or linear.
CUresult set_filter_mode(CUtexref handle, CUfilter_mode fm, CUfilter_mode CUtexref_st::*mode) {
  return with_texref(handle, [fm, mode](CUtexref_st& t) {
    if (!valid_filter_mode(fm)) return CUDA_ERROR_INVALID_VALUE;
    t.*mode = fm;
    return CUDA_SUCCESS;
  });
}

// Binds `t` anew: whatever it read before is superseded.
void bind(CUtexref_st& t, Binding binding, CUdeviceptr address, CUarray array, CUmipmappedArray mipmapped) {
  t.binding = binding;
  t.address = address;
  t.array = array;
  t.mipmapped_array = mipmapped;
}

// cuTexRefSetAddress2D (_v2 and _v3 take the same arguments): a pitched 2D binding of linear memory,
// which also sets the reference's format from the descriptor.
CUresult set_address_2d(CUtexref handle, const CUDA_ARRAY_DESCRIPTOR* desc, CUdeviceptr dptr, std::size_t pitch) {
  return with_reference(handle, [desc, dptr, pitch](State& st, CUctx_st* ctx, CUtexref_st& t) {
    if (desc == nullptr || !valid_channels(desc->NumChannels)) return CUDA_ERROR_INVALID_VALUE;
    const std::optional<unsigned> channel_bytes = array_format_bytes(desc->Format);
    if (!channel_bytes) return CUDA_ERROR_INVALID_VALUE;
    if (*channel_bytes == 0) return CUDA_ERROR_NOT_SUPPORTED;  // a format the simulator has no layout for
    if (desc->Width == 0 || desc->Height == 0 || desc->Width > static_cast<std::size_t>(kMaxTexture2DLinearWidth) ||
        desc->Height > static_cast<std::size_t>(kMaxTexture2DLinearHeight))
      return CUDA_ERROR_INVALID_VALUE;
    if (dptr % kTextureAlignment != 0 || pitch % kTexturePitchAlignment != 0 ||
        pitch > static_cast<std::size_t>(kMaxTexture2DLinearPitch))
      return CUDA_ERROR_INVALID_VALUE;
    const std::size_t row = desc->Width * *channel_bytes * desc->NumChannels;  // bounded by the checks above
    if (pitch < row) return CUDA_ERROR_INVALID_VALUE;
    if (!readable_device_memory(st, ctx, dptr, pitch * (desc->Height - 1) + row)) return CUDA_ERROR_INVALID_VALUE;
    bind(t, Binding::Pitch2D, dptr, nullptr, nullptr);
    t.format = desc->Format;
    t.channels = static_cast<int>(desc->NumChannels);
    return CUDA_SUCCESS;
  });
}

}  // namespace

// --- references of a module, and created ones ---
CUDASIM_EXPORT CUresult cuModuleGetTexRef(CUtexref* pTexRef, CUmodule hmod, const char* name) {
  return module_reference(pTexRef, hmod, name, ".texref");
}

CUDASIM_EXPORT CUresult cuModuleGetSurfRef(CUsurfref* pSurfRef, CUmodule hmod, const char* name) {
  return module_reference(pSurfRef, hmod, name, ".surfref");
}

CUDASIM_EXPORT CUresult cuTexRefCreate(CUtexref* pTexRef) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = context_status(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (pTexRef == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pTexRef = references(l.st).textures.make(nullptr);
  return CUDA_SUCCESS;
}

// A module's references go with the module, never by this call (cuda.h: "should not be destroyed").
CUDASIM_EXPORT CUresult cuTexRefDestroy(CUtexref hTexRef) {
  return with_texref(hTexRef, [](CUtexref_st& t) {
    if (t.module != nullptr) return CUDA_ERROR_INVALID_VALUE;
    t.destroyed = true;
    return CUDA_SUCCESS;
  });
}

// --- bindings ---
CUDASIM_EXPORT CUresult cuTexRefSetArray(CUtexref hTexRef, CUarray hArray, unsigned int Flags) {
  return with_reference(hTexRef, [hArray, Flags](State& st, CUctx_st*, CUtexref_st& t) {
    const CUDA_ARRAY3D_DESCRIPTOR* desc = array_descriptor(st, hArray);
    if (Flags != CU_TRSA_OVERRIDE_FORMAT || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    bind(t, Binding::Array, 0, hArray, nullptr);
    t.format = desc->Format;  // CU_TRSA_OVERRIDE_FORMAT: the array's format replaces the reference's
    t.channels = static_cast<int>(desc->NumChannels);
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefSetMipmappedArray(CUtexref hTexRef, CUmipmappedArray hMipmappedArray,
                                                  unsigned int Flags) {
  return with_reference(hTexRef, [hMipmappedArray, Flags](State& st, CUctx_st*, CUtexref_st& t) {
    const CUDA_ARRAY3D_DESCRIPTOR* desc = mipmapped_array_descriptor(st, hMipmappedArray);
    if (Flags != CU_TRSA_OVERRIDE_FORMAT || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    bind(t, Binding::Mipmapped, 0, nullptr, hMipmappedArray);
    t.format = desc->Format;
    t.channels = static_cast<int>(desc->NumChannels);
    return CUDA_SUCCESS;
  });
}

// The hardware reads from a base aligned to CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: the reference is
// bound at dptr rounded down to it, and *ByteOffset is what fetches must add (0 for an aligned dptr,
// as every cuMemAlloc pointer is; ByteOffset may then be NULL).
CUDASIM_EXPORT CUresult cuTexRefSetAddress_v2(size_t* ByteOffset, CUtexref hTexRef, CUdeviceptr dptr, size_t bytes) {
  return with_reference(hTexRef, [ByteOffset, dptr, bytes](State& st, CUctx_st* ctx, CUtexref_st& t) {
    if (!readable_device_memory(st, ctx, dptr, bytes)) return CUDA_ERROR_INVALID_VALUE;
    // Texels per cuTexRefSetFormat's format (one the simulator has no layout for is not counted).
    const std::size_t texel = std::size_t{array_format_bytes(t.format).value_or(0)} * static_cast<unsigned>(t.channels);
    if (texel != 0 && bytes / texel > static_cast<std::size_t>(kMaxTexture1DLinearWidth))
      return CUDA_ERROR_INVALID_VALUE;
    const std::size_t offset = dptr % kTextureAlignment;
    bind(t, Binding::Linear, dptr - offset, nullptr, nullptr);
    if (ByteOffset != nullptr) *ByteOffset = offset;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefSetAddress2D_v2(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR* desc, CUdeviceptr dptr,
                                                size_t Pitch) {
  return set_address_2d(hTexRef, desc, dptr, Pitch);
}

CUDASIM_EXPORT CUresult cuTexRefSetAddress2D_v3(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR* desc, CUdeviceptr dptr,
                                                size_t Pitch) {
  return set_address_2d(hTexRef, desc, dptr, Pitch);
}

CUDASIM_EXPORT CUresult cuTexRefGetAddress_v2(CUdeviceptr* pdptr, CUtexref hTexRef) {
  return with_reference(hTexRef, [pdptr](State&, CUctx_st*, CUtexref_st& t) {
    if (pdptr == nullptr || (t.binding != Binding::Linear && t.binding != Binding::Pitch2D))
      return CUDA_ERROR_INVALID_VALUE;
    *pdptr = t.address;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetArray(CUarray* phArray, CUtexref hTexRef) {
  return with_reference(hTexRef, [phArray](State&, CUctx_st*, CUtexref_st& t) {
    if (phArray == nullptr || t.binding != Binding::Array) return CUDA_ERROR_INVALID_VALUE;
    *phArray = t.array;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetMipmappedArray(CUmipmappedArray* phMipmappedArray, CUtexref hTexRef) {
  return with_reference(hTexRef, [phMipmappedArray](State&, CUctx_st*, CUtexref_st& t) {
    if (phMipmappedArray == nullptr || t.binding != Binding::Mipmapped) return CUDA_ERROR_INVALID_VALUE;
    *phMipmappedArray = t.mipmapped_array;
    return CUDA_SUCCESS;
  });
}

// --- format and sampling settings ---
// cuda.h: cuTexRefSetFormat "cannot follow" cuTexRefSetAddress2D, whose descriptor set the format.
CUDASIM_EXPORT CUresult cuTexRefSetFormat(CUtexref hTexRef, CUarray_format fmt, int NumPackedComponents) {
  return with_texref(hTexRef, [fmt, NumPackedComponents](CUtexref_st& t) {
    if (!array_format_bytes(fmt) || !valid_channels(NumPackedComponents) || t.binding == Binding::Pitch2D)
      return CUDA_ERROR_INVALID_VALUE;
    t.format = fmt;
    t.channels = NumPackedComponents;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetFormat(CUarray_format* pFormat, int* pNumChannels, CUtexref hTexRef) {
  return with_texref(hTexRef, [pFormat, pNumChannels](CUtexref_st& t) {
    if (pFormat != nullptr) *pFormat = t.format;  // either may be NULL (ignored), as documented
    if (pNumChannels != nullptr) *pNumChannels = t.channels;
    return CUDA_SUCCESS;
  });
}

// Kept whatever the binding (cuda.h: no effect on linear memory, as no fetch is simulated).
CUDASIM_EXPORT CUresult cuTexRefSetAddressMode(CUtexref hTexRef, int dim, CUaddress_mode am) {
  return with_texref(hTexRef, [dim, am](CUtexref_st& t) {
    if (!valid_dimension(dim) || !valid_address_mode(am)) return CUDA_ERROR_INVALID_VALUE;
    t.address_mode[dim] = am;
    return CUDA_SUCCESS;
  });
}

// Dimensions 0 to 2, as cuTexRefSetAddressMode takes them (cuda.h's "0 and 1" predates 3D references).
CUDASIM_EXPORT CUresult cuTexRefGetAddressMode(CUaddress_mode* pam, CUtexref hTexRef, int dim) {
  return with_texref(hTexRef, [pam, dim](CUtexref_st& t) {
    if (pam == nullptr || !valid_dimension(dim)) return CUDA_ERROR_INVALID_VALUE;
    *pam = t.address_mode[dim];
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefSetFilterMode(CUtexref hTexRef, CUfilter_mode fm) {
  return set_filter_mode(hTexRef, fm, &CUtexref_st::filter_mode);
}

CUDASIM_EXPORT CUresult cuTexRefGetFilterMode(CUfilter_mode* pfm, CUtexref hTexRef) {
  return get_texref(pfm, hTexRef, [](const CUtexref_st& t) { return t.filter_mode; });
}

CUDASIM_EXPORT CUresult cuTexRefSetMipmapFilterMode(CUtexref hTexRef, CUfilter_mode fm) {
  return set_filter_mode(hTexRef, fm, &CUtexref_st::mipmap_filter_mode);
}

CUDASIM_EXPORT CUresult cuTexRefGetMipmapFilterMode(CUfilter_mode* pfm, CUtexref hTexRef) {
  return get_texref(pfm, hTexRef, [](const CUtexref_st& t) { return t.mipmap_filter_mode; });
}

CUDASIM_EXPORT CUresult cuTexRefSetMipmapLevelBias(CUtexref hTexRef, float bias) {
  return with_texref(hTexRef, [bias](CUtexref_st& t) {
    t.mipmap_level_bias = bias;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetMipmapLevelBias(float* pbias, CUtexref hTexRef) {
  return get_texref(pbias, hTexRef, [](const CUtexref_st& t) { return t.mipmap_level_bias; });
}

CUDASIM_EXPORT CUresult cuTexRefSetMipmapLevelClamp(CUtexref hTexRef, float minMipmapLevelClamp,
                                                    float maxMipmapLevelClamp) {
  return with_texref(hTexRef, [minMipmapLevelClamp, maxMipmapLevelClamp](CUtexref_st& t) {
    t.min_mipmap_level_clamp = minMipmapLevelClamp;
    t.max_mipmap_level_clamp = maxMipmapLevelClamp;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetMipmapLevelClamp(float* pminMipmapLevelClamp, float* pmaxMipmapLevelClamp,
                                                    CUtexref hTexRef) {
  return with_texref(hTexRef, [pminMipmapLevelClamp, pmaxMipmapLevelClamp](CUtexref_st& t) {
    if (pminMipmapLevelClamp == nullptr || pmaxMipmapLevelClamp == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *pminMipmapLevelClamp = t.min_mipmap_level_clamp;
    *pmaxMipmapLevelClamp = t.max_mipmap_level_clamp;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefSetMaxAnisotropy(CUtexref hTexRef, unsigned int maxAniso) {
  return with_texref(hTexRef, [maxAniso](CUtexref_st& t) {
    // Read back as an int (cuTexRefGetMaxAnisotropy): a value beyond it cannot be answered.
    if (maxAniso > static_cast<unsigned>(INT_MAX)) return CUDA_ERROR_INVALID_VALUE;
    t.max_anisotropy = maxAniso;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetMaxAnisotropy(int* pmaxAniso, CUtexref hTexRef) {
  return get_texref(pmaxAniso, hTexRef, [](const CUtexref_st& t) { return static_cast<int>(t.max_anisotropy); });
}

// Kept whatever the address modes (cuda.h: it only matters with CU_TR_ADDRESS_MODE_BORDER).
CUDASIM_EXPORT CUresult cuTexRefSetBorderColor(CUtexref hTexRef, float* pBorderColor) {
  return with_texref(hTexRef, [pBorderColor](CUtexref_st& t) {
    if (pBorderColor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::copy(pBorderColor, pBorderColor + 4, t.border_color);
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetBorderColor(float* pBorderColor, CUtexref hTexRef) {
  return with_texref(hTexRef, [pBorderColor](CUtexref_st& t) {
    if (pBorderColor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::copy(t.border_color, t.border_color + 4, pBorderColor);
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefSetFlags(CUtexref hTexRef, unsigned int Flags) {
  return with_texref(hTexRef, [Flags](CUtexref_st& t) {
    if ((Flags & ~kKnownTexRefFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    t.flags = Flags;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuTexRefGetFlags(unsigned int* pFlags, CUtexref hTexRef) {
  return get_texref(pFlags, hTexRef, [](const CUtexref_st& t) { return t.flags; });
}

// --- surface references ---
CUDASIM_EXPORT CUresult cuSurfRefSetArray(CUsurfref hSurfRef, CUarray hArray, unsigned int Flags) {
  return with_reference(hSurfRef, [hArray, Flags](State& st, CUctx_st*, CUsurfref_st& s) {
    const CUDA_ARRAY3D_DESCRIPTOR* desc = array_descriptor(st, hArray);
    if (Flags != 0 || desc == nullptr || (desc->Flags & CUDA_ARRAY3D_SURFACE_LDST) == 0)
      return CUDA_ERROR_INVALID_VALUE;
    s.array = hArray;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuSurfRefGetArray(CUarray* phArray, CUsurfref hSurfRef) {
  return with_reference(hSurfRef, [phArray](State&, CUctx_st*, CUsurfref_st& s) {
    if (phArray == nullptr || s.array == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *phArray = s.array;
    return CUDA_SUCCESS;
  });
}

// --- the deprecated execution control's texture argument ---
// The reference must come from cuModuleGetTexRef and texunit be CU_PARAM_TR_DEFAULT (cuda.h); a
// module's references are already its functions', so nothing more is kept.
CUDASIM_EXPORT CUresult cuParamSetTexRef(CUfunction hfunc, int texunit, CUtexref hTexRef) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = context_status(l, &ctx); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  // As the other deprecated execution-control calls (cuParamSetSize, ...): a function or library kernel.
  if (!ks.functions.contains(reinterpret_cast<CUfunc_st*>(hfunc)) &&
      !ks.kernels.contains(reinterpret_cast<CUkern_st*>(hfunc)))
    return CUDA_ERROR_INVALID_HANDLE;
  if (texunit != CU_PARAM_TR_DEFAULT || !live(l.st, hTexRef) || hTexRef->module == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
