// Stream-ordered allocation and memory pools through the simulated runtime.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <vector>

#include "runtime_support.h"

using namespace runtime_test;

namespace {

uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attribute) {
  uint64_t value = 0;
  REQUIRE_CUDA(cudaMemPoolGetAttribute(pool, attribute, &value));
  return value;
}

void set_release_threshold(cudaMemPool_t pool, uint64_t bytes) {
  REQUIRE_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes));
}

}  // namespace

TEST_CASE("runtime: the default pool returns freed memory at synchronisation", "[runtime][pool]") {
  cudaMemPool_t pool = nullptr;
  REQUIRE_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  REQUIRE(pool != nullptr);
  set_release_threshold(pool, 0);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&ptr, 64 * kMiB, stream));
  REQUIRE(ptr != nullptr);
  REQUIRE_CUDA(cudaMemsetAsync(ptr, 0x3C, 64 * kMiB, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent) >= 64 * kMiB);
  CHECK(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent) >= 64 * kMiB);

  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, ptr));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 0);

  REQUIRE_CUDA(cudaFreeAsync(ptr, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  CHECK(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  CHECK(pool_attribute(pool, cudaMemPoolAttrUsedMemHigh) >= 64 * kMiB);
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: a release threshold keeps freed memory in the pool until trimmed", "[runtime][pool]") {
  cudaMemPool_t pool = nullptr;
  REQUIRE_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  set_release_threshold(pool, UINT64_MAX);
  CHECK(pool_attribute(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));

  size_t free_before = 0, total = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_before, &total));
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&ptr, 64 * kMiB, stream));
  REQUIRE_CUDA(cudaFreeAsync(ptr, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  const uint64_t kept = pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(kept >= 64 * kMiB);
  CHECK(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  size_t free_kept = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_kept, &total));
  CHECK(free_before - free_kept >= 64 * kMiB);

  // Freed memory is reusable on the same stream at once, without growing the pool.
  void* again = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&again, 64 * kMiB, stream));
  CHECK(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent) == kept);
  REQUIRE_CUDA(cudaFreeAsync(again, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));

  REQUIRE_CUDA(cudaMemPoolTrimTo(pool, 0));
  CHECK(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  size_t free_trimmed = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_trimmed, &total));
  CHECK(free_trimmed == free_before);

  set_release_threshold(pool, 0);
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: explicit pools", "[runtime][pool]") {
  REQUIRE_CUDA(cudaSetDevice(1));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 1;
  cudaMemPool_t pool = nullptr;
  REQUIRE_CUDA(cudaMemPoolCreate(&pool, &props));
  cudaMemPool_t default_pool = nullptr;
  REQUIRE_CUDA(cudaDeviceGetDefaultMemPool(&default_pool, 1));
  CHECK(pool != default_pool);

  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMallocFromPoolAsync(&ptr, 8 * kMiB, pool, stream));
  std::vector<unsigned char> back(16, 0);
  REQUIRE_CUDA(cudaMemsetAsync(ptr, 0x7E, 8 * kMiB, stream));
  REQUIRE_CUDA(cudaMemcpyAsync(back.data(), ptr, back.size(), cudaMemcpyDeviceToHost, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(back == std::vector<unsigned char>(16, 0x7E));
  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, ptr));
  CHECK(attributes.device == 1);
  CHECK(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent) >= 8 * kMiB);

  REQUIRE_CUDA(cudaFreeAsync(ptr, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  REQUIRE_CUDA(cudaMemPoolDestroy(pool));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaSetDevice(0));
}

TEST_CASE("runtime: cudaFree frees cudaMallocAsync memory", "[runtime][pool]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&ptr, kMiB, stream));
  REQUIRE_CUDA(cudaMemsetAsync(ptr, 0x42, kMiB, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  REQUIRE_CUDA(cudaFree(ptr));
  CHECK(name(cudaFreeAsync(ptr, stream)) == "cudaErrorInvalidValue");  // already freed
  CHECK(name(cudaFree(ptr)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: misuse of stream-ordered allocation returns the documented codes", "[runtime][pool]") {
  cudaMemPool_t pool = nullptr;
  CHECK(name(cudaDeviceGetDefaultMemPool(&pool, 9)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaDeviceGetDefaultMemPool(nullptr, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMallocAsync(nullptr, 16, nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemPoolCreate(&pool, nullptr)) == "cudaErrorInvalidValue");
  void* huge = nullptr;
  CHECK(name(cudaMallocAsync(&huge, 64 * kGiB, nullptr)) == "cudaErrorMemoryAllocation");
  cudaGetLastError();
}

TEST_CASE("runtime: current pools, and pools and their pointers shared through the driver", "[runtime][pool]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaMemPool_t default_pool = nullptr, current = nullptr;
  REQUIRE_CUDA(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  REQUIRE_CUDA(cudaDeviceGetMemPool(&current, 0));
  CHECK(current == default_pool);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  cudaMemPool_t shared = nullptr;
  REQUIRE_CUDA(cudaMemPoolCreate(&shared, &props));
  REQUIRE_CUDA(cudaDeviceSetMemPool(0, shared));
  REQUIRE_CUDA(cudaDeviceGetMemPool(&current, 0));
  CHECK(current == shared);
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&ptr, 4096, nullptr));  // from the current pool
  REQUIRE_CUDA(cudaMemsetAsync(ptr, 0x3c, 4096, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  int fd = -1;
  REQUIRE_CUDA(cudaMemPoolExportToShareableHandle(&fd, shared, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData data{};
  REQUIRE_CUDA(cudaMemPoolExportPointer(&data, ptr));
  cudaMemPool_t imported = nullptr;
  REQUIRE_CUDA(cudaMemPoolImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                    cudaMemHandleTypePosixFileDescriptor, 0));
  void* again = nullptr;
  REQUIRE_CUDA(cudaMemPoolImportPointer(&again, imported, &data));
  CHECK(again != ptr);  // a new mapping of the same bytes
  unsigned char byte = 0;
  REQUIRE_CUDA(cudaMemcpy(&byte, static_cast<char*>(again) + 4095, 1, cudaMemcpyDeviceToHost));
  CHECK(byte == 0x3c);
  CHECK(name(cudaMemPoolExportToShareableHandle(&fd, default_pool, cudaMemHandleTypePosixFileDescriptor, 0)) ==
        "cudaErrorInvalidValue");  // the default pool has no shareable handle type
  CHECK(name(cudaDeviceGetMemPool(nullptr, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceSetMemPool(7, shared)) == "cudaErrorInvalidDevice");
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaFree(again));
  REQUIRE_CUDA(cudaFreeAsync(ptr, nullptr));
  REQUIRE_CUDA(cudaDeviceSetMemPool(0, default_pool));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  REQUIRE_CUDA(cudaMemPoolDestroy(imported));
  REQUIRE_CUDA(cudaMemPoolDestroy(shared));
  close(fd);
}

TEST_CASE("runtime: the pools of a location and allocation type", "[runtime][pool]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaMemLocation device0{cudaMemLocationTypeDevice, 0};
  cudaMemPool_t by_location = nullptr, by_device = nullptr;
  REQUIRE_CUDA(cudaMemGetDefaultMemPool(&by_location, &device0, cudaMemAllocationTypePinned));
  REQUIRE_CUDA(cudaDeviceGetDefaultMemPool(&by_device, 0));
  CHECK(by_location == by_device);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = device0;
  cudaMemPool_t own = nullptr;
  REQUIRE_CUDA(cudaMemPoolCreate(&own, &props));
  // Setting by location is setting the device's current pool: cudaMallocAsync takes from it.
  REQUIRE_CUDA(cudaMemSetMemPool(&device0, cudaMemAllocationTypePinned, own));
  cudaMemPool_t current = nullptr;
  REQUIRE_CUDA(cudaMemGetMemPool(&current, &device0, cudaMemAllocationTypePinned));
  CHECK(current == own);
  REQUIRE_CUDA(cudaDeviceGetMemPool(&current, 0));
  CHECK(current == own);
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&ptr, 4096, nullptr));
  std::uint64_t used = 0;  // the attribute is a cuuint64_t
  REQUIRE_CUDA(cudaMemPoolGetAttribute(own, cudaMemPoolAttrUsedMemCurrent, &used));
  CHECK(used >= 4096);  // the block is the pool's
  REQUIRE_CUDA(cudaFreeAsync(ptr, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  // The documented refusals: no location, a pool of another location, an unknown device.
  CHECK(name(cudaMemGetMemPool(&current, nullptr, cudaMemAllocationTypePinned)) == "cudaErrorInvalidValue");
  cudaMemLocation device1{cudaMemLocationTypeDevice, 1};
  CHECK(name(cudaMemSetMemPool(&device1, cudaMemAllocationTypePinned, own)) == "cudaErrorInvalidValue");
  cudaMemLocation device7{cudaMemLocationTypeDevice, 7};
  CHECK(name(cudaMemGetDefaultMemPool(&current, &device7, cudaMemAllocationTypePinned)) == "cudaErrorInvalidDevice");
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaMemSetMemPool(&device0, cudaMemAllocationTypePinned, by_device));
  REQUIRE_CUDA(cudaMemPoolDestroy(own));
}
