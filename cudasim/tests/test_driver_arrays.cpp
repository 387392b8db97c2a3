// The simulated driver's CUDA arrays and mipmapped arrays: descriptor rules, the device memory they
// hold (rows padded to 512 bytes, each array rounded up to 2 MiB), memory requirements of
// deferred-mapping arrays, destruction (also with their context) and the report's `arrays` counts.
#include "driver_support.h"
#include "report_support.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

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

  // A deferred-mapping array passes the checks, but backing it with memory is not simulated.
  const auto deferred = array_descriptor(64, 64, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING);
  REQUIRE(cuArray3DCreate(&array, &deferred) == CUDA_SUCCESS);
  info.resource.array = array;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_NOT_SUPPORTED);
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
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_NOT_SUPPORTED);
  info.resourceType = CU_RESOURCE_TYPE_LINEAR;
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  info.resourceType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  info.resource.mipmap = mipmap;  // not deferred
  CHECK(cuMemMapArrayAsync(&info, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);
}
