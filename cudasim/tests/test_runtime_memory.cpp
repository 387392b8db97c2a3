// Device memory through the simulated runtime: allocation, copies, sets, capacity, misuse.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime_support.h"

using namespace runtime_test;

namespace {

std::vector<unsigned char> pattern(size_t size, unsigned seed) {
  std::vector<unsigned char> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
  return bytes;
}

}  // namespace

TEST_CASE("runtime: memory round trip through every copy kind", "[runtime][memory]") {
  constexpr size_t kSize = kMiB + 123;
  const std::vector<unsigned char> source = pattern(kSize, 7);
  void* first = nullptr;
  void* second = nullptr;
  REQUIRE_CUDA(cudaMalloc(&first, kSize));
  REQUIRE_CUDA(cudaMalloc(&second, kSize));
  CHECK(reinterpret_cast<uintptr_t>(first) % 512 == 0);

  std::vector<unsigned char> back(kSize, 0);
  REQUIRE_CUDA(cudaMemcpy(first, source.data(), kSize, cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaMemcpy(second, first, kSize, cudaMemcpyDeviceToDevice));
  REQUIRE_CUDA(cudaMemcpy(back.data(), second, kSize, cudaMemcpyDeviceToHost));
  CHECK(back == source);

  // cudaMemcpyDefault: unified addressing tells host from device pointers.
  const std::vector<unsigned char> other = pattern(kSize, 99);
  std::vector<unsigned char> back_default(kSize, 0);
  REQUIRE_CUDA(cudaMemcpy(first, other.data(), kSize, cudaMemcpyDefault));
  REQUIRE_CUDA(cudaMemcpy(second, first, kSize, cudaMemcpyDefault));
  REQUIRE_CUDA(cudaMemcpy(back_default.data(), second, kSize, cudaMemcpyDefault));
  CHECK(back_default == other);

  std::vector<unsigned char> host_copy(16, 0);
  REQUIRE_CUDA(cudaMemcpy(host_copy.data(), source.data(), 16, cudaMemcpyHostToHost));
  CHECK(std::equal(host_copy.begin(), host_copy.end(), source.begin()));

  REQUIRE_CUDA(cudaFree(first));
  REQUIRE_CUDA(cudaFree(second));
}

TEST_CASE("runtime: memset and asynchronous copies on a stream", "[runtime][memory]") {
  constexpr size_t kSize = 4096;
  void* device = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, kSize));
  std::vector<unsigned char> back(kSize, 0);

  REQUIRE_CUDA(cudaMemset(device, 0xAB, kSize));
  REQUIRE_CUDA(cudaMemcpy(back.data(), device, kSize, cudaMemcpyDeviceToHost));
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0xAB; }));

  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<unsigned char> source = pattern(kSize, 3);
  REQUIRE_CUDA(cudaMemsetAsync(device, 0x11, kSize, stream));
  REQUIRE_CUDA(cudaMemcpyAsync(device, source.data(), kSize / 2, cudaMemcpyHostToDevice, stream));
  REQUIRE_CUDA(cudaMemcpyAsync(back.data(), device, kSize, cudaMemcpyDeviceToHost, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(std::equal(back.begin(), back.begin() + kSize / 2, source.begin()));
  CHECK(std::all_of(back.begin() + kSize / 2, back.end(), [](unsigned char b) { return b == 0x11; }));

  // The per-thread default stream is a valid stream handle too.
  REQUIRE_CUDA(cudaMemsetAsync(device, 0x22, kSize, cudaStreamPerThread));
  REQUIRE_CUDA(cudaMemcpyAsync(back.data(), device, kSize, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0x22; }));

  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(device));
}

TEST_CASE("runtime: zero-byte and null-pointer special cases", "[runtime][memory]") {
  void* ptr = reinterpret_cast<void*>(0x1);
  REQUIRE_CUDA(cudaMalloc(&ptr, 0));
  CHECK(ptr == nullptr);
  REQUIRE_CUDA(cudaFree(nullptr));
  REQUIRE_CUDA(cudaMemcpy(nullptr, nullptr, 0, cudaMemcpyHostToDevice));
}

TEST_CASE("runtime: misuse of memory calls returns the documented codes", "[runtime][memory]") {
  cudaGetLastError();
  CHECK(name(cudaMalloc(nullptr, 16)) == "cudaErrorInvalidValue");

  void* device = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, 4096));
  std::vector<unsigned char> host(4096, 0);
  CHECK(name(cudaMemcpy(device, host.data(), 16, static_cast<cudaMemcpyKind>(7))) ==
        "cudaErrorInvalidMemcpyDirection");
  // Past the end of the allocation.
  CHECK(name(cudaMemcpy(device, host.data(), 8192, cudaMemcpyHostToDevice)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFree(device));

  // Freed memory is unknown to every call.
  CHECK(name(cudaFree(device)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpy(device, host.data(), 16, cudaMemcpyHostToDevice)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpy(host.data(), device, 16, cudaMemcpyDeviceToHost)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemset(device, 0, 16)) == "cudaErrorInvalidValue");
  // A host pointer is not device memory.
  CHECK(name(cudaFree(host.data())) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");
}

TEST_CASE("runtime: memory information, capacity and out-of-memory", "[runtime][memory]") {
  size_t free_bytes = 0, total = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_bytes, &total));
  CHECK(total == kDevice0Memory);
  CHECK(free_bytes < total);  // the context itself takes memory, as on a real GPU

  void* block = nullptr;
  REQUIRE_CUDA(cudaMalloc(&block, 256 * kMiB));
  size_t free_with_block = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_with_block, &total));
  CHECK(free_bytes - free_with_block >= 256 * kMiB);
  REQUIRE_CUDA(cudaFree(block));
  size_t free_after = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after == free_bytes);

  // More than the device has fails, and is the thread's last error.
  cudaGetLastError();
  void* too_big = nullptr;
  CHECK(name(cudaMalloc(&too_big, total + kMiB)) == "cudaErrorMemoryAllocation");
  CHECK(name(cudaGetLastError()) == "cudaErrorMemoryAllocation");

  // The free memory can be allocated in 1 GiB pieces until the next piece no longer fits.
  std::vector<void*> pieces;
  cudaError_t status = cudaSuccess;
  while (status == cudaSuccess && pieces.size() < 16) {
    void* piece = nullptr;
    status = cudaMalloc(&piece, kGiB);
    if (status == cudaSuccess) pieces.push_back(piece);
  }
  CHECK(name(status) == "cudaErrorMemoryAllocation");
  CHECK(pieces.size() == free_bytes / kGiB);
  for (void* piece : pieces) CHECK_CUDA(cudaFree(piece));
  cudaGetLastError();
}

TEST_CASE("runtime: sizes no device holds fail with cudaErrorMemoryAllocation, never wrapped", "[runtime][memory]") {
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_before, &total));
  cudaMemPool_t pool = nullptr;
  REQUIRE_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaGetLastError();
  void* ptr = nullptr;
  // Sizes the driver's rounding (512 bytes, pages, 2 MiB pool blocks) would wrap to a small one.
  for (const size_t huge : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 511, SIZE_MAX - 2 * kMiB + 2, SIZE_MAX / 2 + 1}) {
    INFO(huge);
    CHECK(name(cudaMalloc(&ptr, huge)) == "cudaErrorMemoryAllocation");
    CHECK(name(cudaGetLastError()) == "cudaErrorMemoryAllocation");
    CHECK(name(cudaMallocManaged(&ptr, huge)) == "cudaErrorMemoryAllocation");
    CHECK(name(cudaMallocAsync(&ptr, huge, nullptr)) == "cudaErrorMemoryAllocation");
    CHECK(name(cudaMallocFromPoolAsync(&ptr, huge, pool, nullptr)) == "cudaErrorMemoryAllocation");
  }
  size_t pitch = 0;
  // 4 KiB rows: 2^52 of them wrap pitch x height to 0 bytes; a width near SIZE_MAX wraps the pitch.
  CHECK(name(cudaMallocPitch(&ptr, &pitch, 4096, size_t{1} << 52)) == "cudaErrorMemoryAllocation");
  CHECK(name(cudaMallocPitch(&ptr, &pitch, 4096, (size_t{1} << 52) + 1)) == "cudaErrorMemoryAllocation");
  CHECK(name(cudaMallocPitch(&ptr, &pitch, SIZE_MAX - 10, 1)) == "cudaErrorMemoryAllocation");
  CHECK(name(cudaMallocPitch(&ptr, &pitch, 1, SIZE_MAX)) == "cudaErrorMemoryAllocation");
  CHECK(name(cudaGetLastError()) == "cudaErrorMemoryAllocation");
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  REQUIRE_CUDA(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after == free_before);
}

TEST_CASE("runtime: pitched allocation", "[runtime][memory]") {
  void* ptr = nullptr;
  size_t pitch = 0;
  REQUIRE_CUDA(cudaMallocPitch(&ptr, &pitch, 100, 10));
  CHECK(pitch >= 100);
  std::vector<unsigned char> rows(pitch * 10, 0x5C);
  REQUIRE_CUDA(cudaMemcpy(ptr, rows.data(), rows.size(), cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaFree(ptr));
  CHECK(name(cudaMallocPitch(nullptr, &pitch, 100, 10)) == "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: pointer attributes", "[runtime][memory]") {
  void* on_device0 = nullptr;
  REQUIRE_CUDA(cudaMalloc(&on_device0, kMiB));
  REQUIRE_CUDA(cudaSetDevice(1));
  void* on_device1 = nullptr;
  REQUIRE_CUDA(cudaMalloc(&on_device1, kMiB));
  REQUIRE_CUDA(cudaSetDevice(0));

  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, on_device0));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 0);
  CHECK(attributes.devicePointer == on_device0);

  void* interior = static_cast<char*>(on_device1) + 100;
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, interior));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 1);
  CHECK(attributes.devicePointer == interior);

  // Since CUDA 11, plain host memory is reported, not refused.
  int on_stack = 0;
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, &on_stack));
  CHECK(attributes.type == cudaMemoryTypeUnregistered);
  CHECK(name(cudaPointerGetAttributes(nullptr, on_device0)) == "cudaErrorInvalidValue");
  cudaGetLastError();

  REQUIRE_CUDA(cudaFree(on_device0));
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaFree(on_device1));
  REQUIRE_CUDA(cudaSetDevice(0));
}
