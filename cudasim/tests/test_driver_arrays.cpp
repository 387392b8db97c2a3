// The simulated driver's CUDA arrays and mipmapped arrays: descriptor rules, the device memory they
// hold (rows padded to 512 bytes, each array rounded up to 2 MiB), memory requirements of
// deferred-mapping arrays and the cuMemCreate memory mapped onto them, destruction (also with their
// context) and the report's `arrays` counts.
#include "driver_support.h"
#include "report_support.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

using namespace driver_test;

namespace {

size_t free_memory() {
  size_t free = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
  return free;
}

CUresult create_3d(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  CUarray array = nullptr;
  CUresult rc = cuArray3DCreate(&array, &desc);
  if (rc == CUDA_SUCCESS) REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  return rc;
}

// The device memory an array of `desc` takes, measured through cuMemGetInfo.
size_t charge_of(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  const size_t before = free_memory();
  CUarray array = nullptr;
  REQUIRE(cuArray3DCreate(&array, &desc) == CUDA_SUCCESS);
  const size_t after = free_memory();
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  return before - after;
}

size_t mipmapped_charge_of(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned levels) {
  const size_t before = free_memory();
  CUmipmappedArray array = nullptr;
  REQUIRE(cuMipmappedArrayCreate(&array, &desc, levels) == CUDA_SUCCESS);
  const size_t after = free_memory();
  REQUIRE(cuMipmappedArrayDestroy(array) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  return before - after;
}

// Device 0 memory of `size` bytes from cuMemCreate.
CUmemGenericAllocationHandle create_physical(size_t size, bool exportable = false) {
  CUmemAllocationProp prop{};
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  REQUIRE(cuMemCreate(&handle, size, &prop, 0) == CUDA_SUCCESS);
  return handle;
}

// The whole of `handle` (`size` bytes) at a new address, readable and writable by device 0.
CUdeviceptr map_physical(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr va = 0;
  REQUIRE(cuMemAddressReserve(&va, size, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cuMemMap(va, size, 0, handle, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  REQUIRE(cuMemSetAccess(va, size, &access, 1) == CUDA_SUCCESS);
  return va;
}

void unmap_physical(CUdeviceptr va, size_t size) {
  REQUIRE(cuMemUnmap(va, size) == CUDA_SUCCESS);
  REQUIRE(cuMemAddressFree(va, size) == CUDA_SUCCESS);
}

// What the mapping tests start from: device 0's primary context current, a stream of it, and the
// device's free memory before the test allocates any.
struct MappingTest {
  MappingTest() { primary_context(); }
  ~MappingTest() { cuStreamDestroy(stream); }
  MappingTest(const MappingTest&) = delete;
  MappingTest& operator=(const MappingTest&) = delete;
  CUstream stream = non_blocking_stream();
  size_t before = free_memory();
};

// A new 2D deferred-mapping array (no memory until mapped).
CUarray deferred_2d(size_t width, size_t height, CUarray_format format, unsigned channels) {
  const auto desc = array_descriptor(width, height, 0, format, channels, CUDA_ARRAY3D_DEFERRED_MAPPING);
  CUarray array = nullptr;
  REQUIRE(cuArray3DCreate(&array, &desc) == CUDA_SUCCESS);
  return array;
}

// One cuMemMapArrayAsync entry for device 0: a map of `handle` at `offset`, or (handle 0) an unmap.
CUarrayMapInfo map_entry(CUresourcetype type, void* resource, CUmemGenericAllocationHandle handle,
                         unsigned long long offset) {
  CUarrayMapInfo info{};
  info.resourceType = type;
  if (type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    info.resource.mipmap = static_cast<CUmipmappedArray>(resource);
  } else {
    info.resource.array = static_cast<CUarray>(resource);
  }
  // Ignored for deferred-mapping arrays, as documented.
  info.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL;
  info.subresource.miptail.offset = 12345;
  info.memOperationType = handle != 0 ? CU_MEM_OPERATION_TYPE_MAP : CU_MEM_OPERATION_TYPE_UNMAP;
  info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  info.memHandle.memHandle = handle;
  info.offset = offset;
  info.deviceBitMask = 1;
  return info;
}

// A 2D copy of `height` rows of `row_bytes` between host memory and level 0 of `array`.
CUresult copy_rows(CUarray array, void* host, size_t row_bytes, size_t height, bool to_array,
                   CUstream stream = nullptr) {
  CUDA_MEMCPY2D p{};
  if (to_array) {
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = host;
    p.srcPitch = row_bytes;
    p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    p.dstArray = array;
  } else {
    p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    p.srcArray = array;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = host;
    p.dstPitch = row_bytes;
  }
  p.WidthInBytes = row_bytes;
  p.Height = height;
  return cuMemcpy2DAsync(&p, stream);
}

// Bytes 0, 1, 2, ... (mod 251) from `seed` on.
std::vector<unsigned char> pattern(size_t bytes, unsigned seed) {
  std::vector<unsigned char> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>((i + seed) % 251);
  return out;
}

}  // namespace

TEST_CASE("a 2D array holds device memory until destroyed", "[driver][arrays]") {
  primary_context();
  const size_t before = free_memory();
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 1000;
  desc.Height = 1000;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr;
  REQUIRE(cuArrayCreate(&array, &desc) == CUDA_SUCCESS);
  REQUIRE(array != nullptr);
  // Rows of 4000 bytes padded to 4096, 1000 rows: 4,096,000 bytes, charged in 2 MiB units.
  CHECK(before - free_memory() == 4 * kMiB);

  CUDA_ARRAY_DESCRIPTOR got{};
  REQUIRE(cuArrayGetDescriptor(&got, array) == CUDA_SUCCESS);
  CHECK(got.Width == 1000);
  CHECK(got.Height == 1000);
  CHECK(got.Format == CU_AD_FORMAT_FLOAT);
  CHECK(got.NumChannels == 1);
  CUDA_ARRAY3D_DESCRIPTOR got3d{};
  got3d.Depth = 99;
  got3d.Flags = 99;
  REQUIRE(cuArray3DGetDescriptor(&got3d, array) == CUDA_SUCCESS);
  CHECK(got3d.Width == 1000);
  CHECK(got3d.Height == 1000);
  CHECK(got3d.Depth == 0);
  CHECK(got3d.Flags == 0);
  CHECK(cuArrayGetDescriptor(nullptr, array) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArray3DGetDescriptor(nullptr, array) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  // The handle is gone.
  CHECK(cuArrayDestroy(array) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuArrayGetDescriptor(&got, array) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuArray3DGetDescriptor(&got3d, array) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuArrayDestroy(nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuArrayDestroy(reinterpret_cast<CUarray>(0x1000)) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("array sizes: element size, padded rows, layers and depth, 2 MiB units", "[driver][arrays]") {
  primary_context();
  // 1D: one row (100 bytes, padded to 512) in a 2 MiB unit.
  CHECK(charge_of(array_descriptor(100, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1)) == 2 * kMiB);
  // 2D, 16-byte elements (4 x 32-bit): 1024 x 16 = 16 KiB rows, 1024 rows = 16 MiB.
  CHECK(charge_of(array_descriptor(1024, 1024, 0, CU_AD_FORMAT_UNSIGNED_INT32, 4)) == 16 * kMiB);
  // 2 x 16-bit: rows of 4 x 300 = 1200 bytes, padded to 1536; 1536 x 3000 = 4,608,000 -> 6 MiB.
  CHECK(charge_of(array_descriptor(300, 3000, 0, CU_AD_FORMAT_HALF, 2)) == 6 * kMiB);
  // 3D: rows of 2048 bytes x 512 x 16 = 16 MiB, of 8192 bytes x 512 x 32 = 128 MiB; 1D layered:
  // 4 layers of one 4 MiB row.
  CHECK(charge_of(array_descriptor(512, 512, 16, CU_AD_FORMAT_SIGNED_INT8, 4)) == 16 * kMiB);
  CHECK(charge_of(array_descriptor(2048, 512, 32, CU_AD_FORMAT_FLOAT, 1)) == 128 * kMiB);
  CHECK(charge_of(array_descriptor(1 << 20, 0, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED)) == 16 * kMiB);
  // A cubemap: six 1024 x 1024 faces of 4 bytes = 24 MiB; layered: two cubemaps.
  CHECK(charge_of(array_descriptor(1024, 1024, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP)) == 24 * kMiB);
  CHECK(charge_of(array_descriptor(1024, 1024, 12, CU_AD_FORMAT_FLOAT, 1,
                             CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED)) == 48 * kMiB);
  // Accepted flags that change nothing here.
  CHECK(charge_of(array_descriptor(1000, 1000, 0, CU_AD_FORMAT_FLOAT, 1,
                             CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_TEXTURE_GATHER)) == 4 * kMiB);
}

TEST_CASE("array descriptors are validated as cuArray3DCreate documents", "[driver][arrays]") {
  primary_context();
  CUarray array = nullptr;
  const auto good = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1);
  CHECK(cuArray3DCreate(nullptr, &good) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArray3DCreate(&array, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArrayCreate(&array, nullptr) == CUDA_ERROR_INVALID_VALUE);
  // Channels: 1, 2 or 4.
  for (unsigned channels : {0u, 3u, 5u, 8u}) {
    INFO(channels);
    CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, channels)) == CUDA_ERROR_INVALID_VALUE);
  }
  // Zero width; no depth without height (unless layered); a value that is no format.
  CHECK(create_3d(array_descriptor(0, 64, 0, CU_AD_FORMAT_FLOAT, 1)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 0, 5, CU_AD_FORMAT_FLOAT, 1)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 64, 0, static_cast<CUarray_format>(0x77), 1)) == CUDA_ERROR_INVALID_VALUE);
  // Layered: Depth is the number of layers, at least one.
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 0, 3, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED)) == CUDA_SUCCESS);
  // Cubemaps: square faces, six of them (a multiple of six when layered).
  CHECK(create_3d(array_descriptor(64, 32, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 64, 5, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 64, 12, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 64, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP)) == CUDA_SUCCESS);
  CHECK(create_3d(array_descriptor(64, 64, 9, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED)) ==
        CUDA_ERROR_INVALID_VALUE);
  // Texture gather: 2D only.
  CHECK(create_3d(array_descriptor(64, 64, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_TEXTURE_GATHER)) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(create_3d(array_descriptor(64, 0, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_TEXTURE_GATHER)) ==
        CUDA_ERROR_INVALID_VALUE);
  // Unknown flag bits.
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0x1000)) == CUDA_ERROR_INVALID_VALUE);
  // Documented but not simulated: formats without a plain layout, sparse arrays.
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_NV12, 1)) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_BC1_UNORM, 4)) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SPARSE)) == CUDA_ERROR_NOT_SUPPORTED);
  int sparse = -1;
  REQUIRE(cuDeviceGetAttribute(&sparse, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(sparse == 0);
  // Extents no device could hold.
  const size_t huge = size_t{1} << 40;
  CHECK(create_3d(array_descriptor(huge, huge, huge, CU_AD_FORMAT_FLOAT, 4)) == CUDA_ERROR_INVALID_VALUE);
  // cuArrayGetDescriptor cannot describe a 3D or layered array.
  const auto volume = array_descriptor(8, 8, 8, CU_AD_FORMAT_FLOAT, 1);
  REQUIRE(cuArray3DCreate(&array, &volume) == CUDA_SUCCESS);
  CUDA_ARRAY_DESCRIPTOR flat{};
  CHECK(cuArrayGetDescriptor(&flat, array) == CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY3D_DESCRIPTOR got{};
  REQUIRE(cuArray3DGetDescriptor(&got, array) == CUDA_SUCCESS);
  CHECK(got.Depth == 8);
  CHECK(cuArrayDestroy(array) == CUDA_SUCCESS);
}

TEST_CASE("mipmapped arrays hold every level", "[driver][arrays]") {
  primary_context();
  // 1024 x 1024 floats: 4 MiB + 1 MiB + 256 KiB + 64 KiB + 32 KiB + ... + 512 B (11 levels, rows
  // padded to 512 bytes) = 5,635,584 bytes -> 6 MiB. Levels are clamped to [1, 11].
  const auto square = array_descriptor(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1);
  CHECK(mipmapped_charge_of(square, 11) == 6 * kMiB);
  CHECK(mipmapped_charge_of(square, 1000) == 6 * kMiB);
  CHECK(mipmapped_charge_of(square, 1) == 4 * kMiB);
  CHECK(mipmapped_charge_of(square, 0) == 4 * kMiB);
  // Layers keep their count at every level: 16 MiB + 4 MiB + 1 MiB + 510 KiB -> 22 MiB.
  CHECK(mipmapped_charge_of(array_descriptor(1024, 1024, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), 20) ==
        22 * kMiB);
  // A 3D array's depth halves: 32 MiB + 8 MiB + 2 MiB + 682.5 KiB -> 44 MiB.
  CHECK(mipmapped_charge_of(array_descriptor(256, 256, 256, CU_AD_FORMAT_UNSIGNED_INT8, 1), 9) == 44 * kMiB);

  CUmipmappedArray mipmap = nullptr;
  CHECK(cuMipmappedArrayCreate(nullptr, &square, 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMipmappedArrayCreate(&mipmap, nullptr, 2) == CUDA_ERROR_INVALID_VALUE);
  const auto three_channels = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 3);
  CHECK(cuMipmappedArrayCreate(&mipmap, &three_channels, 2) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &square, 2) == CUDA_SUCCESS);
  // Arrays and mipmapped arrays are different objects.
  CHECK(cuArrayDestroy(reinterpret_cast<CUarray>(mipmap)) == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
  CHECK(cuMipmappedArrayDestroy(mipmap) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuMipmappedArrayDestroy(nullptr) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("memory requirements: deferred-mapping arrays hold nothing and report their size",
          "[driver][arrays]") {
  primary_context();
  int deferred_supported = 0;
  REQUIRE(cuDeviceGetAttribute(&deferred_supported, CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 0) ==
          CUDA_SUCCESS);
  CHECK(deferred_supported == 1);
  const auto plain = array_descriptor(300, 3000, 0, CU_AD_FORMAT_HALF, 2);
  const size_t charged = charge_of(plain);
  auto deferred = plain;
  deferred.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
  const size_t before = free_memory();
  CUarray array = nullptr, ordinary = nullptr;
  REQUIRE(cuArray3DCreate(&array, &deferred) == CUDA_SUCCESS);
  CHECK(free_memory() == before);  // no backing memory until mapped
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  req.reserved[0] = 7;
  REQUIRE(cuArrayGetMemoryRequirements(&req, array, 0) == CUDA_SUCCESS);
  CHECK(req.size == charged);
  CHECK(req.alignment == 2 * kMiB);
  CHECK(req.reserved[0] == 0);
  CHECK(cuArrayGetMemoryRequirements(nullptr, array, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArrayGetMemoryRequirements(&req, array, 7) == CUDA_ERROR_INVALID_VALUE);
  // Documented: an array created without CUDA_ARRAY3D_DEFERRED_MAPPING has none.
  REQUIRE(cuArray3DCreate(&ordinary, &plain) == CUDA_SUCCESS);
  CHECK(cuArrayGetMemoryRequirements(&req, ordinary, 0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(ordinary) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  CHECK(cuArrayGetMemoryRequirements(&req, array, 0) == CUDA_ERROR_INVALID_VALUE);

  auto mip_desc = array_descriptor(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING);
  CUmipmappedArray mipmap = nullptr;
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &mip_desc, 11) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  REQUIRE(cuMipmappedArrayGetMemoryRequirements(&req, mipmap, 1) == CUDA_SUCCESS);
  CHECK(req.size == 6 * kMiB);
  CHECK(req.alignment == 2 * kMiB);
  CHECK(cuMipmappedArrayGetMemoryRequirements(&req, reinterpret_cast<CUmipmappedArray>(0x1000), 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMipmappedArrayGetMemoryRequirements(nullptr, mipmap, 0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
}

TEST_CASE("destroying a context destroys its arrays", "[driver][arrays]") {
  CUcontext primary = primary_context();
  const size_t before = free_memory();
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);  // made current
  CUarray array = nullptr;
  CUmipmappedArray mipmap = nullptr;
  const auto desc = array_descriptor(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 4);
  REQUIRE(cuArray3DCreate(&array, &desc) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &desc, 3) == CUDA_SUCCESS);
  CHECK(free_memory() < before);
  REQUIRE(cuCtxDestroy(ctx) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  CHECK(cuArrayDestroy(array) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuMipmappedArrayDestroy(mipmap) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("arrays need cuInit and a current context", "[driver][arrays]") {
  int rc = in_child([] {
    const auto desc = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1);
    CUarray array = nullptr;
    CUmipmappedArray mipmap = nullptr;
    CHILD_CHECK(cuArray3DCreate(&array, &desc) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuMipmappedArrayCreate(&mipmap, &desc, 1) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuArrayDestroy(array) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuArray3DCreate(&array, &desc) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuMipmappedArrayCreate(&mipmap, &desc, 1) == CUDA_ERROR_INVALID_CONTEXT);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("arrays run out of device memory and count as device allocations", "[driver][arrays]") {
  int rc = in_child([] {
    setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
    setenv("CUDASIM_CONTEXT_OVERHEAD", "0", 1);
    CHILD_CHECK(start_primary_context());
    CUarray big = nullptr, other = nullptr;
    const auto gib = array_descriptor(1 << 14, 1 << 14, 0, CU_AD_FORMAT_FLOAT, 1);  // exactly 1 GiB
    const auto half = array_descriptor(1 << 14, 1 << 13, 0, CU_AD_FORMAT_FLOAT, 1);
    CHILD_CHECK(cuArray3DCreate(&big, &gib) == CUDA_SUCCESS);
    CHILD_CHECK(cuArray3DCreate(&other, &half) == CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
    size_t free = 1, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 0);
    CHILD_CHECK(cuArrayDestroy(big) == CUDA_SUCCESS);
    CHILD_CHECK(cuArray3DCreate(&other, &half) == CUDA_SUCCESS);
    CHILD_CHECK(cuArrayDestroy(other) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
  rc = in_child([] {
    setenv("CUDASIM_FAIL_ALLOC_AFTER", "2", 1);
    CHILD_CHECK(start_primary_context());
    const auto desc = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1);
    auto deferred = desc;
    deferred.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
    CUarray first = nullptr, again = nullptr, no_memory = nullptr;
    CUmipmappedArray mipmap = nullptr;
    CHILD_CHECK(cuArray3DCreate(&first, &desc) == CUDA_SUCCESS);         // allocation 1
    CHILD_CHECK(cuArray3DCreate(&no_memory, &deferred) == CUDA_SUCCESS); // takes no memory: not counted
    CHILD_CHECK(cuMipmappedArrayCreate(&mipmap, &desc, 2) == CUDA_SUCCESS);  // allocation 2
    CHILD_CHECK(cuArray3DCreate(&again, &desc) == CUDA_ERROR_OUT_OF_MEMORY);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("array creation and destruction cost the allocation and free latencies", "[driver][arrays]") {
  int rc = in_child([] {
    CHILD_CHECK(start_with_test_latencies());
    const auto desc = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1);
    CUarray array = nullptr;
    CHILD_CHECK(succeeds_slowly([&] { return cuArray3DCreate(&array, &desc); }));
    CHILD_CHECK(succeeds_slowly([&] { return cuArrayDestroy(array); }));
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("cuGetProcAddress answers the array entry points", "[driver][arrays]") {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  REQUIRE(cuGetProcAddress("cuArrayCreate", &fn, 13000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuArrayCreate_v2));
  REQUIRE(cuGetProcAddress("cuArray3DGetDescriptor", &fn, 12000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuArray3DGetDescriptor_v2));
  REQUIRE(cuGetProcAddress("cuMipmappedArrayCreate", &fn, 13000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMipmappedArrayCreate));
  // The 32-bit descriptor forms are not simulated; requirements are new in 11.6.
  CHECK(cuGetProcAddress("cuArrayCreate", &fn, 3000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(cuGetProcAddress("cuArrayGetMemoryRequirements", &fn, 11050, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  REQUIRE(cuGetProcAddress("cuMipmappedArrayGetMemoryRequirements", &fn, 11060, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMipmappedArrayGetMemoryRequirements));
}

TEST_CASE("the report counts arrays per device", "[driver][arrays][report]") {
  const std::string path = "/tmp/cudasim-report-arrays-" + std::to_string(getpid()) + ".json";
  int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CHILD_CHECK(start_primary_context());
    const auto desc = array_descriptor(1000, 1000, 0, CU_AD_FORMAT_FLOAT, 1);  // 4 MiB
    auto deferred = desc;
    deferred.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
    CUarray a = nullptr, b = nullptr, c = nullptr;
    CUmipmappedArray mipmap = nullptr;
    CHILD_CHECK(cuArray3DCreate(&a, &desc) == CUDA_SUCCESS);
    CHILD_CHECK(cuArray3DCreate(&b, &desc) == CUDA_SUCCESS);
    CHILD_CHECK(cuArray3DCreate(&c, &deferred) == CUDA_SUCCESS);
    CHILD_CHECK(cuMipmappedArrayCreate(&mipmap, &desc, 1) == CUDA_SUCCESS);
    CHILD_CHECK(cuArrayDestroy(a) == CUDA_SUCCESS);
    CHILD_CHECK(cuArrayDestroy(b) == CUDA_SUCCESS);
    std::exit(0);  // a normal exit writes the report
  });
  REQUIRE(rc == 0);
  const nlohmann::json report = take_report(path);
  const auto& device = report["devices"][0];
  CHECK(device["arrays"]["creates"] == 4);
  CHECK(device["arrays"]["destroys"] == 2);
  CHECK(device["arrays"]["bytes"] == 4 * kMiB);        // the mipmapped array
  CHECK(device["arrays"]["peak_bytes"] == 12 * kMiB);
  CHECK(device["bytes_reserved"] == 4 * kMiB);         // array memory is device memory taken
  CHECK(device["driver_allocs"] == 0);
  CHECK(report["devices"][1]["arrays"]["creates"] == 0);
}

TEST_CASE("no array is sparse or multi-planar: the documented errors", "[driver][arrays]") {
  primary_context();
  int sparse_supported = 1;
  REQUIRE(cuDeviceGetAttribute(&sparse_supported, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(sparse_supported == 0);
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SPARSE)) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(create_3d(array_descriptor(64, 64, 0, CU_AD_FORMAT_NV12, 1)) == CUDA_ERROR_NOT_SUPPORTED);

  CUarray array = nullptr;
  const auto plain = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1);
  REQUIRE(cuArray3DCreate(&array, &plain) == CUDA_SUCCESS);
  CUDA_ARRAY_SPARSE_PROPERTIES properties{};
  CHECK(cuArrayGetSparseProperties(&properties, array) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuArrayGetSparseProperties(nullptr, array) == CUDA_ERROR_INVALID_VALUE);
  CUarray plane = nullptr;
  CHECK(cuArrayGetPlane(&plane, array, 0) == CUDA_ERROR_INVALID_VALUE);  // not multi-planar
  CHECK(cuArrayGetPlane(nullptr, array, 0) == CUDA_ERROR_INVALID_VALUE);
  CUmipmappedArray mipmap = nullptr;
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &plain, 3) == CUDA_SUCCESS);
  CHECK(cuMipmappedArrayGetSparseProperties(&properties, mipmap) == CUDA_ERROR_INVALID_VALUE);

  // Mapping: the arguments are checked; a plain array is neither sparse nor deferred.
  CUstream stream = non_blocking_stream();
  CUarrayMapInfo info{};
  info.resourceType = CU_RESOURCE_TYPE_ARRAY;
  info.resource.array = array;
  info.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
  info.deviceBitMask = 1;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMapArrayAsync(nullptr, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMapArrayAsync(&info, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMapArrayAsync(&info, 1, reinterpret_cast<CUstream>(0x1000)) == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  CHECK(cuArrayGetPlane(&plane, array, 0) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_HANDLE);

  // A deferred-mapping array passes the checks (test "memory mapped onto a deferred-mapping array"
  // maps it); unmapping one that is not mapped is refused.
  const auto deferred = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING);
  REQUIRE(cuArray3DCreate(&array, &deferred) == CUDA_SUCCESS);
  info.resource.array = array;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.deviceBitMask = 2;  // not the stream's device
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.deviceBitMask = 1;
  info.flags = 1;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.flags = 0;
  info.memOperationType = static_cast<CUmemOperationType>(7);
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
  info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // no such memory handle
  info.resourceType = CU_RESOURCE_TYPE_LINEAR;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.resourceType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  info.resource.mipmap = mipmap;  // not deferred
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE_METHOD(MappingTest, "memory mapped onto a deferred-mapping array holds its bytes",
                 "[driver][arrays][vmm]") {
  // 256 floats x 64 rows: 64 KiB of rows, 2 MiB required, mapped at 2 MiB into 4 MiB of memory.
  CUarray array = deferred_2d(256, 64, CU_AD_FORMAT_FLOAT, 1);
  const size_t row = 256 * 4, rows = 64;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  REQUIRE(cuArrayGetMemoryRequirements(&req, array, 0) == CUDA_SUCCESS);
  REQUIRE(req.size == 2 * kMiB);
  const CUmemGenericAllocationHandle handle = create_physical(4 * kMiB);
  CHECK(free_memory() == before - 4 * kMiB);

  // Unbacked: no copy reaches it.
  auto in = pattern(row * rows, 3);
  std::vector<unsigned char> out(row * rows, 0);
  CHECK(copy_rows(array, in.data(), row, rows, true) == CUDA_ERROR_INVALID_VALUE);

  CUarrayMapInfo map = map_entry(CU_RESOURCE_TYPE_ARRAY, array, handle, req.size);
  REQUIRE(cuMemMapArrayAsync(&map, 1, stream) == CUDA_SUCCESS);
  CHECK(free_memory() == before - 4 * kMiB);  // the allocation's memory, nothing more
  CHECK(cuMemMapArrayAsync(&map, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // already mapped

  // Host -> array -> host on the stream, after the map.
  REQUIRE(copy_rows(array, in.data(), row, rows, true, stream) == CUDA_SUCCESS);
  REQUIRE(copy_rows(array, out.data(), row, rows, false, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(out == in);

  // The same bytes through a virtual address of the same handle (the simulator lays the rows out
  // unpadded from the mapped offset), both ways.
  const CUdeviceptr va = map_physical(handle, 4 * kMiB);
  std::vector<unsigned char> seen(row * rows, 0);
  REQUIRE(cuMemcpyDtoH(seen.data(), va + req.size, seen.size()) == CUDA_SUCCESS);
  CHECK(seen == in);
  std::vector<unsigned char> below(16, 1);
  REQUIRE(cuMemcpyDtoH(below.data(), va, below.size()) == CUDA_SUCCESS);
  CHECK(below == std::vector<unsigned char>(16, 0));  // nothing before the offset was written
  REQUIRE(cuMemsetD8(va + req.size, 0xab, row) == CUDA_SUCCESS);
  REQUIRE(copy_rows(array, out.data(), row, 1, false) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(std::vector<unsigned char>(out.begin(), out.begin() + row) == std::vector<unsigned char>(row, 0xab));

  // Releasing the handle while mapped keeps the memory (as a cuMemMap does); the array still works.
  REQUIRE(cuMemRelease(handle) == CUDA_SUCCESS);
  unmap_physical(va, 4 * kMiB);
  CHECK(free_memory() == before - 4 * kMiB);
  REQUIRE(copy_rows(array, in.data(), row, rows, true) == CUDA_SUCCESS);
  REQUIRE(copy_rows(array, out.data(), row, rows, false) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(out == in);

  // Unmapping detaches it and, with no handle left, frees the memory.
  CUarrayMapInfo unmap = map_entry(CU_RESOURCE_TYPE_ARRAY, array, 0, 0);
  REQUIRE(cuMemMapArrayAsync(&unmap, 1, stream) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  CHECK(copy_rows(array, out.data(), row, rows, false, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMapArrayAsync(&unmap, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // not mapped
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
}

TEST_CASE_METHOD(MappingTest, "mapping a deferred-mapping array: the documented errors",
                 "[driver][arrays][vmm]") {
  CUarray array = deferred_2d(64, 64, CU_AD_FORMAT_FLOAT, 1), other = deferred_2d(64, 64, CU_AD_FORMAT_FLOAT, 1);
  CUarray line = nullptr;
  const auto one_d = array_descriptor(64, 0, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING);
  REQUIRE(cuArray3DCreate(&line, &one_d) == CUDA_SUCCESS);
  const CUmemGenericAllocationHandle handle = create_physical(4 * kMiB);

  CUarrayMapInfo info = map_entry(CU_RESOURCE_TYPE_ARRAY, array, handle, kMiB);
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // offset not 2 MiB aligned
  info.offset = 4 * kMiB;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // past the allocation's end
  info.offset = 0;
  info.memHandle.memHandle = handle + 1000;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // no such handle
  info.memHandle.memHandle = handle;
  info.memHandleType = static_cast<CUmemHandleType>(1);
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  CUarrayMapInfo one_d_map = map_entry(CU_RESOURCE_TYPE_ARRAY, line, handle, 0);
  CHECK(cuMemMapArrayAsync(&one_d_map, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // 2D, layered or 3D only

  // A list is checked whole: the same array twice, or a bad entry after a good one, maps nothing.
  CUarrayMapInfo twice[2] = {info, info};
  twice[1].offset = 2 * kMiB;
  CHECK(cuMemMapArrayAsync(twice, 2, stream) == CUDA_ERROR_INVALID_VALUE);
  CUarrayMapInfo list[2] = {info, map_entry(CU_RESOURCE_TYPE_ARRAY, other, handle, 3 * kMiB)};
  CHECK(cuMemMapArrayAsync(list, 2, stream) == CUDA_ERROR_INVALID_VALUE);
  std::vector<float> row(64, 1.0f);
  CHECK(copy_rows(array, row.data(), 64 * 4, 1, true) == CUDA_ERROR_INVALID_VALUE);  // still unbacked
  // Two arrays in one allocation, at different offsets.
  list[1].offset = 2 * kMiB;
  REQUIRE(cuMemMapArrayAsync(list, 2, stream) == CUDA_SUCCESS);
  CHECK(copy_rows(array, row.data(), 64 * 4, 1, true) == CUDA_SUCCESS);

  // Destroying mapped arrays and releasing the handle frees everything.
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(other) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(line) == CUDA_SUCCESS);
  CHECK(free_memory() == before - 4 * kMiB);
  REQUIRE(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
}

TEST_CASE_METHOD(MappingTest, "a copy queued before an unmap still reaches the mapped memory",
                 "[driver][arrays][vmm]") {
  CUarray array = deferred_2d(256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  const size_t row = 256 * 4, rows = 16;
  const CUmemGenericAllocationHandle handle = create_physical(2 * kMiB);
  const CUdeviceptr va = map_physical(handle, 2 * kMiB);
  CUarrayMapInfo map = map_entry(CU_RESOURCE_TYPE_ARRAY, array, handle, 0);
  REQUIRE(cuMemMapArrayAsync(&map, 1, stream) == CUDA_SUCCESS);

  // The copy lands in the memory though the unmap came before it ran.
  auto in = pattern(row * rows, 9);
  CUarrayMapInfo unmap = map_entry(CU_RESOURCE_TYPE_ARRAY, array, 0, 0);
  {
    Gate gate;
    REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
    REQUIRE(copy_rows(array, in.data(), row, rows, true, stream) == CUDA_SUCCESS);
    REQUIRE(cuMemMapArrayAsync(&unmap, 1, stream) == CUDA_SUCCESS);
    CHECK(copy_rows(array, in.data(), row, rows, true, stream) == CUDA_ERROR_INVALID_VALUE);  // after it
    gate.open();
    REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  }
  std::vector<unsigned char> seen(in.size());
  REQUIRE(cuMemcpyDtoH(seen.data(), va, seen.size()) == CUDA_SUCCESS);
  CHECK(seen == in);
  unmap_physical(va, 2 * kMiB);  // cuMemUnmap waits for all queued work: before the gate below

  // And it keeps the memory while queued, though neither a handle nor any mapping is left.
  REQUIRE(cuMemMapArrayAsync(&map, 1, stream) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(copy_rows(array, in.data(), row, rows, true, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemMapArrayAsync(&unmap, 1, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(free_memory() == before - 2 * kMiB);
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(gate.ran());
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);  // a sweep point: nothing holds the memory now
  CHECK(free_memory() == before);
}

TEST_CASE("a mapped deferred-mapping mipmapped array holds its levels one after another",
          "[driver][arrays][vmm]") {
  primary_context();
  CUstream stream = non_blocking_stream();
  // Level 0: 64 x 64 floats (rows padded to 512 bytes: 32 KiB), level 1: 32 x 32 from 32 KiB on.
  const auto desc = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING);
  CUmipmappedArray mipmap = nullptr;
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &desc, 3) == CUDA_SUCCESS);
  CUarray level0 = nullptr, level1 = nullptr, level2 = nullptr;
  REQUIRE(cuMipmappedArrayGetLevel(&level1, mipmap, 1) == CUDA_SUCCESS);  // before the map
  auto in1 = pattern(32 * 4 * 32, 5);
  CHECK(copy_rows(level1, in1.data(), 32 * 4, 32, true) == CUDA_ERROR_INVALID_VALUE);  // unbacked
  const CUmemGenericAllocationHandle handle = create_physical(2 * kMiB);
  CUarrayMapInfo level_map = map_entry(CU_RESOURCE_TYPE_ARRAY, level1, handle, 0);
  CHECK(cuMemMapArrayAsync(&level_map, 1, stream) == CUDA_ERROR_INVALID_VALUE);  // a level alone
  CUarrayMapInfo map = map_entry(CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, mipmap, handle, 0);
  REQUIRE(cuMemMapArrayAsync(&map, 1, stream) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayGetLevel(&level0, mipmap, 0) == CUDA_SUCCESS);  // after it
  REQUIRE(cuMipmappedArrayGetLevel(&level2, mipmap, 2) == CUDA_SUCCESS);

  auto in0 = pattern(64 * 4 * 64, 1);
  auto in2 = pattern(16 * 4 * 16, 7);
  REQUIRE(copy_rows(level0, in0.data(), 64 * 4, 64, true, stream) == CUDA_SUCCESS);
  REQUIRE(copy_rows(level1, in1.data(), 32 * 4, 32, true, stream) == CUDA_SUCCESS);
  REQUIRE(copy_rows(level2, in2.data(), 16 * 4, 16, true, stream) == CUDA_SUCCESS);
  std::vector<unsigned char> out0(in0.size()), out1(in1.size()), out2(in2.size());
  REQUIRE(copy_rows(level0, out0.data(), 64 * 4, 64, false, stream) == CUDA_SUCCESS);
  REQUIRE(copy_rows(level1, out1.data(), 32 * 4, 32, false, stream) == CUDA_SUCCESS);
  REQUIRE(copy_rows(level2, out2.data(), 16 * 4, 16, false, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(out0 == in0);
  CHECK(out1 == in1);
  CHECK(out2 == in2);
  const CUdeviceptr va = map_physical(handle, 2 * kMiB);
  std::vector<unsigned char> seen(in1.size());
  REQUIRE(cuMemcpyDtoH(seen.data(), va + 64 * 512, seen.size()) == CUDA_SUCCESS);
  CHECK(seen == in1);
  unmap_physical(va, 2 * kMiB);

  CUarrayMapInfo unmap = map_entry(CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, mipmap, 0, 0);
  REQUIRE(cuMemMapArrayAsync(&unmap, 1, stream) == CUDA_SUCCESS);
  CHECK(copy_rows(level0, out0.data(), 64 * 4, 64, false, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(copy_rows(level2, out2.data(), 16 * 4, 16, false, stream) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemRelease(handle) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("exporting memory mapped onto an array keeps the array on the same bytes", "[driver][arrays][vmm]") {
  primary_context();
  CUarray array = deferred_2d(512, 8, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  const size_t row = 512, rows = 8;
  const CUmemGenericAllocationHandle handle = create_physical(2 * kMiB, true);
  CUarrayMapInfo map = map_entry(CU_RESOURCE_TYPE_ARRAY, array, handle, 0);
  REQUIRE(cuMemMapArrayAsync(&map, 1, nullptr) == CUDA_SUCCESS);
  auto in = pattern(row * rows, 11);
  REQUIRE(copy_rows(array, in.data(), row, rows, true) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  // The first export moves the memory to a file of its own: the array's view moves with it.
  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  std::vector<unsigned char> from_file(row * rows, 0);
  CHECK(pread(fd, from_file.data(), from_file.size(), 0) == static_cast<ssize_t>(from_file.size()));
  CHECK(from_file == in);
  auto again = pattern(row * rows, 13);
  REQUIRE(copy_rows(array, again.data(), row, rows, true) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(pread(fd, from_file.data(), from_file.size(), 0) == static_cast<ssize_t>(from_file.size()));
  CHECK(from_file == again);  // written through the array, seen in the exported file
  close(fd);
  REQUIRE(cuMemRelease(handle) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
}
