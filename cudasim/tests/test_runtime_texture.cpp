// Texture and surface objects through the simulated runtime: cudaCreateTextureObject and
// cudaCreateSurfaceObject over arrays, mipmapped arrays, linear and pitched memory, their
// descriptors answered back in the runtime's terms, the documented refusals and destruction.
#include <catch2/catch.hpp>

#include "runtime_support.h"

#include <cstring>

using namespace runtime_test;

namespace {

cudaResourceDesc array_resource(cudaArray_t array) {
  cudaResourceDesc r{};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = array;
  return r;
}

cudaTextureDesc texture_desc(int normalized) {
  cudaTextureDesc t{};
  t.addressMode[0] = cudaAddressModeClamp;
  t.addressMode[1] = cudaAddressModeBorder;
  t.addressMode[2] = cudaAddressModeWrap;
  t.filterMode = cudaFilterModeLinear;
  t.readMode = cudaReadModeElementType;
  t.sRGB = 0;
  t.borderColor[1] = 0.75f;
  t.normalizedCoords = normalized;
  t.maxAnisotropy = 4;
  t.mipmapFilterMode = cudaFilterModePoint;
  t.mipmapLevelBias = -0.5f;
  t.minMipmapLevelClamp = 1.0f;
  t.maxMipmapLevelClamp = 2.5f;
  t.disableTrilinearOptimization = 1;
  return t;
}

template <typename T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The result of cudaCreateTextureObject, destroying what it made; clears the thread's last error.
cudaError_t try_texture(const cudaResourceDesc& r, const cudaTextureDesc& t, const cudaResourceViewDesc* view = nullptr) {
  cudaTextureObject_t object = 0;
  const cudaError_t rc = cudaCreateTextureObject(&object, &r, &t, view);
  if (rc == cudaSuccess) REQUIRE_CUDA(cudaDestroyTextureObject(object));
  cudaGetLastError();
  return rc;
}

// Checks the resource and texture descriptors a live texture object answers.
void check_reads_back(cudaTextureObject_t object, const cudaResourceDesc& r, const cudaTextureDesc& t) {
  cudaResourceDesc got_resource;
  std::memset(&got_resource, 0xab, sizeof got_resource);
  REQUIRE_CUDA(cudaGetTextureObjectResourceDesc(&got_resource, object));
  CHECK(same_bytes(got_resource, r));
  cudaTextureDesc got_texture;
  std::memset(&got_texture, 0xab, sizeof got_texture);
  REQUIRE_CUDA(cudaGetTextureObjectTextureDesc(&got_texture, object));
  CHECK(same_bytes(got_texture, t));
}

}  // namespace

TEST_CASE("runtime: a texture object over an array answers its descriptors back", "[runtime][textures]") {
  const cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &f, 64, 32));
  const cudaResourceDesc r = array_resource(array);
  const cudaTextureDesc t = texture_desc(1);
  cudaResourceViewDesc view{};
  view.format = cudaResViewFormatFloat1;
  view.width = 64;
  view.height = 32;
  cudaTextureObject_t object = 0;
  REQUIRE_CUDA(cudaCreateTextureObject(&object, &r, &t, &view));
  CHECK(object != 0);
  check_reads_back(object, r, t);
  cudaResourceViewDesc got_view;
  std::memset(&got_view, 0xab, sizeof got_view);
  REQUIRE_CUDA(cudaGetTextureObjectResourceViewDesc(&got_view, object));
  CHECK(same_bytes(got_view, view));

  REQUIRE_CUDA(cudaDestroyTextureObject(object));
  cudaResourceDesc got{};
  CHECK(cudaGetTextureObjectResourceDesc(&got, object) == cudaErrorInvalidValue);
  cudaTextureDesc got_texture{};
  CHECK(cudaGetTextureObjectTextureDesc(&got_texture, object) == cudaErrorInvalidValue);
  CHECK(cudaGetTextureObjectResourceViewDesc(&got_view, object) == cudaErrorInvalidValue);
  CHECK(cudaDestroyTextureObject(object) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // recorded as the thread's last error

  // A dead array.
  REQUIRE_CUDA(cudaFreeArray(array));
  CHECK(try_texture(r, t) == cudaErrorInvalidValue);
}

TEST_CASE("runtime: texture objects over linear and pitched memory", "[runtime][textures]") {
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMalloc(&ptr, 1 << 20));
  cudaTextureDesc t = texture_desc(0);
  t.readMode = cudaReadModeNormalizedFloat;

  cudaResourceDesc linear{};
  linear.resType = cudaResourceTypeLinear;
  linear.res.linear.devPtr = ptr;
  linear.res.linear.desc = cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsigned);
  linear.res.linear.sizeInBytes = 4096;
  cudaTextureObject_t object = 0;
  REQUIRE_CUDA(cudaCreateTextureObject(&object, &linear, &t, nullptr));
  check_reads_back(object, linear, t);
  cudaResourceViewDesc view{};
  CHECK(cudaGetTextureObjectResourceViewDesc(&view, object) == cudaErrorInvalidValue);  // none was given
  REQUIRE_CUDA(cudaDestroyTextureObject(object));

  cudaResourceDesc bad = linear;
  bad.res.linear.devPtr = static_cast<char*>(ptr) + 256;  // not aligned to textureAlignment
  CHECK(try_texture(bad, t) == cudaErrorInvalidValue);
  bad = linear;
  bad.res.linear.desc = cudaCreateChannelDesc(8, 16, 0, 0, cudaChannelFormatKindUnsigned);
  CHECK(try_texture(bad, t) == cudaErrorInvalidValue);
  bad = linear;
  bad.res.linear.desc = cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedNormalized8X4);
  CHECK(try_texture(bad, t) == cudaErrorNotSupported);  // no layout simulated, as for arrays
  bad = linear;
  bad.resType = static_cast<cudaResourceType>(7);
  CHECK(try_texture(bad, t) == cudaErrorInvalidValue);
  cudaTextureDesc bad_texture = t;
  bad_texture.readMode = static_cast<cudaTextureReadMode>(5);
  CHECK(try_texture(linear, bad_texture) == cudaErrorInvalidValue);

  // Pitched: rows as cudaMallocPitch pads them.
  void* pitched = nullptr;
  size_t pitch = 0;
  REQUIRE_CUDA(cudaMallocPitch(&pitched, &pitch, 100 * sizeof(float), 50));
  cudaResourceDesc r{};
  r.resType = cudaResourceTypePitch2D;
  r.res.pitch2D.devPtr = pitched;
  r.res.pitch2D.desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  r.res.pitch2D.width = 100;
  r.res.pitch2D.height = 50;
  r.res.pitch2D.pitchInBytes = pitch;
  REQUIRE_CUDA(cudaCreateTextureObject(&object, &r, &t, nullptr));
  check_reads_back(object, r, t);
  REQUIRE_CUDA(cudaDestroyTextureObject(object));
  bad = r;
  bad.res.pitch2D.pitchInBytes = pitch + 4;  // not a multiple of texturePitchAlignment
  CHECK(try_texture(bad, t) == cudaErrorInvalidValue);

  REQUIRE_CUDA(cudaFree(pitched));
  REQUIRE_CUDA(cudaFree(ptr));
  CHECK(try_texture(linear, t) == cudaErrorInvalidValue);  // freed memory
}

TEST_CASE("runtime: a texture object over a mipmapped array needs normalized coordinates", "[runtime][textures]") {
  const cudaChannelFormatDesc f = cudaCreateChannelDesc(16, 16, 0, 0, cudaChannelFormatKindFloat);
  cudaMipmappedArray_t mipmap = nullptr;
  cudaExtent extent{};
  extent.width = 128;
  extent.height = 128;
  REQUIRE_CUDA(cudaMallocMipmappedArray(&mipmap, &f, extent, 4));
  cudaResourceDesc r{};
  r.resType = cudaResourceTypeMipmappedArray;
  r.res.mipmap.mipmap = mipmap;
  CHECK(try_texture(r, texture_desc(0)) == cudaErrorInvalidValue);
  const cudaTextureDesc t = texture_desc(1);
  cudaTextureObject_t object = 0;
  REQUIRE_CUDA(cudaCreateTextureObject(&object, &r, &t, nullptr));
  check_reads_back(object, r, t);
  REQUIRE_CUDA(cudaDestroyTextureObject(object));
  REQUIRE_CUDA(cudaFreeMipmappedArray(mipmap));
}

TEST_CASE("runtime: texture object arguments are checked", "[runtime][textures]") {
  const cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &f, 16, 16));
  const cudaResourceDesc r = array_resource(array);
  const cudaTextureDesc t = texture_desc(1);
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(nullptr, &r, &t, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaCreateTextureObject(&object, nullptr, &t, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaCreateTextureObject(&object, &r, nullptr, nullptr) == cudaErrorInvalidValue);
  cudaResourceDesc bad = r;
  bad.flags = 1;
  CHECK(try_texture(bad, t) == cudaErrorInvalidValue);
  cudaResourceViewDesc view{};
  view.format = cudaResViewFormatFloat1;
  view.width = 32;  // not the array's width
  view.height = 16;
  CHECK(try_texture(r, t, &view) == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaCreateTextureObject(&object, &r, &t, nullptr));
  CHECK(cudaGetTextureObjectResourceDesc(nullptr, object) == cudaErrorInvalidValue);
  CHECK(cudaGetTextureObjectTextureDesc(nullptr, object) == cudaErrorInvalidValue);
  CHECK(cudaGetTextureObjectResourceViewDesc(nullptr, object) == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaDestroyTextureObject(object));
  CHECK(cudaDestroyTextureObject(0) == cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE_CUDA(cudaFreeArray(array));
}

TEST_CASE("runtime: a surface object needs an array made for surface load/store", "[runtime][textures]") {
  const cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 32, 0, 0, cudaChannelFormatKindSigned);
  cudaArray_t plain = nullptr, surface = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&plain, &f, 32, 32));
  REQUIRE_CUDA(cudaMallocArray(&surface, &f, 32, 32, cudaArraySurfaceLoadStore));
  cudaSurfaceObject_t object = 0;
  const cudaResourceDesc plain_r = array_resource(plain);
  CHECK(cudaCreateSurfaceObject(&object, &plain_r) == cudaErrorInvalidValue);
  CHECK(cudaCreateSurfaceObject(&object, nullptr) == cudaErrorInvalidValue);
  const cudaResourceDesc r = array_resource(surface);
  CHECK(cudaCreateSurfaceObject(nullptr, &r) == cudaErrorInvalidValue);

  REQUIRE_CUDA(cudaCreateSurfaceObject(&object, &r));
  CHECK(object != 0);
  cudaResourceDesc got;
  std::memset(&got, 0xcd, sizeof got);
  REQUIRE_CUDA(cudaGetSurfaceObjectResourceDesc(&got, object));
  CHECK(same_bytes(got, r));
  CHECK(cudaGetSurfaceObjectResourceDesc(nullptr, object) == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaDestroySurfaceObject(object));
  CHECK(cudaGetSurfaceObjectResourceDesc(&got, object) == cudaErrorInvalidValue);
  CHECK(cudaDestroySurfaceObject(object) == cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE_CUDA(cudaFreeArray(surface));
  REQUIRE_CUDA(cudaFreeArray(plain));
}
