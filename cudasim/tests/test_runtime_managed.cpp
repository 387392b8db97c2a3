// Managed memory (cudaMallocManaged) and the driver entry-point queries (cudaGetDriverEntryPoint,
// cudaGetDriverEntryPointByVersion and their _ptsz forms) through the simulated runtime.
#include <catch2/catch.hpp>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstring>

#include "runtime_support.h"

using namespace runtime_test;

// The per-thread-default-stream forms, which the header names only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM (NVIDIA's libcudart.so.13 exports both).
extern "C" cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* driverStatus);
extern "C" cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                             unsigned int cudaVersion, unsigned long long flags,
                                                             cudaDriverEntryPointQueryResult* driverStatus);

namespace {

// The driver's exported function `name` (the runtime has loaded libcuda.so.1 by then).
void* driver_function(const char* name) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return nullptr;
  void* function = dlsym(driver, name);
  dlclose(driver);
  return function;
}

// cudaGetDriverEntryPoint is deprecated in CUDA 13.0 (still exported and documented).
cudaError_t entry_point(const char* symbol, void** function, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* status) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return cudaGetDriverEntryPoint(symbol, function, flags, status);
#pragma GCC diagnostic pop
}

}  // namespace

TEST_CASE("runtime: cudaMallocManaged memory is valid on the host and for every copy", "[runtime][managed]") {
  size_t free_before = 0, total = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_before, &total));
  void* managed = nullptr;
  REQUIRE_CUDA(cudaMallocManaged(&managed, kMiB));
  size_t free_after = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after == free_before);  // charged to no device (see the README)
  auto* bytes = static_cast<unsigned char*>(managed);
  std::memset(bytes, 0x21, 64);
  REQUIRE_CUDA(cudaMemset(bytes + 64, 0x42, 64));
  unsigned char back[128] = {};
  REQUIRE_CUDA(cudaMemcpy(back, managed, sizeof back, cudaMemcpyDeviceToHost));
  CHECK(back[0] == 0x21);
  CHECK(back[127] == 0x42);
  REQUIRE_CUDA(cudaMemcpy(bytes + 1000, "managed", 8, cudaMemcpyDefault));
  CHECK(std::strcmp(reinterpret_cast<const char*>(bytes + 1000), "managed") == 0);

  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, bytes + 10));
  CHECK(attributes.type == cudaMemoryTypeManaged);
  CHECK(attributes.device == 0);
  CHECK(attributes.devicePointer == bytes + 10);
  CHECK(attributes.hostPointer == bytes + 10);
  REQUIRE_CUDA(cudaFree(managed));

  REQUIRE_CUDA(cudaMallocManaged(&managed, 4096, cudaMemAttachHost));
  REQUIRE_CUDA(cudaFree(managed));
  CHECK(cudaMallocManaged(&managed, 0) == cudaErrorInvalidValue);
  CHECK(cudaMallocManaged(nullptr, 16) == cudaErrorInvalidValue);
  CHECK(cudaMallocManaged(&managed, 16, 0) == cudaErrorInvalidValue);
  CHECK(cudaMallocManaged(&managed, 16, cudaMemAttachSingle) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("runtime: cudaGetDriverEntryPoint answers through the driver's cuGetProcAddress", "[runtime][entry-point]") {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  REQUIRE_CUDA(entry_point("cuMemAlloc", &function, cudaEnableDefault, &status));
  CHECK(status == cudaDriverEntryPointSuccess);
  CHECK(function != nullptr);
  CHECK(function == driver_function("cuMemAlloc_v2"));
  // Per-thread forms where asked for; cudaEnableDefault means the legacy stream here, the
  // per-thread default stream in the _ptsz entry point.
  REQUIRE_CUDA(entry_point("cuMemcpyAsync", &function, cudaEnablePerThreadDefaultStream, nullptr));
  CHECK(function == driver_function("cuMemcpyAsync_ptsz"));
  REQUIRE_CUDA(entry_point("cuMemcpyAsync", &function, cudaEnableLegacyStream, nullptr));
  CHECK(function == driver_function("cuMemcpyAsync"));
  REQUIRE_CUDA(entry_point("cuMemcpyAsync", &function, cudaEnableDefault, nullptr));
  CHECK(function == driver_function("cuMemcpyAsync"));
  REQUIRE_CUDA(cudaGetDriverEntryPoint_ptsz("cuMemcpyAsync", &function, cudaEnableDefault, nullptr));
  CHECK(function == driver_function("cuMemcpyAsync_ptsz"));
  REQUIRE_CUDA(cudaGetDriverEntryPoint_ptsz("cuMemAlloc", &function, cudaEnableDefault, nullptr));
  CHECK(function == driver_function("cuMemAlloc_v2"));  // no per-thread form: the legacy one

  // Unknown to the driver: success, a NULL function and the reason.
  function = &status;
  REQUIRE_CUDA(entry_point("cuNoSuchFunction", &function, cudaEnableDefault, &status));
  CHECK(function == nullptr);
  CHECK(status == cudaDriverEntryPointSymbolNotFound);

  // The entry point answered is callable.
  REQUIRE_CUDA(cudaFree(nullptr));  // a current context
  REQUIRE_CUDA(entry_point("cuMemGetInfo", &function, cudaEnableDefault, nullptr));
  size_t free = 0, total = 0;
  CHECK(reinterpret_cast<PFN_cuMemGetInfo_v3020>(function)(&free, &total) == CUDA_SUCCESS);
  CHECK(total == kDevice0Memory);

  CHECK(entry_point(nullptr, &function, cudaEnableDefault, nullptr) == cudaErrorInvalidValue);
  CHECK(entry_point("cuMemAlloc", nullptr, cudaEnableDefault, nullptr) == cudaErrorInvalidValue);
  CHECK(entry_point("cuMemAlloc", &function, 4, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("runtime: cudaGetDriverEntryPointByVersion", "[runtime][entry-point]") {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  REQUIRE_CUDA(cudaGetDriverEntryPointByVersion("cuMemCreate", &function, 10010, cudaEnableDefault, &status));
  CHECK(function == nullptr);
  CHECK(status == cudaDriverEntryPointVersionNotSufficent);
  REQUIRE_CUDA(cudaGetDriverEntryPointByVersion("cuMemCreate", &function, 10020, cudaEnableDefault, &status));
  CHECK(status == cudaDriverEntryPointSuccess);
  CHECK(function == driver_function("cuMemCreate"));
  // The version picks the ABI: 12.8 answers the no-argument cuCtxSynchronize, 13.0 its _v2.
  REQUIRE_CUDA(cudaGetDriverEntryPointByVersion("cuCtxSynchronize", &function, 12080, cudaEnableDefault, nullptr));
  CHECK(function == driver_function("cuCtxSynchronize"));
  REQUIRE_CUDA(cudaGetDriverEntryPointByVersion("cuCtxSynchronize", &function, 13000, cudaEnableDefault, nullptr));
  CHECK(function == driver_function("cuCtxSynchronize_v2"));
  REQUIRE_CUDA(cudaGetDriverEntryPointByVersion_ptsz("cuMemsetD8", &function, 13000, cudaEnableDefault, nullptr));
  CHECK(function == driver_function("cuMemsetD8_v2_ptds"));
  // Newer than the driver (13.0 here): cudaErrorInvalidValue.
  CHECK(cudaGetDriverEntryPointByVersion("cuMemCreate", &function, 13010, cudaEnableDefault, &status) ==
        cudaErrorInvalidValue);
  CHECK(cudaGetDriverEntryPointByVersion(nullptr, &function, 13000, cudaEnableDefault, nullptr) ==
        cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

// The per-thread-default-stream form, declared by the header only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count, cudaMemLocation location,
                                                 unsigned int flags, cudaStream_t stream);

TEST_CASE("runtime: managed-memory advice and prefetches, answered by the range attributes", "[runtime][managed]") {
  constexpr size_t kPage = 4096;
  void* managed = nullptr;
  REQUIRE_CUDA(cudaMallocManaged(&managed, 2 * kPage));
  auto* bytes = static_cast<unsigned char*>(managed);
  const cudaMemLocation device1{cudaMemLocationTypeDevice, 1};
  const cudaMemLocation host{cudaMemLocationTypeHost, 0};
  REQUIRE_CUDA(cudaMemAdvise(managed, 2 * kPage, cudaMemAdviseSetReadMostly, host));
  REQUIRE_CUDA(cudaMemAdvise(bytes + kPage, kPage, cudaMemAdviseSetPreferredLocation, device1));
  REQUIRE_CUDA(cudaMemAdvise(managed, 2 * kPage, cudaMemAdviseSetAccessedBy, device1));
  int value = -7;
  REQUIRE_CUDA(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeReadMostly, managed, 2 * kPage));
  CHECK(value == 1);
  REQUIRE_CUDA(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributePreferredLocation, bytes + kPage, kPage));
  CHECK(value == 1);
  REQUIRE_CUDA(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributePreferredLocation, managed, 2 * kPage));
  CHECK(value == cudaInvalidDeviceId);  // the first page has none
  int accessed[2] = {};
  REQUIRE_CUDA(cudaMemRangeGetAttribute(accessed, sizeof accessed, cudaMemRangeAttributeAccessedBy, managed, kPage));
  CHECK(accessed[0] == 1);
  CHECK(accessed[1] == cudaInvalidDeviceId);

  // Prefetches are ordered on their stream; the last location is the one asked for.
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  REQUIRE_CUDA(cudaMemPrefetchAsync(managed, 2 * kPage, device1, 0, stream));
  CHECK(name(cudaStreamQuery(stream)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  REQUIRE_CUDA(cudaMemPrefetchAsync_ptsz(managed, kPage, host, 0, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  int last = -7, last_type = -7;
  void* data[] = {&last, &last_type};
  size_t sizes[] = {4, 4};
  cudaMemRangeAttribute attributes[] = {cudaMemRangeAttributeLastPrefetchLocation,
                                        cudaMemRangeAttributeLastPrefetchLocationType};
  REQUIRE_CUDA(cudaMemRangeGetAttributes(data, sizes, attributes, 2, bytes + kPage, kPage));
  CHECK(last == 1);
  CHECK(last_type == cudaMemLocationTypeDevice);
  REQUIRE_CUDA(cudaMemRangeGetAttributes(data, sizes, attributes, 2, managed, kPage));
  CHECK(last == cudaCpuDeviceId);
  CHECK(last_type == cudaMemLocationTypeHost);

  // The documented refusals.
  void* device_memory = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device_memory, kPage));
  CHECK(name(cudaMemAdvise(device_memory, kPage, cudaMemAdviseSetReadMostly, host)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemAdvise(managed, 3 * kPage, cudaMemAdviseSetReadMostly, host)) == "cudaErrorInvalidValue");
  const cudaMemLocation nowhere{cudaMemLocationTypeDevice, 8};
  CHECK(name(cudaMemAdvise(managed, kPage, cudaMemAdviseSetPreferredLocation, nowhere)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaMemPrefetchAsync(managed, kPage, nowhere, 0, stream)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaMemPrefetchAsync(managed, kPage, host, 1, stream)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemPrefetchAsync(device_memory, kPage, host, 0, stream)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemRangeGetAttribute(&value, 8, cudaMemRangeAttributeReadMostly, managed, kPage)) ==
        "cudaErrorInvalidValue");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");

  REQUIRE_CUDA(cudaFree(device_memory));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(managed));
}

TEST_CASE("runtime: cudaStreamAttachMemAsync is ordered on its stream and checks its arguments", "[runtime][managed]") {
  void* managed = nullptr;
  REQUIRE_CUDA(cudaMallocManaged(&managed, 8192));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  REQUIRE_CUDA(cudaStreamAttachMemAsync(stream, managed));  // the header's defaults: whole, single
  CHECK(name(cudaStreamQuery(stream)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  REQUIRE_CUDA(cudaStreamAttachMemAsync(stream, managed, 8192, cudaMemAttachHost));
  REQUIRE_CUDA(cudaStreamAttachMemAsync(nullptr, managed, 0, cudaMemAttachGlobal));
  CHECK(name(cudaStreamAttachMemAsync(nullptr, managed, 0, cudaMemAttachSingle)) == "cudaErrorInvalidValue");
  CHECK(name(cudaStreamAttachMemAsync(stream, managed, 4096, cudaMemAttachGlobal)) == "cudaErrorInvalidValue");
  CHECK(name(cudaStreamAttachMemAsync(stream, managed, 0, 8)) == "cudaErrorInvalidValue");
  void* device = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, 4096));
  CHECK(name(cudaStreamAttachMemAsync(stream, device, 0, cudaMemAttachGlobal)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaFree(device));
  REQUIRE_CUDA(cudaFree(managed));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: batch prefetches and discards reach the driver's", "[runtime][managed]") {
  constexpr size_t kPage = 4096;
  void* managed = nullptr;
  REQUIRE_CUDA(cudaMallocManaged(&managed, 2 * kPage));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* ranges[] = {managed, static_cast<unsigned char*>(managed) + kPage};
  size_t sizes[] = {kPage, kPage};
  cudaMemLocation locations[] = {{cudaMemLocationTypeDevice, 1}, {cudaMemLocationTypeHost, 0}};
  size_t first_of[] = {0, 1};
  REQUIRE_CUDA(cudaMemPrefetchBatchAsync(ranges, sizes, 2, locations, first_of, 2, 0, stream));
  int value = -7;
  REQUIRE_CUDA(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeLastPrefetchLocation, managed, kPage));
  CHECK(value == 1);
  REQUIRE_CUDA(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeLastPrefetchLocation, ranges[1], kPage));
  CHECK(value == cudaCpuDeviceId);
  REQUIRE_CUDA(cudaMemDiscardBatchAsync(ranges, sizes, 2, 0, stream));
  REQUIRE_CUDA(cudaMemDiscardAndPrefetchBatchAsync(ranges, sizes, 2, locations + 1, first_of, 1, 0, stream));
  REQUIRE_CUDA(cudaMemRangeGetAttribute(&value, 4, cudaMemRangeAttributeLastPrefetchLocation, managed, 2 * kPage));
  CHECK(value == cudaCpuDeviceId);
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(name(cudaMemDiscardBatchAsync(ranges, sizes, 2, 0, nullptr)) == "cudaErrorInvalidValue");  // legacy stream
  CHECK(name(cudaMemPrefetchBatchAsync(ranges, sizes, 2, nullptr, first_of, 2, 0, stream)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemPrefetchBatchAsync(ranges, sizes, 2, locations, first_of, 2, 1, stream)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFree(managed));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}
