// Tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide,
// cuTensorMapReplaceAddress): host-side encoding of the descriptors the tensor memory accelerator
// reads.
//
// Bookkeeping: no device code runs here, so encoding is checking every argument against the rules
// the driver API reference gives (each failure CUDA_ERROR_INVALID_VALUE, nothing written) and storing
// the parameters in the opaque 128 bytes in a layout of the simulator's own (EncodedMap below, marked
// with kMagic), which cuTensorMapReplaceAddress recognises, checks the new address against (the
// alignment the map's interleave and data type need) and updates.
#include "state.h"

#include <cstring>
#include <limits>

using namespace cudasim;

namespace {

constexpr std::uint32_t kMagic = 0x434d5354;  // "TSMC": a map encoded here
enum class MapKind : std::uint8_t { Tiled = 1, Im2col = 2, Im2colWide = 3 };

// The simulator's layout of a CUtensorMap's 128 bytes.
struct EncodedMap {
  std::uint32_t magic;
  MapKind kind;
  std::uint8_t data_type, rank, interleave, swizzle, l2_promotion, oob_fill, wide_mode;
  std::uint8_t element_strides[5];
  std::uint8_t unused0;
  std::uint16_t channels_per_pixel;
  std::uint16_t box_minus_one[5];  // boxDim - 1 (1..256)
  std::uint16_t pixels_per_column;
  std::uint64_t address;
  std::uint32_t dim_minus_one[5];  // globalDim - 1 (1..2^32)
  std::uint32_t unused1;
  std::uint64_t strides[4];
  std::int16_t lower[3], upper[3];  // im2col corners ({D, H, W}, outermost first; wide: W only)
  std::uint8_t unused2[20];
};
static_assert(sizeof(EncodedMap) == sizeof(CUtensorMap));

// Everything an encoding call was given, in one place for the shared checks.
struct MapParams {
  MapKind kind = MapKind::Tiled;
  CUtensorMap* map = nullptr;
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  cuuint32_t rank = 0;
  void* address = nullptr;
  const cuuint64_t* dims = nullptr;
  const cuuint64_t* strides = nullptr;
  const cuuint32_t* element_strides = nullptr;
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  const cuuint32_t* box = nullptr;  // tiled
  int lower[3] = {}, upper[3] = {};  // im2col corners (wide: [0] only)
  unsigned corners = 0;
  cuuint32_t channels_per_pixel = 0, pixels_per_column = 0;
  CUtensorMapIm2ColWideMode wide_mode = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W;
};

// Bits one value of the data type takes in memory (the 16-byte-aligned packed types count their
// gaps: 16 values in 16 bytes); 0 for a value that is no CUtensorMapDataType.
unsigned value_bits(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
    case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B: return 8;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 16;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 32;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 64;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B: return 4;
    default: return 0;
  }
}

bool floating_point(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return true;
    default: return false;
  }
}

// The packed types whose values sit in 16-byte chunks: 32-byte alignment, 128-value rows.
bool packed_16b(CUtensorMapDataType type) {
  return type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B || type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}

// The alignment of globalAddress (and the multiple of globalStrides) the map needs.
std::uint64_t address_alignment(CUtensorMapInterleave interleave, CUtensorMapDataType type) {
  return interleave == CU_TENSOR_MAP_INTERLEAVE_32B || packed_16b(type) ? 32 : 16;
}

// The bytes a swizzle pattern spans: the most the box's inner dimension may take.
unsigned swizzle_span(CUtensorMapSwizzle swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    default: return 128;  // the 128B patterns
  }
}

// The swizzle patterns the packed types allow (16U6: load and store ones together).
bool swizzle_allowed_for_type(CUtensorMapDataType type, CUtensorMapSwizzle swizzle) {
  const bool common = swizzle == CU_TENSOR_MAP_SWIZZLE_NONE || swizzle == CU_TENSOR_MAP_SWIZZLE_128B ||
                      swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B;
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) return common || swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B;
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B) return common;
  return true;
}

bool aligned(const void* p, std::uint64_t alignment) {
  return p != nullptr && reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// The rules every encoding shares: the map's alignment, the enumerations, the address, dimensions,
// strides and element strides, and the interleave / swizzle / data type / fill combinations.
bool valid_common(const MapParams& p) {
  if (!aligned(p.map, 64)) return false;
  if (p.kind == MapKind::Tiled) {
    if (p.rank == 0 || p.rank > 5 || (p.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && p.rank < 3)) return false;
    if (p.box == nullptr) return false;
  } else if (p.rank < 3 || p.rank > 5) {
    return false;
  }
  const unsigned bits = value_bits(p.type);
  if (bits == 0 || static_cast<unsigned>(p.interleave) > CU_TENSOR_MAP_INTERLEAVE_32B ||
      static_cast<unsigned>(p.swizzle) > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
      static_cast<unsigned>(p.l2_promotion) > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
      static_cast<unsigned>(p.oob_fill) > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    return false;
  const std::uint64_t alignment = address_alignment(p.interleave, p.type);
  if (!aligned(p.address, alignment) || p.dims == nullptr || p.element_strides == nullptr) return false;
  if (p.rank > 1 && p.strides == nullptr) return false;
  for (cuuint32_t i = 0; i < p.rank; ++i) {
    if (p.dims[i] == 0 || p.dims[i] > (std::uint64_t{1} << 32)) return false;
    if (p.element_strides[i] == 0 || p.element_strides[i] > 8) return false;
  }
  if (packed_16b(p.type) && p.dims[0] % 128 != 0) return false;
  if (p.type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && p.dims[0] % 2 != 0) return false;
  for (cuuint32_t i = 0; i + 1 < p.rank; ++i) {
    if (p.strides[i] % alignment != 0 || p.strides[i] >= (std::uint64_t{1} << 40)) return false;
  }
  if (p.type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B && p.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) return false;
  if (p.interleave == CU_TENSOR_MAP_INTERLEAVE_32B && p.swizzle != CU_TENSOR_MAP_SWIZZLE_32B) return false;
  if (!swizzle_allowed_for_type(p.type, p.swizzle)) return false;
  if (p.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !floating_point(p.type)) return false;
  // The box's inner dimension in bytes: boxDim[0] values (tiled) or channelsPerPixel (im2col).
  const std::uint64_t inner_values = p.kind == MapKind::Tiled ? p.box[0] : p.channels_per_pixel;
  if (p.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && p.swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
      inner_values * bits > std::uint64_t{swizzle_span(p.swizzle)} * 8)
    return false;
  return true;
}

// Tiled (its rank, 1..5 or 3..5 when interleaved, checked with the shared rules): box extents 1..256 whose inner row is a multiple of
// 16 bytes when not interleaved (exactly 128 values for the 16-byte-aligned packed types).
bool valid_tiled(const MapParams& p) {
  for (cuuint32_t i = 0; i < p.rank; ++i) {
    if (p.box[i] == 0 || p.box[i] > 256) return false;
  }
  const unsigned bits = value_bits(p.type);
  if (p.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && (std::uint64_t{p.box[0]} * bits) % 128 != 0) return false;
  if (packed_16b(p.type) && p.box[0] != 128) return false;
  return true;
}

// im2col (both forms; rank 3..5 checked with the shared rules): each corner offset within the range the rank allows, a box of
// non-zero extent along every spatial dimension (globalDim + upper - lower > 0; corners listed
// outermost first, so the last is W, dimension 1); channelsPerPixel 1..256 (128 for the
// 16-byte-aligned packed types); pixelsPerColumn 1..1024 unless the wide W128 mode ignores it.
bool valid_im2col(const MapParams& p) {
  // Wide: the W offsets within 16 bits; else one offset within 16 bits (rank 3), two within 8
  // (rank 4), three within 5 (rank 5).
  const int corner_limit = p.kind == MapKind::Im2colWide || p.rank == 3 ? 32768 : p.rank == 4 ? 128 : 16;
  for (unsigned k = 0; k < p.corners; ++k) {
    if (p.lower[k] < -corner_limit || p.lower[k] >= corner_limit || p.upper[k] < -corner_limit ||
        p.upper[k] >= corner_limit)
      return false;
    const std::size_t dim = p.corners - k;  // the last corner is W (dimension 1), then H (2), D (3)
    if (static_cast<std::int64_t>(p.dims[dim]) + p.upper[k] - p.lower[k] <= 0) return false;
  }
  if (p.channels_per_pixel == 0 || p.channels_per_pixel > 256) return false;
  if (packed_16b(p.type) && p.channels_per_pixel != 128) return false;
  const bool pixels_ignored = p.kind == MapKind::Im2colWide && p.wide_mode == CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128;
  if (!pixels_ignored && (p.pixels_per_column == 0 || p.pixels_per_column > 1024)) return false;
  return true;
}

// The wide form: a W or W128 mode, and only the 64B and 128B / 128B_ATOM_32B swizzles (the packed
// 16-byte-aligned types: only the 128B ones).
bool valid_wide(const MapParams& p) {
  if (static_cast<unsigned>(p.wide_mode) > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128) return false;
  const bool wide_128 = p.swizzle == CU_TENSOR_MAP_SWIZZLE_128B || p.swizzle == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B;
  return wide_128 || (p.swizzle == CU_TENSOR_MAP_SWIZZLE_64B && !packed_16b(p.type));
}

void store(const MapParams& p) {
  EncodedMap e{};
  e.magic = kMagic;
  e.kind = p.kind;
  e.data_type = static_cast<std::uint8_t>(p.type);
  e.rank = static_cast<std::uint8_t>(p.rank);
  e.interleave = static_cast<std::uint8_t>(p.interleave);
  e.swizzle = static_cast<std::uint8_t>(p.swizzle);
  e.l2_promotion = static_cast<std::uint8_t>(p.l2_promotion);
  e.oob_fill = static_cast<std::uint8_t>(p.oob_fill);
  e.wide_mode = static_cast<std::uint8_t>(p.wide_mode);
  e.channels_per_pixel = static_cast<std::uint16_t>(p.channels_per_pixel);
  e.pixels_per_column = static_cast<std::uint16_t>(p.pixels_per_column);
  e.address = reinterpret_cast<std::uintptr_t>(p.address);
  for (cuuint32_t i = 0; i < p.rank; ++i) {
    e.element_strides[i] = static_cast<std::uint8_t>(p.element_strides[i]);
    e.dim_minus_one[i] = static_cast<std::uint32_t>(p.dims[i] - 1);
    if (p.box != nullptr) e.box_minus_one[i] = static_cast<std::uint16_t>(p.box[i] - 1);
    if (i + 1 < p.rank) e.strides[i] = p.strides[i];
  }
  for (unsigned k = 0; k < p.corners; ++k) {
    e.lower[k] = static_cast<std::int16_t>(p.lower[k]);
    e.upper[k] = static_cast<std::int16_t>(p.upper[k]);
  }
  std::memcpy(p.map, &e, sizeof e);
}

// The arguments every encoding takes.
MapParams common_params(MapKind kind, CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* element_strides,
                        CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                        CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill) {
  MapParams p;
  p.kind = kind;
  p.map = map;
  p.type = type;
  p.rank = rank;
  p.address = address;
  p.dims = dims;
  p.strides = strides;
  p.element_strides = element_strides;
  p.interleave = interleave;
  p.swizzle = swizzle;
  p.l2_promotion = l2_promotion;
  p.oob_fill = oob_fill;
  return p;
}

// cuInit's status, then CUDA_ERROR_NOT_SUPPORTED where the simulated driver predates the call.
CUresult entry_status(int since) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  }
  return driver_version() < since ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
}

// Checks the shared rules first (they bound the rank the arrays are read to), then the form's own.
CUresult encode(const MapParams& p, bool (*valid_kind)(const MapParams&)) {
  if (!valid_common(p) || !valid_kind(p)) return CUDA_ERROR_INVALID_VALUE;
  store(p);
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                               cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                               const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                               const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                               CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                               CUtensorMapFloatOOBfill oobFill) {
  if (CUresult rc = entry_status(12000); rc != CUDA_SUCCESS) return rc;
  MapParams p = common_params(MapKind::Tiled, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                              globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);
  p.box = boxDim;
  return encode(p, valid_tiled);
}

CUDASIM_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                                const cuuint64_t* globalStrides, const int* pixelBoxLowerCorner,
                                                const int* pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
                                                cuuint32_t pixelsPerColumn, const cuuint32_t* elementStrides,
                                                CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  if (CUresult rc = entry_status(12000); rc != CUDA_SUCCESS) return rc;
  if (pixelBoxLowerCorner == nullptr || pixelBoxUpperCorner == nullptr || tensorRank < 3 || tensorRank > 5)
    return CUDA_ERROR_INVALID_VALUE;
  MapParams p = common_params(MapKind::Im2col, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                              globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);
  p.corners = tensorRank - 2;
  for (unsigned k = 0; k < p.corners; ++k) {
    p.lower[k] = pixelBoxLowerCorner[k];
    p.upper[k] = pixelBoxUpperCorner[k];
  }
  p.channels_per_pixel = channelsPerPixel;
  p.pixels_per_column = pixelsPerColumn;
  return encode(p, valid_im2col);
}

CUDASIM_EXPORT CUresult cuTensorMapEncodeIm2colWide(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                    cuuint32_t tensorRank, void* globalAddress,
                                                    const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                    int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,
                                                    cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                                    const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                                    CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
                                                    CUtensorMapL2promotion l2Promotion,
                                                    CUtensorMapFloatOOBfill oobFill) {
  if (CUresult rc = entry_status(12080); rc != CUDA_SUCCESS) return rc;  // new in 12.8
  MapParams p = common_params(MapKind::Im2colWide, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
                              globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);
  p.corners = 1;
  p.lower[0] = pixelBoxLowerCornerWidth;
  p.upper[0] = pixelBoxUpperCornerWidth;
  p.channels_per_pixel = channelsPerPixel;
  p.pixels_per_column = pixelsPerColumn;
  p.wide_mode = mode;
  return encode(p, [](const MapParams& q) { return valid_im2col(q) && valid_wide(q); });
}

// A map this driver encoded gets a new address, aligned as the map's interleave and data type need.
CUDASIM_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  if (CUresult rc = entry_status(12000); rc != CUDA_SUCCESS) return rc;
  if (!aligned(tensorMap, 64)) return CUDA_ERROR_INVALID_VALUE;
  EncodedMap e{};
  std::memcpy(&e, tensorMap, sizeof e);
  if (e.magic != kMagic) return CUDA_ERROR_INVALID_VALUE;  // not an encoded map
  const auto interleave = static_cast<CUtensorMapInterleave>(e.interleave);
  const auto type = static_cast<CUtensorMapDataType>(e.data_type);
  if (!aligned(globalAddress, address_alignment(interleave, type))) return CUDA_ERROR_INVALID_VALUE;
  e.address = reinterpret_cast<std::uintptr_t>(globalAddress);
  std::memcpy(tensorMap, &e, sizeof e);
  return CUDA_SUCCESS;
}
