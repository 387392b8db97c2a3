// CUDA arrays through the simulated runtime: cudaMallocArray, cudaMalloc3DArray,
// cudaMallocMipmappedArray and their frees, over the driver's arrays (sizes are the driver's:
// rows padded to 512 bytes, each array rounded up to 2 MiB).
#include <catch2/catch.hpp>

#include "runtime_support.h"

using namespace runtime_test;

namespace {

cudaChannelFormatDesc channels(int x, int y, int z, int w, cudaChannelFormatKind kind) {
  cudaChannelFormatDesc desc{};
  desc.x = x;
  desc.y = y;
  desc.z = z;
  desc.w = w;
  desc.f = kind;
  return desc;
}

cudaExtent extent_of(size_t width, size_t height, size_t depth) {
  cudaExtent extent{};
  extent.width = width;
  extent.height = height;
  extent.depth = depth;
  return extent;
}

size_t free_memory() {
  size_t free = 0, total = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free, &total));
  return free;
}

// The result of cudaMalloc3DArray, freeing what it made; clears the thread's last error.
cudaError_t try_3d(const cudaChannelFormatDesc& desc, cudaExtent extent, unsigned int flags = 0) {
  cudaArray_t array = nullptr;
  const cudaError_t rc = cudaMalloc3DArray(&array, &desc, extent, flags);
  if (rc == cudaSuccess) REQUIRE_CUDA(cudaFreeArray(array));
  cudaGetLastError();
  return rc;
}

}  // namespace

TEST_CASE("runtime: cudaMallocArray holds device memory until cudaFreeArray", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const size_t before = free_memory();
  const cudaChannelFormatDesc float1 = channels(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &float1, 1000, 1000));
  REQUIRE(array != nullptr);
  CHECK(before - free_memory() == 4 * kMiB);  // 4096-byte rows x 1000, in 2 MiB units
  REQUIRE_CUDA(cudaFreeArray(array));
  CHECK(free_memory() == before);
  CHECK(name(cudaFreeArray(array)) == "cudaErrorInvalidValue");  // documented for a bad array
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");
  CHECK_CUDA(cudaFreeArray(nullptr));  // no operation

  // 1D (height 0), four 8-bit unsigned channels, surface load/store.
  const cudaChannelFormatDesc uchar4 = channels(8, 8, 8, 8, cudaChannelFormatKindUnsigned);
  REQUIRE_CUDA(cudaMallocArray(&array, &uchar4, 1 << 20, 0, cudaArraySurfaceLoadStore));
  CHECK(before - free_memory() == 4 * kMiB);
  REQUIRE_CUDA(cudaFreeArray(array));
}

TEST_CASE("runtime: channel descriptors become driver formats", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaExtent extent = extent_of(1024, 1024, 0);
  const size_t before = free_memory();
  // Element sizes: 2 x 16-bit half = 4 bytes -> 4 MiB; 4 x 32-bit signed = 16 bytes -> 16 MiB.
  cudaArray_t half2 = nullptr, int4 = nullptr;
  const cudaChannelFormatDesc half2_desc = channels(16, 16, 0, 0, cudaChannelFormatKindFloat);
  const cudaChannelFormatDesc int4_desc = channels(32, 32, 32, 32, cudaChannelFormatKindSigned);
  REQUIRE_CUDA(cudaMalloc3DArray(&half2, &half2_desc, extent));
  CHECK(before - free_memory() == 4 * kMiB);
  REQUIRE_CUDA(cudaMalloc3DArray(&int4, &int4_desc, extent));
  CHECK(before - free_memory() == 20 * kMiB);
  REQUIRE_CUDA(cudaFreeArray(half2));
  REQUIRE_CUDA(cudaFreeArray(int4));

  // Invalid descriptors: three channels, mixed widths, a gap, unsupported widths, no kind.
  CHECK(name(try_3d(channels(8, 8, 8, 0, cudaChannelFormatKindUnsigned), extent)) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(channels(8, 16, 0, 0, cudaChannelFormatKindUnsigned), extent)) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(channels(8, 0, 8, 0, cudaChannelFormatKindUnsigned), extent)) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(channels(0, 0, 0, 0, cudaChannelFormatKindUnsigned), extent)) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(channels(64, 0, 0, 0, cudaChannelFormatKindSigned), extent)) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(channels(8, 0, 0, 0, cudaChannelFormatKindFloat), extent)) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(channels(32, 0, 0, 0, cudaChannelFormatKindNone), extent)) == "cudaErrorInvalidValue");
  // Kinds the simulator has no layout for.
  CHECK(name(try_3d(channels(8, 0, 0, 0, cudaChannelFormatKindNV12), extent)) == "cudaErrorNotSupported");
  CHECK(name(try_3d(channels(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed1), extent)) ==
        "cudaErrorNotSupported");
  // The driver's shape rules: zero width, a cubemap that is not square, sparse arrays.
  const cudaChannelFormatDesc float1 = channels(32, 0, 0, 0, cudaChannelFormatKindFloat);
  CHECK(name(try_3d(float1, extent_of(0, 16, 0))) == "cudaErrorInvalidValue");
  CHECK(name(try_3d(float1, extent_of(64, 32, 6), cudaArrayCubemap)) == "cudaErrorInvalidValue");
  CHECK_CUDA(try_3d(float1, extent_of(64, 64, 6), cudaArrayCubemap));
  CHECK_CUDA(try_3d(float1, extent_of(64, 64, 3), cudaArrayLayered));
  CHECK(name(try_3d(float1, extent_of(64, 64, 0), cudaArraySparse)) == "cudaErrorNotSupported");
  cudaArray_t array = nullptr;
  CHECK(name(cudaMalloc3DArray(nullptr, &float1, extent, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMalloc3DArray(&array, nullptr, extent, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMallocArray(&array, nullptr, 16, 16)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  CHECK(free_memory() == before);
}

TEST_CASE("runtime: mipmapped arrays", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const size_t before = free_memory();
  const cudaChannelFormatDesc float1 = channels(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaMipmappedArray_t mipmap = nullptr;
  // All 11 levels of 1024 x 1024 floats: 5,635,584 bytes -> 6 MiB.
  REQUIRE_CUDA(cudaMallocMipmappedArray(&mipmap, &float1, extent_of(1024, 1024, 0), 11));
  CHECK(before - free_memory() == 6 * kMiB);
  REQUIRE_CUDA(cudaFreeMipmappedArray(mipmap));
  CHECK(free_memory() == before);
  CHECK(name(cudaFreeMipmappedArray(mipmap)) == "cudaErrorInvalidValue");
  CHECK_CUDA(cudaFreeMipmappedArray(nullptr));
  CHECK(name(cudaMallocMipmappedArray(nullptr, &float1, extent_of(16, 16, 0), 2)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMallocMipmappedArray(&mipmap, &float1, extent_of(0, 16, 0), 2)) == "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: arrays that do not fit are cudaErrorMemoryAllocation", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(1));  // 2 GiB
  const cudaChannelFormatDesc float4 = channels(32, 32, 32, 32, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  // 16384 x 16384 x 16 bytes = 4 GiB.
  CHECK(name(cudaMallocArray(&array, &float4, 16384, 16384)) == "cudaErrorMemoryAllocation");
  CHECK(name(cudaGetLastError()) == "cudaErrorMemoryAllocation");
  REQUIRE_CUDA(cudaSetDevice(0));
}

TEST_CASE("runtime: array information and memory requirements", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaChannelFormatDesc half2 = channels(16, 16, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMalloc3DArray(&array, &half2, extent_of(8, 4, 3), cudaArraySurfaceLoadStore));
  cudaChannelFormatDesc desc{};
  cudaExtent extent{};
  unsigned flags = 0;
  REQUIRE_CUDA(cudaArrayGetInfo(&desc, &extent, &flags, array));
  CHECK((desc.x == 16 && desc.y == 16 && desc.z == 0 && desc.w == 0 && desc.f == cudaChannelFormatKindFloat));
  CHECK((extent.width == 8 && extent.height == 4 && extent.depth == 3));
  CHECK(flags == cudaArraySurfaceLoadStore);
  REQUIRE_CUDA(cudaArrayGetInfo(nullptr, &extent, nullptr, array));  // any output may be NULL
  const cudaChannelFormatDesc int4 = channels(32, 32, 32, 32, cudaChannelFormatKindSigned);
  cudaArray_t plane = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&plane, &int4, 16, 2));
  REQUIRE_CUDA(cudaGetChannelDesc(&desc, plane));
  CHECK((desc.x == 32 && desc.w == 32 && desc.f == cudaChannelFormatKindSigned));
  REQUIRE_CUDA(cudaArrayGetInfo(nullptr, &extent, nullptr, plane));
  CHECK(extent.depth == 0);  // a 2D array
  CHECK(name(cudaGetChannelDesc(nullptr, plane)) == "cudaErrorInvalidValue");

  // Requirements: deferred-mapping arrays only, as the driver answers.
  cudaArrayMemoryRequirements needs{};
  CHECK(name(cudaArrayGetMemoryRequirements(&needs, array, 0)) == "cudaErrorInvalidValue");
  cudaArray_t deferred = nullptr;
  REQUIRE_CUDA(cudaMalloc3DArray(&deferred, &half2, extent_of(8, 4, 3), cudaArrayDeferredMapping));
  REQUIRE_CUDA(cudaArrayGetMemoryRequirements(&needs, deferred, 0));
  CHECK((needs.size == 2 * kMiB && needs.alignment == 2 * kMiB));
  CHECK(name(cudaArrayGetMemoryRequirements(&needs, deferred, 9)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaArrayGetMemoryRequirements(nullptr, deferred, 0)) == "cudaErrorInvalidValue");
  cudaMipmappedArray_t mipmap = nullptr;
  REQUIRE_CUDA(cudaMallocMipmappedArray(&mipmap, &half2, extent_of(64, 64, 0), 3, cudaArrayDeferredMapping));
  REQUIRE_CUDA(cudaMipmappedArrayGetMemoryRequirements(&needs, mipmap, 0));
  CHECK((needs.size == 2 * kMiB && needs.alignment == 2 * kMiB));

  REQUIRE_CUDA(cudaFreeMipmappedArray(mipmap));
  REQUIRE_CUDA(cudaFreeArray(deferred));
  REQUIRE_CUDA(cudaFreeArray(plane));
  REQUIRE_CUDA(cudaFreeArray(array));
  CHECK(name(cudaArrayGetInfo(&desc, &extent, &flags, array)) == "cudaErrorInvalidValue");
}

TEST_CASE("runtime: mipmapped array levels", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaChannelFormatDesc byte = channels(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
  cudaMipmappedArray_t mipmap = nullptr;
  REQUIRE_CUDA(cudaMallocMipmappedArray(&mipmap, &byte, extent_of(32, 16, 0), 4, 0));
  cudaArray_t level = nullptr;
  REQUIRE_CUDA(cudaGetMipmappedArrayLevel(&level, mipmap, 3));
  cudaExtent extent{};
  REQUIRE_CUDA(cudaArrayGetInfo(nullptr, &extent, nullptr, level));
  CHECK((extent.width == 4 && extent.height == 2));
  CHECK(name(cudaGetMipmappedArrayLevel(&level, mipmap, 4)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFreeMipmappedArray(mipmap));
}

TEST_CASE("runtime: no array is sparse or multi-planar", "[runtime][array]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaChannelFormatDesc float1 = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &float1, 64, 64));
  cudaArraySparseProperties properties{};
  CHECK(name(cudaArrayGetSparseProperties(&properties, array)) == "cudaErrorInvalidValue");
  cudaArray_t plane = nullptr;
  CHECK(name(cudaArrayGetPlane(&plane, array, 0)) == "cudaErrorInvalidValue");
  cudaMipmappedArray_t mipmap = nullptr;
  REQUIRE_CUDA(cudaMallocMipmappedArray(&mipmap, &float1, extent_of(64, 64, 0), 2));
  CHECK(name(cudaMipmappedArrayGetSparseProperties(&properties, mipmap)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFreeMipmappedArray(mipmap));
  REQUIRE_CUDA(cudaFreeArray(array));
  CHECK(name(cudaArrayGetPlane(&plane, array, 0)) == "cudaErrorInvalidResourceHandle");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidResourceHandle");
}

TEST_CASE("runtime: the 1D linear texture limit of a channel format", "[runtime][array][device]") {
  int attribute = 0;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&attribute, cudaDevAttrMaxTexture1DLinearWidth, 1));
  size_t width = 0;
  const cudaChannelFormatDesc float4 = cudaCreateChannelDesc(32, 32, 32, 32, cudaChannelFormatKindFloat);
  REQUIRE_CUDA(cudaDeviceGetTexture1DLinearMaxWidth(&width, &float4, 1));
  CHECK((width > 0 && width == static_cast<size_t>(attribute)));
  const cudaChannelFormatDesc three = cudaCreateChannelDesc(8, 8, 8, 0, cudaChannelFormatKindUnsigned);
  CHECK(name(cudaDeviceGetTexture1DLinearMaxWidth(&width, &three, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceGetTexture1DLinearMaxWidth(nullptr, &float4, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceGetTexture1DLinearMaxWidth(&width, nullptr, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceGetTexture1DLinearMaxWidth(&width, &float4, 2)) == "cudaErrorInvalidDevice");
}
