// The simulated driver's tensor maps: tiled and im2col encodings accept what the driver API
// reference allows and refuse, with CUDA_ERROR_INVALID_VALUE and nothing written, every documented
// violation; cuTensorMapReplaceAddress updates only maps this driver encoded.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace driver_test;

namespace {

// A 3D float tensor of 64 x 32 x 8 elements, rows of 256 bytes, read in 32 x 8 x 2 boxes.
struct Tiled {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  cuuint32_t rank = 3;
  void* address = nullptr;
  cuuint64_t dims[5] = {64, 32, 8, 1, 1};
  cuuint64_t strides[4] = {256, 256 * 32, 0, 0};
  cuuint32_t box[5] = {32, 8, 2, 1, 1};
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  CUtensorMapFloatOOBfill oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;

  CUresult encode(CUtensorMap* map) const {
    return cuTensorMapEncodeTiled(map, type, rank, address, dims, strides, box, element_strides, interleave, swizzle,
                                  l2, oob);
  }
};

// A 4D NHWC half tensor (C 64, W 16, H 16, N 2) read as im2col columns.
struct Im2col {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  cuuint32_t rank = 4;
  void* address = nullptr;
  cuuint64_t dims[5] = {64, 16, 16, 2, 1};
  cuuint64_t strides[4] = {128, 128 * 16, 128 * 16 * 16, 0};
  int lower[3] = {-1, -1, 0};
  int upper[3] = {-1, -1, 0};
  cuuint32_t channels = 64;
  cuuint32_t pixels = 128;
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMapIm2ColWideMode mode = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W;

  CUresult encode(CUtensorMap* map) const {
    return cuTensorMapEncodeIm2col(map, type, rank, address, dims, strides, lower, upper, channels, pixels,
                                   element_strides, interleave, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  CUresult encode_wide(CUtensorMap* map) const {
    return cuTensorMapEncodeIm2colWide(map, type, rank, address, dims, strides, lower[2], upper[2], channels, pixels,
                                       element_strides, interleave, mode, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
};

// Device memory, 2 MiB aligned (so every alignment the maps ask for holds at its start).
void* device_buffer() {
  static CUdeviceptr ptr = [] {
    primary_context();
    CUdeviceptr p = 0;
    REQUIRE(cuMemAlloc(&p, 4 << 20) == CUDA_SUCCESS);
    return p;
  }();
  return reinterpret_cast<void*>(ptr);
}

void* offset(void* p, std::uintptr_t bytes) { return static_cast<char*>(p) + bytes; }

// Encodes with `t` and checks a refusal writes nothing.
CUresult tiled_result(const Tiled& t) {
  CUtensorMap map;
  std::memset(&map, 0x5a, sizeof map);
  const CUresult rc = t.encode(&map);
  if (rc != CUDA_SUCCESS) {
    CUtensorMap untouched;
    std::memset(&untouched, 0x5a, sizeof untouched);
    CHECK(std::memcmp(&map, &untouched, sizeof map) == 0);
  }
  return rc;
}

}  // namespace

TEST_CASE("a tiled tensor map is encoded from valid arguments", "[driver][tensor_maps]") {
  Tiled t;
  t.address = device_buffer();
  CUtensorMap map{};
  REQUIRE(t.encode(&map) == CUDA_SUCCESS);
  CUtensorMap zero{};
  CHECK(std::memcmp(&map, &zero, sizeof map) != 0);  // something was written
  // Ranks 1 to 5, every data type, interleaved layouts.
  Tiled one = t;
  one.rank = 1;
  one.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CHECK(tiled_result(one) == CUDA_SUCCESS);
  Tiled five = t;
  five.rank = 5;
  five.strides[2] = five.strides[1] * 8;
  five.strides[3] = five.strides[2];
  CHECK(tiled_result(five) == CUDA_SUCCESS);
  Tiled interleaved = t;
  interleaved.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
  interleaved.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
  CHECK(tiled_result(interleaved) == CUDA_SUCCESS);
  Tiled nan_fill = t;
  nan_fill.oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  CHECK(tiled_result(nan_fill) == CUDA_SUCCESS);
  Tiled packed = t;
  packed.type = CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B;
  packed.dims[0] = 256;
  packed.box[0] = 128;
  CHECK(tiled_result(packed) == CUDA_SUCCESS);
}

TEST_CASE("tiled tensor map arguments are checked as documented", "[driver][tensor_maps]") {
  Tiled t;
  t.address = device_buffer();
  REQUIRE(tiled_result(t) == CUDA_SUCCESS);
  auto refused = [&](auto change) {
    Tiled bad = t;
    change(bad);
    return tiled_result(bad) == CUDA_ERROR_INVALID_VALUE;
  };
  // NULL and misaligned maps.
  CHECK(cuTensorMapEncodeTiled(nullptr, t.type, t.rank, t.address, t.dims, t.strides, t.box, t.element_strides,
                               t.interleave, t.swizzle, t.l2, t.oob) == CUDA_ERROR_INVALID_VALUE);
  alignas(128) unsigned char storage[256] = {};
  auto* misaligned = reinterpret_cast<CUtensorMap*>(storage + 32);
  CHECK(t.encode(misaligned) == CUDA_ERROR_INVALID_VALUE);
  // Enumerations.
  CHECK(refused([](Tiled& b) { b.type = static_cast<CUtensorMapDataType>(16); }));
  CHECK(refused([](Tiled& b) { b.interleave = static_cast<CUtensorMapInterleave>(3); }));
  CHECK(refused([](Tiled& b) { b.swizzle = static_cast<CUtensorMapSwizzle>(7); }));
  CHECK(refused([](Tiled& b) { b.l2 = static_cast<CUtensorMapL2promotion>(4); }));
  CHECK(refused([](Tiled& b) { b.oob = static_cast<CUtensorMapFloatOOBfill>(2); }));
  // Rank: 1..5, at least 3 when interleaved.
  CHECK(refused([](Tiled& b) { b.rank = 0; }));
  CHECK(refused([](Tiled& b) { b.rank = 6; }));
  CHECK(refused([](Tiled& b) {
    b.rank = 2;
    b.interleave = CU_TENSOR_MAP_INTERLEAVE_16B;
  }));
  // Address: non-NULL, 16-byte aligned; 32 when interleaved by 32 bytes.
  CHECK(refused([](Tiled& b) { b.address = nullptr; }));
  CHECK(refused([](Tiled& b) { b.address = offset(b.address, 8); }));
  CHECK(refused([](Tiled& b) {
    b.address = offset(b.address, 16);
    b.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
    b.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
  }));
  // Dimensions 1..2^32; strides multiples of 16 (32 when interleaved by 32), below 2^40.
  CHECK(refused([](Tiled& b) { b.dims[1] = 0; }));
  CHECK(refused([](Tiled& b) { b.dims[2] = (cuuint64_t{1} << 32) + 1; }));
  CHECK(refused([](Tiled& b) { b.strides[0] = 264; }));
  CHECK(refused([](Tiled& b) { b.strides[1] = cuuint64_t{1} << 40; }));
  CHECK(refused([](Tiled& b) {
    b.strides[0] = 272;
    b.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
    b.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
  }));
  // Box 1..256, its inner row a multiple of 16 bytes; element strides 1..8.
  CHECK(refused([](Tiled& b) { b.box[2] = 0; }));
  CHECK(refused([](Tiled& b) { b.box[1] = 257; }));
  CHECK(refused([](Tiled& b) { b.box[0] = 6; }));  // 24 bytes
  CHECK(refused([](Tiled& b) { b.element_strides[1] = 0; }));
  CHECK(refused([](Tiled& b) { b.element_strides[2] = 9; }));
  // Swizzle spans: the inner row (32 floats = 128 bytes) fits 128B, not 64B or 32B.
  CHECK(refused([](Tiled& b) { b.swizzle = CU_TENSOR_MAP_SWIZZLE_64B; }));
  CHECK(refused([](Tiled& b) { b.swizzle = CU_TENSOR_MAP_SWIZZLE_32B; }));
  // Interleaving by 32 bytes needs the 32B swizzle.
  CHECK(refused([](Tiled& b) {
    b.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
    b.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  }));
  // The NaN fill only for floating-point types.
  CHECK(refused([](Tiled& b) {
    b.type = CU_TENSOR_MAP_DATA_TYPE_INT32;
    b.oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  }));
  // Packed types: 128-value rows and boxes, 32-byte alignment, no interleave for 16U6, their swizzles.
  auto packed = [](Tiled& b) {
    b.type = CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
    b.dims[0] = 256;
    b.box[0] = 128;
  };
  CHECK_FALSE(refused(packed));
  CHECK(refused([&](Tiled& b) {
    packed(b);
    b.dims[0] = 200;
  }));
  CHECK(refused([&](Tiled& b) {
    packed(b);
    b.box[0] = 64;
  }));
  CHECK(refused([&](Tiled& b) {
    packed(b);
    b.address = offset(b.address, 16);
  }));
  CHECK(refused([&](Tiled& b) {
    packed(b);
    b.interleave = CU_TENSOR_MAP_INTERLEAVE_16B;
  }));
  CHECK(refused([&](Tiled& b) {
    packed(b);
    b.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  }));
  CHECK(refused([&](Tiled& b) {
    packed(b);
    b.oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  }));
  CHECK(refused([](Tiled& b) {
    b.type = CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B;
    b.dims[0] = 63;
  }));
  // NULL arrays.
  CUtensorMap map{};
  CHECK(cuTensorMapEncodeTiled(&map, t.type, t.rank, t.address, nullptr, t.strides, t.box, t.element_strides,
                               t.interleave, t.swizzle, t.l2, t.oob) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapEncodeTiled(&map, t.type, t.rank, t.address, t.dims, nullptr, t.box, t.element_strides,
                               t.interleave, t.swizzle, t.l2, t.oob) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapEncodeTiled(&map, t.type, t.rank, t.address, t.dims, t.strides, nullptr, t.element_strides,
                               t.interleave, t.swizzle, t.l2, t.oob) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapEncodeTiled(&map, t.type, t.rank, t.address, t.dims, t.strides, t.box, nullptr, t.interleave,
                               t.swizzle, t.l2, t.oob) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("im2col tensor maps are checked as documented", "[driver][tensor_maps]") {
  Im2col p;
  p.address = device_buffer();
  CUtensorMap map{};
  REQUIRE(p.encode(&map) == CUDA_SUCCESS);
  auto refused = [&](auto change) {
    Im2col bad = p;
    change(bad);
    CUtensorMap out{};
    return bad.encode(&out) == CUDA_ERROR_INVALID_VALUE;
  };
  CHECK(refused([](Im2col& b) { b.rank = 2; }));
  CHECK(refused([](Im2col& b) { b.rank = 6; }));
  CHECK(refused([](Im2col& b) { b.lower[0] = 128; }));  // rank 4: offsets in [-128, 127]
  CHECK(refused([](Im2col& b) { b.upper[1] = -129; }));
  CHECK(refused([](Im2col& b) { b.upper[0] = -20; }));  // H: 16 - 20 + 1 <= 0, an empty box
  CHECK(refused([](Im2col& b) { b.channels = 0; }));
  CHECK(refused([](Im2col& b) { b.channels = 257; }));
  CHECK(refused([](Im2col& b) { b.pixels = 0; }));
  CHECK(refused([](Im2col& b) { b.pixels = 1025; }));
  CHECK(refused([](Im2col& b) { b.swizzle = CU_TENSOR_MAP_SWIZZLE_64B; }));  // 64 halves = 128 bytes
  CHECK(refused([](Im2col& b) { b.address = offset(b.address, 8); }));
  CHECK(refused([](Im2col& b) { b.element_strides[3] = 9; }));
  // Rank 3 takes one offset within 16 bits; rank 5 three within [-16, 15].
  CHECK_FALSE(refused([](Im2col& b) {
    b.rank = 3;
    b.lower[0] = -1000;
    b.upper[0] = 1000;
  }));
  CHECK(refused([](Im2col& b) {
    b.rank = 5;
    b.dims[4] = 1;
    b.strides[3] = b.strides[2] * 2;
    b.lower[0] = -17;
  }));
  CHECK(cuTensorMapEncodeIm2col(&map, p.type, p.rank, p.address, p.dims, p.strides, nullptr, p.upper, p.channels,
                                p.pixels, p.element_strides, p.interleave, p.swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("wide im2col tensor maps are checked as documented", "[driver][tensor_maps]") {
  Im2col p;
  p.address = device_buffer();
  CUtensorMap map{};
  REQUIRE(p.encode_wide(&map) == CUDA_SUCCESS);
  auto refused = [&](auto change) {
    Im2col bad = p;
    change(bad);
    CUtensorMap out{};
    return bad.encode_wide(&out) == CUDA_ERROR_INVALID_VALUE;
  };
  CHECK(refused([](Im2col& b) { b.mode = static_cast<CUtensorMapIm2ColWideMode>(2); }));
  CHECK(refused([](Im2col& b) { b.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE; }));
  CHECK(refused([](Im2col& b) { b.swizzle = CU_TENSOR_MAP_SWIZZLE_32B; }));
  CHECK(refused([](Im2col& b) { b.lower[2] = 40000; }));
  CHECK(refused([](Im2col& b) { b.upper[2] = -16; }));  // W: 16 - 16 - 0 = 0, an empty box
  CHECK(refused([](Im2col& b) { b.pixels = 2000; }));
  // W128 ignores pixelsPerColumn.
  CHECK_FALSE(refused([](Im2col& b) {
    b.mode = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128;
    b.pixels = 2000;
  }));
}

TEST_CASE("cuTensorMapReplaceAddress updates maps this driver encoded", "[driver][tensor_maps]") {
  Tiled t;
  t.address = device_buffer();
  CUtensorMap map{};
  REQUIRE(t.encode(&map) == CUDA_SUCCESS);
  // The same map encoded at another address is what replacing the address gives.
  Tiled moved = t;
  moved.address = offset(t.address, 4096);
  CUtensorMap expected{};
  REQUIRE(moved.encode(&expected) == CUDA_SUCCESS);
  CHECK(std::memcmp(&map, &expected, sizeof map) != 0);
  REQUIRE(cuTensorMapReplaceAddress(&map, moved.address) == CUDA_SUCCESS);
  CHECK(std::memcmp(&map, &expected, sizeof map) == 0);

  const CUtensorMap before = map;
  CHECK(cuTensorMapReplaceAddress(&map, offset(t.address, 8)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapReplaceAddress(&map, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapReplaceAddress(nullptr, t.address) == CUDA_ERROR_INVALID_VALUE);
  CHECK(std::memcmp(&map, &before, sizeof map) == 0);
  // A map interleaved by 32 bytes keeps needing 32-byte alignment.
  Tiled interleaved = t;
  interleaved.interleave = CU_TENSOR_MAP_INTERLEAVE_32B;
  interleaved.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
  REQUIRE(interleaved.encode(&map) == CUDA_SUCCESS);
  CHECK(cuTensorMapReplaceAddress(&map, offset(t.address, 16)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapReplaceAddress(&map, offset(t.address, 32)) == CUDA_SUCCESS);
  // Bytes no encoding wrote.
  CUtensorMap blank{};
  CHECK(cuTensorMapReplaceAddress(&blank, t.address) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("tensor maps need cuInit and a 12.0 driver (12.8 for the wide form)", "[driver][tensor_maps]") {
  CHECK(in_child([] {
          Tiled t;
          alignas(64) static unsigned char data[4096];
          t.address = data;
          CUtensorMap map{};
          CHILD_CHECK(t.encode(&map) == CUDA_ERROR_NOT_INITIALIZED);
          CHILD_CHECK(cuTensorMapReplaceAddress(&map, data) == CUDA_ERROR_NOT_INITIALIZED);
          return 0;
        }) == 0);
  CHECK(in_child([] {
          setenv("CUDASIM_DRIVER_VERSION", "12040", 1);
          CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
          Im2col p;
          alignas(64) static unsigned char data[4096];
          p.address = data;
          CUtensorMap map{};
          CHILD_CHECK(p.encode(&map) == CUDA_SUCCESS);
          CHILD_CHECK(p.encode_wide(&map) == CUDA_ERROR_NOT_SUPPORTED);
          return 0;
        }) == 0);
  primary_context();
  for (const char* name : {"cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapEncodeIm2colWide",
                           "cuTensorMapReplaceAddress"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    CHECK(cuGetProcAddress(name, &fn, 13000, 0, &found) == CUDA_SUCCESS);
    CHECK(fn != nullptr);
  }
}
