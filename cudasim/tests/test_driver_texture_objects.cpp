// The simulated driver's texture and surface objects: creation over each resource type, the
// descriptors answered back exactly, the documented refusals of bad descriptors, destruction (also
// with the context) and concurrent use.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

using namespace driver_test;

namespace {

CUarray make_array(size_t width, size_t height, size_t depth, unsigned flags, CUarray_format format = CU_AD_FORMAT_FLOAT,
                   unsigned channels = 1) {
  const CUDA_ARRAY3D_DESCRIPTOR desc = array_descriptor(width, height, depth, format, channels, flags);
  CUarray array = nullptr;
  REQUIRE(cuArray3DCreate(&array, &desc) == CUDA_SUCCESS);
  return array;
}

CUDA_RESOURCE_DESC array_resource(CUarray array) {
  CUDA_RESOURCE_DESC r{};
  r.resType = CU_RESOURCE_TYPE_ARRAY;
  r.res.array.hArray = array;
  return r;
}

CUDA_RESOURCE_DESC linear_resource(CUdeviceptr ptr, size_t bytes) {
  CUDA_RESOURCE_DESC r{};
  r.resType = CU_RESOURCE_TYPE_LINEAR;
  r.res.linear.devPtr = ptr;
  r.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT8;
  r.res.linear.numChannels = 4;
  r.res.linear.sizeInBytes = bytes;
  return r;
}

CUDA_RESOURCE_DESC pitch_resource(CUdeviceptr ptr, size_t width, size_t height, size_t pitch) {
  CUDA_RESOURCE_DESC r{};
  r.resType = CU_RESOURCE_TYPE_PITCH2D;
  r.res.pitch2D.devPtr = ptr;
  r.res.pitch2D.format = CU_AD_FORMAT_HALF;
  r.res.pitch2D.numChannels = 2;
  r.res.pitch2D.width = width;
  r.res.pitch2D.height = height;
  r.res.pitch2D.pitchInBytes = pitch;
  return r;
}

CUDA_TEXTURE_DESC texture_desc(unsigned flags = 0) {
  CUDA_TEXTURE_DESC t{};
  t.addressMode[0] = CU_TR_ADDRESS_MODE_CLAMP;
  t.addressMode[1] = CU_TR_ADDRESS_MODE_BORDER;
  t.addressMode[2] = CU_TR_ADDRESS_MODE_MIRROR;
  t.filterMode = CU_TR_FILTER_MODE_LINEAR;
  t.flags = flags;
  t.maxAnisotropy = 7;
  t.mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR;
  t.mipmapLevelBias = 0.5f;
  t.minMipmapLevelClamp = 0.25f;
  t.maxMipmapLevelClamp = 3.75f;
  t.borderColor[0] = 1.0f;
  t.borderColor[3] = 0.5f;
  return t;
}

// Creates a texture object, or returns the failure (no object then).
CUresult create_texture(const CUDA_RESOURCE_DESC& r, const CUDA_TEXTURE_DESC& t,
                        const CUDA_RESOURCE_VIEW_DESC* view = nullptr) {
  CUtexObject object = 0;
  const CUresult rc = cuTexObjectCreate(&object, &r, &t, view);
  if (rc == CUDA_SUCCESS) REQUIRE(cuTexObjectDestroy(object) == CUDA_SUCCESS);
  return rc;
}

template <typename T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Checks every descriptor of a live texture object against what it was created with.
void check_texture_reads_back(CUtexObject object, const CUDA_RESOURCE_DESC& r, const CUDA_TEXTURE_DESC& t) {
  CUDA_RESOURCE_DESC got_resource;
  std::memset(&got_resource, 0xab, sizeof got_resource);
  REQUIRE(cuTexObjectGetResourceDesc(&got_resource, object) == CUDA_SUCCESS);
  CHECK(same_bytes(got_resource, r));
  CUDA_TEXTURE_DESC got_texture;
  std::memset(&got_texture, 0xab, sizeof got_texture);
  REQUIRE(cuTexObjectGetTextureDesc(&got_texture, object) == CUDA_SUCCESS);
  CHECK(same_bytes(got_texture, t));
}

}  // namespace

TEST_CASE("a texture object over an array answers its descriptors back", "[driver][textures]") {
  primary_context();
  CUarray array = make_array(64, 32, 0, 0);
  const CUDA_RESOURCE_DESC r = array_resource(array);
  const CUDA_TEXTURE_DESC t = texture_desc(CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_READ_AS_INTEGER);
  CUDA_RESOURCE_VIEW_DESC view{};
  view.format = CU_RES_VIEW_FORMAT_FLOAT_1X32;
  view.width = 64;
  view.height = 32;
  CUtexObject object = 0;
  REQUIRE(cuTexObjectCreate(&object, &r, &t, &view) == CUDA_SUCCESS);
  CHECK(object != 0);
  check_texture_reads_back(object, r, t);
  CUDA_RESOURCE_VIEW_DESC got_view{};
  REQUIRE(cuTexObjectGetResourceViewDesc(&got_view, object) == CUDA_SUCCESS);
  CHECK(same_bytes(got_view, view));

  // Destroyed: every query and a second destroy refuse it.
  REQUIRE(cuTexObjectDestroy(object) == CUDA_SUCCESS);
  CUDA_RESOURCE_DESC got{};
  CHECK(cuTexObjectGetResourceDesc(&got, object) == CUDA_ERROR_INVALID_VALUE);
  CUDA_TEXTURE_DESC got_texture{};
  CHECK(cuTexObjectGetTextureDesc(&got_texture, object) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectGetResourceViewDesc(&got_view, object) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectDestroy(object) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
}

TEST_CASE("a texture object over a mipmapped array needs normalised coordinates", "[driver][textures]") {
  primary_context();
  const CUDA_ARRAY3D_DESCRIPTOR desc = array_descriptor(256, 256, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  CUmipmappedArray mipmap = nullptr;
  REQUIRE(cuMipmappedArrayCreate(&mipmap, &desc, 5) == CUDA_SUCCESS);
  CUDA_RESOURCE_DESC r{};
  r.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  r.res.mipmap.hMipmappedArray = mipmap;
  CHECK(create_texture(r, texture_desc()) == CUDA_ERROR_INVALID_VALUE);

  const CUDA_TEXTURE_DESC t = texture_desc(CU_TRSF_NORMALIZED_COORDINATES);
  CUDA_RESOURCE_VIEW_DESC view{};
  view.format = CU_RES_VIEW_FORMAT_UINT_4X8;
  view.width = 256;
  view.height = 256;
  view.firstMipmapLevel = 1;
  view.lastMipmapLevel = 4;
  CUtexObject object = 0;
  REQUIRE(cuTexObjectCreate(&object, &r, &t, &view) == CUDA_SUCCESS);
  check_texture_reads_back(object, r, t);
  CUDA_RESOURCE_VIEW_DESC got_view{};
  REQUIRE(cuTexObjectGetResourceViewDesc(&got_view, object) == CUDA_SUCCESS);
  CHECK(same_bytes(got_view, view));
  REQUIRE(cuTexObjectDestroy(object) == CUDA_SUCCESS);

  // Levels beyond the array's five, or in the wrong order.
  view.lastMipmapLevel = 5;
  CHECK(create_texture(r, t, &view) == CUDA_ERROR_INVALID_VALUE);
  view.firstMipmapLevel = 3;
  view.lastMipmapLevel = 2;
  CHECK(create_texture(r, t, &view) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMipmappedArrayDestroy(mipmap) == CUDA_SUCCESS);
  // A dead mipmapped array.
  CHECK(create_texture(r, t) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("texture objects over linear and pitched device memory", "[driver][textures]") {
  primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 1 << 20) == CUDA_SUCCESS);
  const CUDA_TEXTURE_DESC t = texture_desc();

  SECTION("linear") {
    const CUDA_RESOURCE_DESC r = linear_resource(ptr, 4096);
    CUtexObject object = 0;
    REQUIRE(cuTexObjectCreate(&object, &r, &t, nullptr) == CUDA_SUCCESS);
    check_texture_reads_back(object, r, t);
    // Created without a resource view: none to answer.
    CUDA_RESOURCE_VIEW_DESC view{};
    CHECK(cuTexObjectGetResourceViewDesc(&view, object) == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(cuTexObjectDestroy(object) == CUDA_SUCCESS);

    // Aligned to TEXTURE_ALIGNMENT, inside one allocation, a size, a plain format of 1, 2 or 4 channels.
    int alignment = 0;
    REQUIRE(cuDeviceGetAttribute(&alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0) == CUDA_SUCCESS);
    REQUIRE(alignment == 512);
    CHECK(create_texture(linear_resource(ptr + 256, 1024), t) == CUDA_ERROR_INVALID_VALUE);
    CHECK(create_texture(linear_resource(ptr + 512, 1024), t) == CUDA_SUCCESS);
    CHECK(create_texture(linear_resource(ptr, (1 << 20) + 4), t) == CUDA_ERROR_INVALID_VALUE);
    CHECK(create_texture(linear_resource(ptr, 0), t) == CUDA_ERROR_INVALID_VALUE);
    CUDA_RESOURCE_DESC bad = linear_resource(ptr, 1024);
    bad.res.linear.numChannels = 3;
    CHECK(create_texture(bad, t) == CUDA_ERROR_INVALID_VALUE);
    bad = linear_resource(ptr, 1024);
    bad.res.linear.format = static_cast<CUarray_format>(0x77);
    CHECK(create_texture(bad, t) == CUDA_ERROR_INVALID_VALUE);
    // Host memory is no device pointer.
    alignas(512) static unsigned char host[4096];
    CHECK(create_texture(linear_resource(reinterpret_cast<CUdeviceptr>(host), sizeof host), t) ==
          CUDA_ERROR_INVALID_VALUE);
    // A resource view is only for arrays.
    CUDA_RESOURCE_VIEW_DESC v{};
    v.width = 1024;
    CHECK(create_texture(linear_resource(ptr, 1024), t, &v) == CUDA_ERROR_INVALID_VALUE);
    // Address modes are ignored for linear memory.
    CUDA_TEXTURE_DESC odd_mode = t;
    odd_mode.addressMode[0] = static_cast<CUaddress_mode>(3 + 4);
    CHECK(create_texture(linear_resource(ptr, 1024), odd_mode) == CUDA_SUCCESS);
  }

  SECTION("pitch2D") {
    // 100 x 50 elements of 4 bytes: rows of 400 bytes at a pitch of 416 (a multiple of 32).
    const CUDA_RESOURCE_DESC r = pitch_resource(ptr, 100, 50, 416);
    CUtexObject object = 0;
    REQUIRE(cuTexObjectCreate(&object, &r, &t, nullptr) == CUDA_SUCCESS);
    check_texture_reads_back(object, r, t);
    REQUIRE(cuTexObjectDestroy(object) == CUDA_SUCCESS);

    CHECK(create_texture(pitch_resource(ptr, 100, 50, 400), t) == CUDA_ERROR_INVALID_VALUE);  // pitch not 32-aligned
    CHECK(create_texture(pitch_resource(ptr, 100, 50, 384), t) == CUDA_ERROR_INVALID_VALUE);  // pitch < row
    CHECK(create_texture(pitch_resource(ptr + 64, 100, 50, 416), t) == CUDA_ERROR_INVALID_VALUE);
    CHECK(create_texture(pitch_resource(ptr, 0, 50, 416), t) == CUDA_ERROR_INVALID_VALUE);
    CHECK(create_texture(pitch_resource(ptr, 100, 0, 416), t) == CUDA_ERROR_INVALID_VALUE);
    CHECK(create_texture(pitch_resource(ptr, 100, 5000, 416), t) == CUDA_ERROR_INVALID_VALUE);  // past the allocation
    int max_width = 0;
    REQUIRE(cuDeviceGetAttribute(&max_width, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 0) == CUDA_SUCCESS);
    REQUIRE(max_width > 0);
    CHECK(create_texture(pitch_resource(ptr, static_cast<size_t>(max_width) + 1, 1, 4 * (static_cast<size_t>(max_width) + 32)),
                         t) == CUDA_ERROR_INVALID_VALUE);
  }
  REQUIRE(cuMemFree(ptr) == CUDA_SUCCESS);
  // Freed memory is no device memory.
  CHECK(create_texture(linear_resource(ptr, 1024), t) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("texture object descriptors are checked as documented", "[driver][textures]") {
  primary_context();
  CUarray array = make_array(16, 16, 0, 0);
  const CUDA_RESOURCE_DESC r = array_resource(array);
  const CUDA_TEXTURE_DESC t = texture_desc();
  CUtexObject object = 0;
  CHECK(cuTexObjectCreate(nullptr, &r, &t, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectCreate(&object, nullptr, &t, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectCreate(&object, &r, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);

  CUDA_RESOURCE_DESC bad = r;
  bad.resType = static_cast<CUresourcetype>(9);
  CHECK(create_texture(bad, t) == CUDA_ERROR_INVALID_VALUE);
  bad = r;
  bad.flags = 1;  // must be zero
  CHECK(create_texture(bad, t) == CUDA_ERROR_INVALID_VALUE);
  bad = r;
  bad.res.array.hArray = nullptr;
  CHECK(create_texture(bad, t) == CUDA_ERROR_INVALID_VALUE);

  CUDA_TEXTURE_DESC bad_texture = t;
  bad_texture.addressMode[2] = static_cast<CUaddress_mode>(7);
  CHECK(create_texture(r, bad_texture) == CUDA_ERROR_INVALID_VALUE);
  bad_texture = t;
  bad_texture.filterMode = static_cast<CUfilter_mode>(3);
  CHECK(create_texture(r, bad_texture) == CUDA_ERROR_INVALID_VALUE);
  bad_texture = t;
  bad_texture.flags = 0x100;
  CHECK(create_texture(r, bad_texture) == CUDA_ERROR_INVALID_VALUE);
  // Seamless cubemap filtering only over a cubemap array.
  CHECK(create_texture(r, texture_desc(CU_TRSF_SEAMLESS_CUBEMAP)) == CUDA_ERROR_INVALID_VALUE);
  CUarray cubemap = make_array(8, 8, 6, CUDA_ARRAY3D_CUBEMAP);
  CHECK(create_texture(array_resource(cubemap), texture_desc(CU_TRSF_SEAMLESS_CUBEMAP)) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(cubemap) == CUDA_SUCCESS);

  // Resource views: the array's extents, no mipmap levels or layers where it has none, a known format.
  CUDA_RESOURCE_VIEW_DESC view{};
  view.format = CU_RES_VIEW_FORMAT_FLOAT_1X32;
  view.width = 16;
  view.height = 16;
  CHECK(create_texture(r, t, &view) == CUDA_SUCCESS);
  CUDA_RESOURCE_VIEW_DESC bad_view = view;
  bad_view.width = 8;
  CHECK(create_texture(r, t, &bad_view) == CUDA_ERROR_INVALID_VALUE);
  bad_view = view;
  bad_view.lastMipmapLevel = 1;
  CHECK(create_texture(r, t, &bad_view) == CUDA_ERROR_INVALID_VALUE);
  bad_view = view;
  bad_view.lastLayer = 1;
  CHECK(create_texture(r, t, &bad_view) == CUDA_ERROR_INVALID_VALUE);
  bad_view = view;
  bad_view.format = static_cast<CUresourceViewFormat>(0x40);
  CHECK(create_texture(r, t, &bad_view) == CUDA_ERROR_INVALID_VALUE);
  // A block-compressed view: 4x the extents of an UNSIGNED_INT32 array of 2 (BC1) channels.
  bad_view = view;
  bad_view.format = CU_RES_VIEW_FORMAT_UNSIGNED_BC1;
  bad_view.width = 64;
  bad_view.height = 64;
  CHECK(create_texture(r, t, &bad_view) == CUDA_ERROR_INVALID_VALUE);  // a float array
  CUarray blocks = make_array(16, 16, 0, 0, CU_AD_FORMAT_UNSIGNED_INT32, 2);
  CHECK(create_texture(array_resource(blocks), t, &bad_view) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(blocks) == CUDA_SUCCESS);
  // Layers of a layered array.
  CUarray layered = make_array(16, 16, 4, CUDA_ARRAY3D_LAYERED);
  CUDA_RESOURCE_VIEW_DESC layers = view;
  layers.depth = 4;
  layers.firstLayer = 1;
  layers.lastLayer = 3;
  CHECK(create_texture(array_resource(layered), t, &layers) == CUDA_SUCCESS);
  layers.lastLayer = 4;
  CHECK(create_texture(array_resource(layered), t, &layers) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuArrayDestroy(layered) == CUDA_SUCCESS);

  // A destroyed array.
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
  CHECK(create_texture(r, t) == CUDA_ERROR_INVALID_VALUE);
  // Queries of handles never handed out, and NULL outputs.
  CUDA_RESOURCE_DESC got{};
  CHECK(cuTexObjectGetResourceDesc(&got, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectDestroy(0) == CUDA_ERROR_INVALID_VALUE);
  CUarray live = make_array(16, 16, 0, 0);
  const CUDA_RESOURCE_DESC live_r = array_resource(live);
  REQUIRE(cuTexObjectCreate(&object, &live_r, &t, nullptr) == CUDA_SUCCESS);
  CHECK(cuTexObjectGetResourceDesc(nullptr, object) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectGetTextureDesc(nullptr, object) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTexObjectGetResourceViewDesc(nullptr, object) == CUDA_ERROR_INVALID_VALUE);
  // A texture handle is no surface.
  CHECK(cuSurfObjectGetResourceDesc(&got, object) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuSurfObjectDestroy(object) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuTexObjectDestroy(object) == CUDA_SUCCESS);
  REQUIRE(cuArrayDestroy(live) == CUDA_SUCCESS);
}

TEST_CASE("a surface object needs an array made for surface load/store", "[driver][textures]") {
  primary_context();
  CUarray plain = make_array(32, 32, 0, 0);
  CUarray surface = make_array(32, 32, 0, CUDA_ARRAY3D_SURFACE_LDST);
  CUsurfObject object = 0;
  const CUDA_RESOURCE_DESC plain_r = array_resource(plain);
  CHECK(cuSurfObjectCreate(&object, &plain_r) == CUDA_ERROR_INVALID_VALUE);

  const CUDA_RESOURCE_DESC r = array_resource(surface);
  CHECK(cuSurfObjectCreate(nullptr, &r) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuSurfObjectCreate(&object, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUDA_RESOURCE_DESC bad = r;
  bad.flags = 2;
  CHECK(cuSurfObjectCreate(&object, &bad) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
  bad = linear_resource(ptr, 4096);  // only arrays
  CHECK(cuSurfObjectCreate(&object, &bad) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemFree(ptr) == CUDA_SUCCESS);

  REQUIRE(cuSurfObjectCreate(&object, &r) == CUDA_SUCCESS);
  CHECK(object != 0);
  CUDA_RESOURCE_DESC got;
  std::memset(&got, 0xcd, sizeof got);
  REQUIRE(cuSurfObjectGetResourceDesc(&got, object) == CUDA_SUCCESS);
  CHECK(same_bytes(got, r));
  CHECK(cuSurfObjectGetResourceDesc(nullptr, object) == CUDA_ERROR_INVALID_VALUE);
  // A surface handle is no texture.
  CHECK(cuTexObjectGetResourceDesc(&got, object) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuSurfObjectDestroy(object) == CUDA_SUCCESS);
  CHECK(cuSurfObjectGetResourceDesc(&got, object) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuSurfObjectDestroy(object) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuArrayDestroy(surface) == CUDA_SUCCESS);
  CHECK(cuSurfObjectCreate(&object, &r) == CUDA_ERROR_INVALID_VALUE);  // a dead array
  REQUIRE(cuArrayDestroy(plain) == CUDA_SUCCESS);
}

TEST_CASE("texture and surface objects go with their context", "[driver][textures]") {
  CHECK(in_child([] {
          CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
          CUtexObject object = 0;
          CUDA_RESOURCE_DESC r{};
          CUDA_TEXTURE_DESC t{};
          // No current context.
          CHILD_CHECK(cuTexObjectCreate(&object, &r, &t, nullptr) == CUDA_ERROR_INVALID_CONTEXT);
          CUcontext ctx = nullptr;
          CHILD_CHECK(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
          const CUDA_ARRAY3D_DESCRIPTOR desc = array_descriptor(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST);
          CUarray array = nullptr;
          CHILD_CHECK(cuArray3DCreate(&array, &desc) == CUDA_SUCCESS);
          r.resType = CU_RESOURCE_TYPE_ARRAY;
          r.res.array.hArray = array;
          CHILD_CHECK(cuTexObjectCreate(&object, &r, &t, nullptr) == CUDA_SUCCESS);
          CUsurfObject surface = 0;
          CHILD_CHECK(cuSurfObjectCreate(&surface, &r) == CUDA_SUCCESS);
          CHILD_CHECK(cuCtxDestroy(ctx) == CUDA_SUCCESS);
          CHILD_CHECK(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
          CUDA_RESOURCE_DESC got{};
          CHILD_CHECK(cuTexObjectGetResourceDesc(&got, object) == CUDA_ERROR_INVALID_VALUE);
          CHILD_CHECK(cuSurfObjectGetResourceDesc(&got, surface) == CUDA_ERROR_INVALID_VALUE);
          CHILD_CHECK(cuCtxDestroy(ctx) == CUDA_SUCCESS);
          return 0;
        }) == 0);
}

TEST_CASE("texture objects are created and destroyed from many threads", "[driver][textures]") {
  CUcontext ctx = primary_context();
  CUarray array = make_array(16, 16, 0, CUDA_ARRAY3D_SURFACE_LDST);
  const CUDA_RESOURCE_DESC r = array_resource(array);
  const CUDA_TEXTURE_DESC t = texture_desc();
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::vector<unsigned long long>> handles(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      cuCtxSetCurrent(ctx);
      for (int k = 0; k < kEach; ++k) {
        CUtexObject tex = 0;
        CUsurfObject surf = 0;
        if (cuTexObjectCreate(&tex, &r, &t, nullptr) != CUDA_SUCCESS) failures++;
        if (cuSurfObjectCreate(&surf, &r) != CUDA_SUCCESS) failures++;
        handles[static_cast<size_t>(i)].push_back(tex);
        handles[static_cast<size_t>(i)].push_back(surf);
        if (k % 2 == 0) {
          if (cuTexObjectDestroy(tex) != CUDA_SUCCESS || cuSurfObjectDestroy(surf) != CUDA_SUCCESS) failures++;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures == 0);
  std::set<unsigned long long> distinct;
  for (const auto& list : handles) distinct.insert(list.begin(), list.end());
  CHECK(distinct.size() == static_cast<size_t>(kThreads * kEach * 2));  // no handle handed out twice
  CHECK(distinct.count(0) == 0);
  for (size_t i = 0; i < handles.size(); ++i) {
    for (size_t k = 0; k < handles[i].size(); k += 4) {  // the ones destroyed
      CUDA_RESOURCE_DESC got{};
      CHECK(cuTexObjectGetResourceDesc(&got, handles[i][k]) == CUDA_ERROR_INVALID_VALUE);
    }
    for (size_t k = 2; k < handles[i].size(); k += 4) {  // the ones kept
      REQUIRE(cuTexObjectDestroy(handles[i][k]) == CUDA_SUCCESS);
      REQUIRE(cuSurfObjectDestroy(handles[i][k + 1]) == CUDA_SUCCESS);
    }
  }
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);
}

TEST_CASE("texture and surface entry points are found through cuGetProcAddress", "[driver][textures]") {
  primary_context();
  for (const char* name : {"cuTexObjectCreate", "cuTexObjectDestroy", "cuTexObjectGetResourceDesc",
                           "cuTexObjectGetTextureDesc", "cuTexObjectGetResourceViewDesc", "cuSurfObjectCreate",
                           "cuSurfObjectDestroy", "cuSurfObjectGetResourceDesc"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    CHECK(cuGetProcAddress(name, &fn, 12000, 0, &found) == CUDA_SUCCESS);
    CHECK(found == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(fn != nullptr);
  }
}

TEST_CASE("a texture object reads only the current device's memory", "[driver][textures]") {
  CUcontext ctx0 = primary_context();
  CUcontext ctx1 = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx1) == CUDA_SUCCESS);
  CUdeviceptr other = 0;
  REQUIRE(cuMemAlloc(&other, 1 << 20) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx0) == CUDA_SUCCESS);
  const CUDA_TEXTURE_DESC t = texture_desc();
  CHECK(create_texture(linear_resource(other, 4096), t) == CUDA_ERROR_INVALID_VALUE);
  // Stream-ordered and managed memory of the current device serve.
  CUdeviceptr pooled = 0, managed = 0;
  REQUIRE(cuMemAllocAsync(&pooled, 1 << 20, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocManaged(&managed, 1 << 20, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK(create_texture(linear_resource(pooled, 4096), t) == CUDA_SUCCESS);
  CHECK(create_texture(linear_resource(managed, 4096), t) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(pooled, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(managed) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx1) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(other) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx0) == CUDA_SUCCESS);
}
