// The simulated driver's copies with rows and slices and its array copies: cuMemcpy2D/3D (pitches,
// offsets, slices), cuMemcpy3DPeer, cuMemcpyHtoA/AtoH/AtoD/DtoA/AtoA, cuMemsetD2D8/16/32, with
// their async and per-thread forms: data round trips, stream ordering, staged sources, capture,
// and the documented errors.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

using namespace driver_test;

// The per-thread-default-stream forms, which cuda.h declares only for programs built with them.
extern "C" {
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy);
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* pCopy);
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* pCopy);
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* pCopy, CUstream hStream);
CUresult cuMemcpyHtoA_v2_ptds(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount);
CUresult cuMemcpyAtoH_v2_ptds(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount);
CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemcpyAtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                              size_t ByteCount);
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height);
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height);
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream);
CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                 CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                                 CUstream hStream);
CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                   unsigned long long flags, CUstream hStream);
// 12.8's form, whose name cuda.h maps to the 13.0 one.
CUresult memcpy_3d_batch_v1(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx, unsigned long long flags,
                            CUstream hStream) __asm__("cuMemcpy3DBatchAsync");
}

namespace {

std::vector<unsigned char> pattern(size_t bytes, unsigned char seed = 1) {
  std::vector<unsigned char> v(bytes);
  std::iota(v.begin(), v.end(), seed);
  return v;
}

CUdeviceptr allocate(size_t bytes) {
  CUdeviceptr p = 0;
  REQUIRE(cuMemAlloc(&p, bytes) == CUDA_SUCCESS);
  return p;
}

std::vector<unsigned char> read_back(CUdeviceptr p, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  REQUIRE(cuMemcpyDtoH(v.data(), p, bytes) == CUDA_SUCCESS);
  return v;
}

// A 2D copy of `height` rows of `width` bytes from host rows `spitch` apart to device rows
// `dpitch` apart, at byte `dx` and row `dy` of the destination.
CUDA_MEMCPY2D host_to_device_2d(CUdeviceptr dst, size_t dpitch, size_t dx, size_t dy, const void* src, size_t spitch,
                                size_t width, size_t height) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.srcPitch = spitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstPitch = dpitch;
  c.dstXInBytes = dx;
  c.dstY = dy;
  c.WidthInBytes = width;
  c.Height = height;
  return c;
}

CUarray make_array(size_t width, size_t height, size_t depth, CUarray_format format, unsigned channels) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Depth = depth;
  d.Format = format;
  d.NumChannels = channels;
  CUarray a = nullptr;
  REQUIRE(cuArray3DCreate(&a, &d) == CUDA_SUCCESS);
  return a;
}

// A 3D copy between packed host rows (`pitch` bytes, `rows` per slice) and an array, from or to
// its origin.
CUDA_MEMCPY3D host_to_array_3d(const void* host, size_t pitch, size_t rows, CUarray array, size_t width,
                               size_t height, size_t depth) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = host;
  c.srcPitch = pitch;
  c.srcHeight = rows;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = array;
  c.WidthInBytes = width;
  c.Height = height;
  c.Depth = depth;
  return c;
}
CUDA_MEMCPY3D array_to_host_3d(CUarray array, void* host, size_t pitch, size_t rows, size_t width, size_t height,
                               size_t depth) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = array;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = host;
  c.dstPitch = pitch;
  c.dstHeight = rows;
  c.WidthInBytes = width;
  c.Height = height;
  c.Depth = depth;
  return c;
}

CUstream new_stream() {
  CUstream s = nullptr;
  REQUIRE(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  return s;
}

}  // namespace

TEST_CASE("driver copies: cuMemcpy2D places rows at pitches and offsets, and leaves the rest", "[driver][copies]") {
  primary_context();
  constexpr size_t kPitch = 64, kRows = 6, kWidth = 20, kHeight = 4, kSrcPitch = 24;
  const CUdeviceptr dev = allocate(kPitch * kRows);
  REQUIRE(cuMemsetD8(dev, 0xee, kPitch * kRows) == CUDA_SUCCESS);
  const auto src = pattern(kSrcPitch * kHeight);
  CUDA_MEMCPY2D c = host_to_device_2d(dev, kPitch, 8, 1, src.data(), kSrcPitch, kWidth, kHeight);
  REQUIRE(cuMemcpy2D(&c) == CUDA_SUCCESS);
  const auto got = read_back(dev, kPitch * kRows);
  for (size_t y = 0; y < kRows; ++y) {
    for (size_t x = 0; x < kPitch; ++x) {
      const bool inside = y >= 1 && y < 1 + kHeight && x >= 8 && x < 8 + kWidth;
      const unsigned char want = inside ? src[(y - 1) * kSrcPitch + (x - 8)] : 0xee;
      INFO("row " << y << " byte " << x);
      REQUIRE(got[y * kPitch + x] == want);
    }
  }

  // Back to the host, from an offset, through the unaligned form and the per-thread form.
  std::vector<unsigned char> back(kWidth * kHeight, 0);
  CUDA_MEMCPY2D r{};
  r.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  r.srcDevice = dev;
  r.srcPitch = kPitch;
  r.srcXInBytes = 8;
  r.srcY = 1;
  r.dstMemoryType = CU_MEMORYTYPE_HOST;
  r.dstHost = back.data();
  r.dstPitch = kWidth;
  r.WidthInBytes = kWidth;
  r.Height = kHeight;
  REQUIRE(cuMemcpy2DUnaligned(&r) == CUDA_SUCCESS);
  for (size_t y = 0; y < kHeight; ++y)
    CHECK(std::memcmp(back.data() + y * kWidth, src.data() + y * kSrcPitch, kWidth) == 0);
  std::fill(back.begin(), back.end(), 0);
  REQUIRE(cuMemcpy2D_v2_ptds(&r) == CUDA_SUCCESS);
  CHECK(std::memcmp(back.data(), src.data(), kWidth) == 0);

  // Device to device, between two pitched allocations (unified pointers on the destination side).
  const CUdeviceptr other = allocate(kPitch * kRows);
  CUDA_MEMCPY2D d = r;
  d.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  d.dstDevice = other;
  d.dstPitch = kPitch;
  REQUIRE(cuMemcpy2DUnaligned_v2_ptds(&d) == CUDA_SUCCESS);
  const auto copied = read_back(other, kWidth);
  CHECK(std::memcmp(copied.data(), src.data(), kWidth) == 0);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(other) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: the documented errors of 2D and 3D copies", "[driver][copies]") {
  primary_context();
  const CUdeviceptr dev = allocate(4096);
  std::vector<unsigned char> host(4096);
  CHECK(cuMemcpy2D(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpy3D(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpy2DAsync(nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);

  CUDA_MEMCPY2D c = host_to_device_2d(dev, 64, 0, 0, host.data(), 64, 64, 64);
  REQUIRE(cuMemcpy2D(&c) == CUDA_SUCCESS);  // exactly the allocation
  c.Height = 65;                            // one row past its end
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  c = host_to_device_2d(dev, 32, 0, 0, host.data(), 64, 48, 2);  // a pitch narrower than a row
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  c = host_to_device_2d(dev, 64, 40, 0, host.data(), 64, 32, 2);  // X offset pushes the row past the pitch
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  c = host_to_device_2d(dev, 64, 0, 0, nullptr, 64, 32, 2);  // no source
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  c = host_to_device_2d(dev, 64, 0, 0, host.data(), 64, 32, 2);
  c.srcMemoryType = static_cast<CUmemorytype>(0x7f);
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  c = host_to_device_2d(dev, SIZE_MAX / 2, 0, 0, host.data(), 64, 32, 4);  // reach wraps
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  c = host_to_device_2d(dev, 64, 0, 0, host.data(), 64, 0, 4);  // nothing to copy
  CHECK(cuMemcpy2D(&c) == CUDA_SUCCESS);

  CUDA_MEMCPY3D t{};
  t.srcMemoryType = CU_MEMORYTYPE_HOST;
  t.srcHost = host.data();
  t.srcPitch = 64;
  t.srcHeight = 4;
  t.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  t.dstDevice = dev;
  t.dstPitch = 64;
  t.dstHeight = 4;
  t.WidthInBytes = 64;
  t.Height = 4;
  t.Depth = 16;
  REQUIRE(cuMemcpy3D(&t) == CUDA_SUCCESS);  // 16 slices of 256 bytes: the whole allocation
  t.Depth = 17;
  CHECK(cuMemcpy3D(&t) == CUDA_ERROR_INVALID_VALUE);
  t.Depth = 2;
  t.dstHeight = 3;  // slices shorter than the rows copied
  CHECK(cuMemcpy3D(&t) == CUDA_ERROR_INVALID_VALUE);
  t.dstHeight = 4;
  t.srcLOD = 1;
  CHECK(cuMemcpy3D(&t) == CUDA_ERROR_INVALID_VALUE);
  t.srcLOD = 0;
  int reserved = 0;
  t.reserved0 = &reserved;
  CHECK(cuMemcpy3D(&t) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
  t.reserved0 = nullptr;
  CHECK(cuMemcpy3D(&t) == CUDA_ERROR_INVALID_VALUE);  // freed memory
}

TEST_CASE("driver copies: cuMemcpy3D copies slices at their heights and Z offsets", "[driver][copies]") {
  primary_context();
  constexpr size_t kPitch = 32, kSliceRows = 5, kSlices = 4;
  const CUdeviceptr dev = allocate(kPitch * kSliceRows * kSlices);
  REQUIRE(cuMemsetD8(dev, 0, kPitch * kSliceRows * kSlices) == CUDA_SUCCESS);
  // A host block of 3 slices x 2 rows x 10 bytes, tightly packed, into slices 1..3, rows 2..3, byte 4.
  const auto src = pattern(3 * 2 * 10, 7);
  CUDA_MEMCPY3D t{};
  t.srcMemoryType = CU_MEMORYTYPE_HOST;
  t.srcHost = src.data();
  t.srcPitch = 10;
  t.srcHeight = 2;
  t.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  t.dstDevice = dev;
  t.dstPitch = kPitch;
  t.dstHeight = kSliceRows;
  t.dstXInBytes = 4;
  t.dstY = 2;
  t.dstZ = 1;
  t.WidthInBytes = 10;
  t.Height = 2;
  t.Depth = 3;
  REQUIRE(cuMemcpy3D(&t) == CUDA_SUCCESS);
  const auto got = read_back(dev, kPitch * kSliceRows * kSlices);
  size_t copied = 0;
  for (size_t z = 0; z < kSlices; ++z) {
    for (size_t y = 0; y < kSliceRows; ++y) {
      for (size_t x = 0; x < kPitch; ++x) {
        const bool inside = z >= 1 && y >= 2 && y < 4 && x >= 4 && x < 14;
        const unsigned char want = inside ? src[((z - 1) * 2 + (y - 2)) * 10 + (x - 4)] : 0;
        copied += inside;
        REQUIRE(got[(z * kSliceRows + y) * kPitch + x] == want);
      }
    }
  }
  CHECK(copied == src.size());
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: async 2D/3D copies and 2D sets are ordered on their stream", "[driver][copies]") {
  primary_context();
  const CUstream stream = new_stream();
  constexpr size_t kPitch = 128, kRows = 8;
  const CUdeviceptr dev = allocate(kPitch * kRows);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD2D32Async(dev, kPitch, 0x01020304u, kPitch / 4, kRows, stream) == CUDA_SUCCESS);
  // A pageable source is read at the call: changing it afterwards does not change what is copied.
  auto src = pattern(16 * 3, 50);
  CUDA_MEMCPY2D c = host_to_device_2d(dev, kPitch, 16, 2, src.data(), 16, 16, 3);
  REQUIRE(cuMemcpy2DAsync(&c, stream) == CUDA_SUCCESS);
  const auto sent = src;
  std::fill(src.begin(), src.end(), 0);
  REQUIRE(cuMemsetD2D8Async(dev + 2 * kPitch + 20, kPitch, 0xab, 4, 2, stream) == CUDA_SUCCESS);
  std::vector<unsigned char> back(kPitch * kRows, 0);
  CUDA_MEMCPY3D r{};
  r.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  r.srcDevice = dev;
  r.srcPitch = kPitch;
  r.dstMemoryType = CU_MEMORYTYPE_HOST;
  r.dstHost = back.data();
  r.dstPitch = kPitch;
  r.WidthInBytes = kPitch;
  r.Height = kRows;
  r.Depth = 1;
  REQUIRE(cuMemcpy3DAsync(&r, stream) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  CHECK(!gate.ran());
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0; }));  // nothing ran yet
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  for (size_t y = 0; y < kRows; ++y) {
    for (size_t x = 0; x < kPitch; ++x) {
      const unsigned char set = static_cast<unsigned char>(0x01020304u >> (8 * (x % 4)));
      unsigned char want = set;
      if (y >= 2 && y < 5 && x >= 16 && x < 32) want = sent[(y - 2) * 16 + (x - 16)];
      if (y >= 2 && y < 4 && x >= 20 && x < 24) want = 0xab;
      INFO("row " << y << " byte " << x);
      REQUIRE(back[y * kPitch + x] == want);
    }
  }
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: 2D sets of 8, 16 and 32 bits and their errors", "[driver][copies]") {
  primary_context();
  constexpr size_t kPitch = 64, kRows = 4;
  const CUdeviceptr dev = allocate(kPitch * kRows);
  REQUIRE(cuMemsetD8(dev, 0, kPitch * kRows) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD2D16(dev + 2, kPitch, 0xbeef, 3, 2) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD2D32_v2_ptds(dev + 2 * kPitch + 8, kPitch, 0xcafef00du, 2, 2) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD2D8_v2_ptds(dev + 60, kPitch, 0x5a, 4, kRows) == CUDA_SUCCESS);
  const auto got = read_back(dev, kPitch * kRows);
  auto u16 = [&](size_t at) { std::uint16_t v; std::memcpy(&v, got.data() + at, 2); return v; };
  auto u32 = [&](size_t at) { std::uint32_t v; std::memcpy(&v, got.data() + at, 4); return v; };
  for (size_t y = 0; y < 2; ++y) {
    for (size_t i = 0; i < 3; ++i) CHECK(u16(y * kPitch + 2 + 2 * i) == 0xbeef);
    CHECK(u16(y * kPitch + 8) == 0);  // right after the row
  }
  CHECK(u16(2 * kPitch + 2) == 0);  // the third row untouched
  for (size_t y = 2; y < 4; ++y) {
    CHECK(u32(y * kPitch + 8) == 0xcafef00du);
    CHECK(u32(y * kPitch + 12) == 0xcafef00du);
    CHECK(u32(y * kPitch + 16) == 0);
  }
  for (size_t y = 0; y < kRows; ++y) CHECK(u32(y * kPitch + 60) == 0x5a5a5a5au);

  CHECK(cuMemsetD2D32(dev + 2, kPitch, 0, 1, 1) == CUDA_ERROR_INVALID_VALUE);    // misaligned for 32 bits
  CHECK(cuMemsetD2D16(dev, 6, 0, 4, 2) == CUDA_ERROR_INVALID_VALUE);             // pitch under a row
  CHECK(cuMemsetD2D8(dev, kPitch, 0, kPitch, kRows + 1) == CUDA_ERROR_INVALID_VALUE);  // past the end
  CHECK(cuMemsetD2D8(0, kPitch, 0, 1, 1) == CUDA_ERROR_INVALID_VALUE);
  std::vector<unsigned char> host(256);
  CHECK(cuMemsetD2D8(reinterpret_cast<CUdeviceptr>(host.data()), 16, 0, 4, 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD2D8(dev, kPitch, 0, 0, 3) == CUDA_SUCCESS);  // nothing to set
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: arrays hold what is copied in, at element offsets", "[driver][copies][arrays]") {
  primary_context();
  // A 1D array of 64 four-byte elements.
  const CUarray line = make_array(64, 0, 0, CU_AD_FORMAT_FLOAT, 1);
  const auto src = pattern(256, 3);
  REQUIRE(cuMemcpyHtoA(line, 0, src.data(), 256) == CUDA_SUCCESS);
  std::vector<unsigned char> back(64, 0);
  REQUIRE(cuMemcpyAtoH(back.data(), line, 16, 64) == CUDA_SUCCESS);
  CHECK(std::memcmp(back.data(), src.data() + 16, 64) == 0);
  // Array to device, device to array, array to array.
  const CUdeviceptr dev = allocate(256);
  REQUIRE(cuMemcpyAtoD(dev, line, 0, 256) == CUDA_SUCCESS);
  CHECK(read_back(dev, 256) == src);
  const CUarray other = make_array(64, 0, 0, CU_AD_FORMAT_UNSIGNED_INT32, 1);
  REQUIRE(cuMemcpyDtoA(other, 128, dev, 128) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyAtoA(line, 0, other, 128, 128) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyAtoH_v2_ptds(back.data(), line, 0, 64) == CUDA_SUCCESS);
  CHECK(std::memcmp(back.data(), src.data(), 64) == 0);
  REQUIRE(cuMemcpyAtoA_v2_ptds(line, 0, other, 0, 4) == CUDA_SUCCESS);  // other's first element is zero
  REQUIRE(cuMemcpyAtoH(back.data(), line, 0, 8) == CUDA_SUCCESS);
  CHECK((back[0] == 0 && back[3] == 0 && back[4] == src[4]));

  // Whole elements only, inside the array, live handles only.
  CHECK(cuMemcpyHtoA(line, 2, src.data(), 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyHtoA(line, 0, src.data(), 6) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyHtoA(line, 252, src.data(), 8) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyAtoH(back.data(), line, 256, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyAtoD(dev, line, 0, 260) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoA(line, 0, dev + 200, 64) == CUDA_ERROR_INVALID_VALUE);  // past the allocation
  CHECK(cuMemcpyHtoA(nullptr, 0, src.data(), 4) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(other) == CUDA_SUCCESS);
  CHECK(cuMemcpyAtoA(line, 0, other, 0, 4) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(line) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: 2D and 3D copies to and from arrays", "[driver][copies][arrays]") {
  primary_context();
  // A 2D array of 16 x 8 two-channel 16-bit elements: rows of 64 bytes.
  const CUarray plane = make_array(16, 8, 0, CU_AD_FORMAT_UNSIGNED_INT16, 2);
  const auto src = pattern(64 * 8, 9);
  CUDA_MEMCPY2D in{};
  in.srcMemoryType = CU_MEMORYTYPE_HOST;
  in.srcHost = src.data();
  in.srcPitch = 64;
  in.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  in.dstArray = plane;
  in.WidthInBytes = 64;
  in.Height = 8;
  REQUIRE(cuMemcpy2D(&in) == CUDA_SUCCESS);
  // Out again: 3 rows of 2 elements from element (4, 5), to a pitched host block.
  std::vector<unsigned char> back(3 * 20, 0);
  CUDA_MEMCPY2D out{};
  out.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  out.srcArray = plane;
  out.srcXInBytes = 16;
  out.srcY = 5;
  out.dstMemoryType = CU_MEMORYTYPE_HOST;
  out.dstHost = back.data();
  out.dstPitch = 20;
  out.WidthInBytes = 8;
  out.Height = 3;
  REQUIRE(cuMemcpy2D(&out) == CUDA_SUCCESS);
  for (size_t y = 0; y < 3; ++y) CHECK(std::memcmp(back.data() + y * 20, src.data() + (5 + y) * 64 + 16, 8) == 0);
  out.srcY = 6;  // rows 6..8 of 8
  CHECK(cuMemcpy2D(&out) == CUDA_ERROR_INVALID_VALUE);
  out.srcY = 5;
  out.srcXInBytes = 58;  // not a whole element
  CHECK(cuMemcpy2D(&out) == CUDA_ERROR_INVALID_VALUE);

  // A 3D array of 4 x 3 x 5 bytes: slice 2..3, row 1..2 written, then the whole array read back.
  const CUarray volume = make_array(4, 3, 5, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  const auto block = pattern(2 * 2 * 4, 100);
  CUDA_MEMCPY3D t = host_to_array_3d(block.data(), 4, 2, volume, 4, 2, 2);
  t.dstY = 1;
  t.dstZ = 2;
  REQUIRE(cuMemcpy3D(&t) == CUDA_SUCCESS);
  std::vector<unsigned char> all(4 * 3 * 5, 0xff);
  CUDA_MEMCPY3D r = array_to_host_3d(volume, all.data(), 4, 3, 4, 3, 5);
  REQUIRE(cuMemcpy3D_v2_ptds(&r) == CUDA_SUCCESS);
  for (size_t z = 0; z < 5; ++z) {
    for (size_t y = 0; y < 3; ++y) {
      for (size_t x = 0; x < 4; ++x) {
        const bool inside = z >= 2 && z < 4 && y >= 1;
        REQUIRE(all[(z * 3 + y) * 4 + x] == (inside ? block[((z - 2) * 2 + (y - 1)) * 4 + x] : 0));
      }
    }
  }
  r.Depth = 6;
  CHECK(cuMemcpy3D(&r) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(volume) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(plane) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: an array destroyed while a copy to it is queued", "[driver][copies][arrays]") {
  primary_context();
  const CUstream stream = new_stream();
  const CUarray line = make_array(1024, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  const auto src = pattern(1024);
  REQUIRE(cuMemcpyHtoAAsync(line, 0, src.data(), 1024, stream) == CUDA_SUCCESS);
  std::vector<unsigned char> back(1024, 0);
  REQUIRE(cuMemcpyAtoHAsync(back.data(), line, 0, 1024, stream) == CUDA_SUCCESS);
  // Destroying does not wait, and the queued copies still have the bytes.
  REQUIRE(cuArrayDestroy(line) == CUDA_SUCCESS);
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(back == src);
  CHECK(cuMemcpyAtoHAsync_v2_ptsz(back.data(), line, 0, 4, stream) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: synchronous array copies from the host wait, device ones only queue", "[driver][copies]") {
  primary_context();
  // The legacy stream is blocked by a host function on a blocking stream it waits for.
  CUstream blocker = nullptr;
  REQUIRE(cuStreamCreate(&blocker, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  const CUarray line = make_array(256, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  const CUdeviceptr dev = allocate(256);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(blocker, Gate::wait, &gate) == CUDA_SUCCESS);
  // Array to device is device to device: queued behind the gate, the call returns at once.
  REQUIRE(cuMemcpyAtoD(dev, line, 0, 256) == CUDA_SUCCESS);
  CHECK(!gate.ran());
  gate.open();
  // Host to array waits for the copy, so it has run (and the gate before it) when it returns.
  const auto src = pattern(256);
  REQUIRE(cuMemcpyHtoA_v2_ptds(line, 0, src.data(), 256) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyHtoA(line, 0, src.data(), 256) == CUDA_SUCCESS);
  CHECK(gate.ran());
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(blocker) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(line) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: cuMemcpy3DPeer between two devices' contexts", "[driver][copies]") {
  CUcontext ctx0 = primary_context();
  CUcontext ctx1 = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx1) == CUDA_SUCCESS);
  const CUdeviceptr far = allocate(512);
  REQUIRE(cuMemsetD8(far, 0, 512) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);  // sets only queue, and the copies below are another context's
  REQUIRE(cuCtxSetCurrent(ctx0) == CUDA_SUCCESS);
  const CUdeviceptr near = allocate(512);
  const auto src = pattern(512, 11);
  REQUIRE(cuMemcpyHtoD(near, src.data(), 512) == CUDA_SUCCESS);
  CUDA_MEMCPY3D_PEER p{};
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = near;
  p.srcContext = ctx0;
  p.srcPitch = 64;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = far;
  p.dstContext = ctx1;
  p.dstPitch = 128;
  p.WidthInBytes = 32;
  p.Height = 4;
  p.Depth = 1;
  REQUIRE(cuMemcpy3DPeer(&p) == CUDA_SUCCESS);
  CUstream stream = new_stream();
  p.dstXInBytes = 64;
  REQUIRE(cuMemcpy3DPeerAsync(&p, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  const auto got = read_back(far, 512);
  for (size_t y = 0; y < 4; ++y) {
    CHECK(std::memcmp(got.data() + y * 128, src.data() + y * 64, 32) == 0);
    CHECK(std::memcmp(got.data() + y * 128 + 64, src.data() + y * 64, 32) == 0);
    CHECK(got[y * 128 + 32] == 0);
  }
  p.dstContext = nullptr;
  CHECK(cuMemcpy3DPeer(&p) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuMemcpy3DPeer(nullptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(near) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(far) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: captured 2D copies and sets become graph nodes", "[driver][copies][graphs]") {
  primary_context();
  const CUstream stream = new_stream();
  constexpr size_t kPitch = 32;
  const CUdeviceptr dev = allocate(kPitch * 4);
  REQUIRE(cuMemsetD8(dev, 0, kPitch * 4) == CUDA_SUCCESS);
  auto src = pattern(8 * 2, 40);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUDA_MEMCPY2D c = host_to_device_2d(dev, kPitch, 4, 1, src.data(), 8, 8, 2);
  REQUIRE(cuMemcpy2DAsync(&c, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD2D16Async(dev + 3 * kPitch, kPitch, 0x7777, 2, 1, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CHECK(read_back(dev, kPitch * 4) == std::vector<unsigned char>(kPitch * 4, 0));  // captured, not run
  size_t count = 2;
  CUgraphNode nodes[2] = {};
  REQUIRE(cuGraphGetNodes(graph, nodes, &count) == CUDA_SUCCESS);
  REQUIRE(count == 2);
  CUDA_MEMCPY3D params{};
  REQUIRE(cuGraphMemcpyNodeGetParams(nodes[0], &params) == CUDA_SUCCESS);
  CHECK((params.dstXInBytes == 4 && params.dstY == 1 && params.dstPitch == kPitch && params.Height == 2 &&
         params.Depth == 1 && params.srcHost == src.data()));
  CUDA_MEMSET_NODE_PARAMS set{};
  REQUIRE(cuGraphMemsetNodeGetParams(nodes[1], &set) == CUDA_SUCCESS);
  CHECK((set.elementSize == 2 && set.width == 2 && set.value == 0x7777));
  // A captured source is read when the graph runs.
  const auto sent = pattern(8 * 2, 90);
  src = sent;
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  const auto got = read_back(dev, kPitch * 4);
  CHECK(std::memcmp(got.data() + kPitch + 4, sent.data(), 8) == 0);
  CHECK(std::memcmp(got.data() + 2 * kPitch + 4, sent.data() + 8, 8) == 0);
  CHECK((got[3 * kPitch] == 0x77 && got[3 * kPitch + 3] == 0x77 && got[3 * kPitch + 4] == 0));
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: cuGetProcAddress answers the 2D/3D, array and 2D set entry points", "[driver][copies]") {
  primary_context();
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  REQUIRE(cuGetProcAddress_v2("cuMemcpy2D", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemcpy2D_v2));
  REQUIRE(cuGetProcAddress_v2("cuMemcpy3DAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status) ==
          CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemcpy3DAsync_v2_ptsz));
  REQUIRE(cuGetProcAddress_v2("cuMemcpyAtoH", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemcpyAtoH_v2));
  REQUIRE(cuGetProcAddress_v2("cuMemsetD2D32Async", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemsetD2D32Async));
  REQUIRE(cuGetProcAddress_v2("cuMemcpy3DPeer", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemcpy3DPeer));
  // The 32-bit v1 form is not simulated: not found rather than a function of another signature.
  CHECK(cuGetProcAddress_v2("cuMemcpy2D", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_ERROR_NOT_FOUND);
}

namespace {

CUmemcpyAttributes access(CUmemcpySrcAccessOrder order) {
  CUmemcpyAttributes a{};
  a.srcAccessOrder = order;
  return a;
}

}  // namespace

TEST_CASE("driver copies: batches run in stream order, as one operation", "[driver][copies][batch]") {
  primary_context();
  const CUstream stream = new_stream();
  const CUdeviceptr dev = allocate(1024);
  REQUIRE(cuMemsetD8(dev, 0, 1024) == CUDA_SUCCESS);
  auto first = pattern(64, 1), second = pattern(32, 100);
  std::vector<unsigned char> back(64, 0);
  CUdeviceptr dsts[3] = {dev, dev + 512, reinterpret_cast<CUdeviceptr>(back.data())};
  CUdeviceptr srcs[3] = {reinterpret_cast<CUdeviceptr>(first.data()), reinterpret_cast<CUdeviceptr>(second.data()),
                         dev + 256};
  size_t sizes[3] = {64, 32, 64};
  // Copies 0 and 1 read their sources in stream order, copy 2 (from device memory) at the call.
  CUmemcpyAttributes attrs[2] = {access(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM),
                                 access(CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL)};
  size_t starts[2] = {0, 2};
  REQUIRE(cuMemcpyHtoD(dev + 256, pattern(64, 200).data(), 64) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, starts, 2, stream) == CUDA_SUCCESS);
  // What the stream-ordered sources hold when the batch runs is copied; the other was read already.
  const auto sent = pattern(64, 50);
  first = sent;
  REQUIRE(cuMemsetD8(dev + 256, 0, 64) == CUDA_SUCCESS);
  CHECK(back == std::vector<unsigned char>(64, 0));
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(read_back(dev, 64) == sent);
  CHECK(read_back(dev + 512, 32) == second);
  CHECK(back == pattern(64, 200));

  // The per-thread form takes stream 0 as the thread's stream; the legacy stream is refused.
  REQUIRE(cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, 2, attrs, starts, 1, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, starts, 1, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, starts, 1, CU_STREAM_LEGACY) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: batch refusals and the failing copy's index", "[driver][copies][batch]") {
  primary_context();
  const CUstream stream = new_stream();
  const CUdeviceptr dev = allocate(256);
  std::vector<unsigned char> host(256);
  CUdeviceptr dsts[2] = {dev, dev + 128};
  CUdeviceptr srcs[2] = {reinterpret_cast<CUdeviceptr>(host.data()), reinterpret_cast<CUdeviceptr>(host.data())};
  size_t sizes[2] = {128, 128};
  CUmemcpyAttributes attrs[2] = {access(CU_MEMCPY_SRC_ACCESS_ORDER_STREAM), access(CU_MEMCPY_SRC_ACCESS_ORDER_ANY)};
  size_t starts[2] = {0, 1};
  REQUIRE(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, starts, 2, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 0, attrs, starts, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, starts, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, attrs, starts, 2, stream) == CUDA_ERROR_INVALID_VALUE);  // more attrs
  size_t late[2] = {1, 1};  // must start at 0
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, late, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  size_t same[2] = {0, 0};  // must increase
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, same, 2, stream) == CUDA_ERROR_INVALID_VALUE);
  CUmemcpyAttributes invalid = access(CU_MEMCPY_SRC_ACCESS_ORDER_INVALID);
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &invalid, starts, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyBatchAsync(nullptr, srcs, sizes, 2, attrs, starts, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  // 12.8's form names the copy that failed (SIZE_MAX when none in particular), and nothing runs.
  REQUIRE(cuMemsetD8(dev, 0x11, 256) == CUDA_SUCCESS);
  dsts[1] = dev + 200;  // 128 bytes from here overrun the allocation
  size_t failed = 0;
  CHECK(cuMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 2, attrs, starts, 2, &failed, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(failed == 1);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(read_back(dev, 1) == std::vector<unsigned char>{0x11});
  CHECK(cuMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 2, attrs, late, 1, &failed, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(failed == SIZE_MAX);
  // Captured batches are refused here (no graph node stands for one).
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  dsts[1] = dev + 128;
  CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, starts, 2, stream) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: 3D batches between pointers and arrays, in elements", "[driver][copies][batch]") {
  primary_context();
  const CUstream stream = new_stream();
  const CUarray plane = make_array(8, 4, 0, CU_AD_FORMAT_UNSIGNED_INT16, 2);  // 4-byte elements, rows of 32 bytes
  const auto src = pattern(32 * 4, 5);
  std::vector<unsigned char> back(3 * 2 * 4, 0);
  CUDA_MEMCPY3D_BATCH_OP ops[2] = {};
  // Host rows of 8 elements into the array; then 3 x 2 elements from (2, 1) to a packed host block.
  ops[0].src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[0].src.op.ptr.ptr = reinterpret_cast<CUdeviceptr>(src.data());
  ops[0].dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  ops[0].dst.op.array.array = plane;
  ops[0].extent = CUextent3D{8, 4, 1};
  ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  REQUIRE(cuMemcpy3DBatchAsync(1, ops, 0, stream) == CUDA_SUCCESS);
  ops[1].src.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  ops[1].src.op.array.array = plane;
  ops[1].src.op.array.offset = CUoffset3D{2, 1, 0};
  ops[1].dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[1].dst.op.ptr.ptr = reinterpret_cast<CUdeviceptr>(back.data());
  ops[1].extent = CUextent3D{3, 2, 1};
  ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  REQUIRE(cuMemcpy3DBatchAsync(1, &ops[1], 0, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  for (size_t y = 0; y < 2; ++y) CHECK(std::memcmp(back.data() + y * 12, src.data() + (1 + y) * 32 + 8, 12) == 0);

  size_t failed = 0;
  ops[1].extent = CUextent3D{7, 2, 1};  // past the row
  CHECK(cuMemcpy3DBatchAsync_ptsz(2, ops, &failed, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(failed == 1);
  ops[1].extent = CUextent3D{3, 2, 1};
  ops[1].dst.op.ptr.rowLength = 2;  // shorter than the width
  CHECK(memcpy_3d_batch_v1(2, ops, &failed, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  ops[1].dst.op.ptr.rowLength = 0;
  ops[1].extent = CUextent3D{3, 0, 1};
  CHECK(cuMemcpy3DBatchAsync_v2(2, ops, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  ops[1].extent = CUextent3D{3, 2, 1};
  CHECK(cuMemcpy3DBatchAsync_v2(2, ops, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  CHECK(cuMemcpy3DBatchAsync_v2(0, ops, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpy3DBatchAsync_v2(2, ops, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);  // the legacy stream
  const CUarray narrow = make_array(8, 4, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  ops[1].dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;  // array to array of another element size
  ops[1].dst.op.array.array = narrow;
  ops[1].dst.op.array.offset = CUoffset3D{0, 0, 0};
  CHECK(memcpy_3d_batch_v1(2, ops, &failed, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(failed == 1);
  REQUIRE(cuArrayDestroy(narrow) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(plane) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: the levels of a mipmapped array are arrays of their own", "[driver][copies][arrays]") {
  primary_context();
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 16;
  d.Height = 8;
  d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d.NumChannels = 1;
  CUmipmappedArray mipmap = nullptr;
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &d, 3) == CUDA_SUCCESS);
  CUarray levels[3] = {};
  for (unsigned i = 0; i < 3; ++i) REQUIRE(cuMipmappedArrayGetLevel(&levels[i], mipmap, i) == CUDA_SUCCESS);
  CUarray again = nullptr;
  REQUIRE(cuMipmappedArrayGetLevel(&again, mipmap, 1) == CUDA_SUCCESS);
  CHECK(again == levels[1]);
  CUDA_ARRAY3D_DESCRIPTOR got{};
  REQUIRE(cuArray3DGetDescriptor(&got, levels[2]) == CUDA_SUCCESS);
  CHECK((got.Width == 4 && got.Height == 2 && got.Depth == 0));
  // Each level holds its own bytes.
  const auto one = pattern(16 * 8, 1), two = pattern(4 * 2, 200);
  REQUIRE(cuMemcpyHtoA(levels[0], 0, one.data(), 16) == CUDA_SUCCESS);
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = two.data();
  c.srcPitch = 4;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = levels[2];
  c.WidthInBytes = 4;
  c.Height = 2;
  REQUIRE(cuMemcpy2D(&c) == CUDA_SUCCESS);
  c.Height = 3;  // level 2 has two rows
  CHECK(cuMemcpy2D(&c) == CUDA_ERROR_INVALID_VALUE);
  std::vector<unsigned char> back(16, 0);
  REQUIRE(cuMemcpyAtoH(back.data(), levels[0], 0, 16) == CUDA_SUCCESS);
  CHECK(std::memcmp(back.data(), one.data(), 16) == 0);
  REQUIRE(cuMemcpyAtoH(back.data(), levels[2], 0, 4) == CUDA_SUCCESS);
  CHECK(std::memcmp(back.data(), two.data(), 4) == 0);
  CHECK(cuMemcpyAtoH(back.data(), levels[2], 4, 4) == CUDA_ERROR_INVALID_VALUE);  // the 1D copies: the first row

  CHECK(cuMipmappedArrayGetLevel(&again, mipmap, 3) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMipmappedArrayGetLevel(nullptr, mipmap, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArrayDestroy(levels[1]) == CUDA_ERROR_INVALID_VALUE);  // goes with its mipmapped array
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
  CHECK(cuMemcpyAtoH(back.data(), levels[0], 0, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArray3DGetDescriptor(&got, levels[2]) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuMipmappedArrayGetLevel(&again, mipmap, 0) == CUDA_ERROR_INVALID_HANDLE);

  // Levels of a context's mipmapped array go with the context.
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &d, 2) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayGetLevel(&again, mipmap, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxDestroy(ctx) == CUDA_SUCCESS);
  primary_context();
  CHECK(cuArray3DGetDescriptor(&got, again) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("driver copies: graph copy nodes to and from arrays", "[driver][copies][graphs]") {
  CUcontext ctx = primary_context();
  const CUarray plane = make_array(4, 3, 0, CU_AD_FORMAT_FLOAT, 1);  // rows of 16 bytes
  const auto src = pattern(16 * 3, 30);
  std::vector<unsigned char> back(16 * 3, 0);
  const CUDA_MEMCPY3D in = host_to_array_3d(src.data(), 16, 0, plane, 16, 3, 1);
  const CUDA_MEMCPY3D out = array_to_host_3d(plane, back.data(), 16, 0, 16, 3, 1);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode first = nullptr, second = nullptr;
  REQUIRE(cuGraphAddMemcpyNode(&first, graph, nullptr, 0, &in, ctx) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddMemcpyNode(&second, graph, &first, 1, &out, ctx) == CUDA_SUCCESS);
  CUDA_MEMCPY3D past = in;
  past.dstY = 1;  // three rows from row 1 of three
  CUgraphNode bad = nullptr;
  CHECK(cuGraphAddMemcpyNode(&bad, graph, nullptr, 0, &past, ctx) == CUDA_ERROR_INVALID_VALUE);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(back == src);
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(plane) == CUDA_SUCCESS);
}

TEST_CASE("driver copies: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS makes synchronous sets and copies wait",
          "[driver][copies][memory]") {
  primary_context();
  const CUdeviceptr plain = allocate(4096), synced = allocate(4096);
  int value = -1;
  REQUIRE(cuPointerGetAttribute(&value, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, synced) == CUDA_SUCCESS);
  CHECK(value == 0);
  const unsigned int on = 1;
  REQUIRE(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, synced + 100) == CUDA_SUCCESS);
  REQUIRE(cuPointerGetAttribute(&value, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, synced + 4000) == CUDA_SUCCESS);
  CHECK(value == 1);

  // The legacy stream waits for a blocking stream held by a gate, opened a little later.
  CUstream blocker = nullptr;
  REQUIRE(cuStreamCreate(&blocker, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  auto held = [&](const std::function<CUresult()>& call) {
    Gate gate;
    REQUIRE(cuLaunchHostFunc(blocker, Gate::wait, &gate) == CUDA_SUCCESS);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.open();
    });
    REQUIRE(call() == CUDA_SUCCESS);
    const bool waited = gate.ran();
    opener.join();
    REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
    return waited;
  };
  CHECK(!held([&] { return cuMemsetD8(plain, 1, 4096); }));  // a set is only queued
  CHECK(held([&] { return cuMemsetD8(synced, 1, 4096); }));  // unless the memory says otherwise
  CHECK(held([&] { return cuMemsetD2D32(synced, 64, 2, 16, 4); }));
  CHECK(held([&] { return cuMemcpyDtoD(synced, plain, 1024); }));
  CHECK(!held([&] { return cuMemsetD8Async(synced, 1, 16, nullptr); }));  // async forms stay async
  const unsigned int off = 0;
  REQUIRE(cuPointerSetAttribute(&off, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, synced) == CUDA_SUCCESS);
  CHECK(!held([&] { return cuMemsetD8(synced, 1, 4096); }));

  CHECK(cuPointerSetAttribute(nullptr, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, synced) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_BUFFER_ID, synced) == CUDA_ERROR_INVALID_VALUE);
  std::vector<unsigned char> host(64);
  CHECK(cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(host.data())) ==
        CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamDestroy(blocker) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(plain) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(synced) == CUDA_SUCCESS);
}
