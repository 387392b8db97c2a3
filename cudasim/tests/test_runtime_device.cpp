// Device management, versions and error reporting of the simulated runtime.
#include <catch2/catch.hpp>
#include <cuda_profiler_api.h>

#include <cstring>
#include <string>
#include <thread>

#include "runtime_support.h"

using namespace runtime_test;

TEST_CASE("runtime: device count and properties come from the driver", "[runtime][device]") {
  int count = 0;
  REQUIRE_CUDA(cudaGetDeviceCount(&count));
  REQUIRE(count == 2);

  cudaDeviceProp prop{};
  REQUIRE_CUDA(cudaGetDeviceProperties(&prop, 0));
  CHECK(std::strlen(prop.name) > 0);
  CHECK(prop.totalGlobalMem == kDevice0Memory);
  CHECK(prop.major >= 7);
  CHECK(prop.multiProcessorCount > 0);
  CHECK(prop.unifiedAddressing == 1);
  CHECK(prop.memoryPoolsSupported == 1);

  int value = -1;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK(value == prop.major);
  REQUIRE_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMinor, 0));
  CHECK(value == prop.minor);
  REQUIRE_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0));
  CHECK(value == prop.multiProcessorCount);
  REQUIRE_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrMemoryPoolsSupported, 0));
  CHECK(value == 1);

  cudaDeviceProp second{};
  REQUIRE_CUDA(cudaGetDeviceProperties(&second, 1));
  CHECK(second.totalGlobalMem == kDevice1Memory);
}

TEST_CASE("runtime: misuse of device calls returns the documented codes", "[runtime][device]") {
  cudaDeviceProp prop{};
  CHECK(name(cudaGetDeviceProperties(&prop, 2)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaGetDeviceProperties(nullptr, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaSetDevice(-1)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaSetDevice(2)) == "cudaErrorInvalidDevice");
  int value = 0;
  CHECK(name(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 7)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaDeviceGetAttribute(nullptr, cudaDevAttrMultiProcessorCount, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetDeviceCount(nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetDevice(nullptr)) == "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: the current device is per host thread", "[runtime][device]") {
  REQUIRE_CUDA(cudaSetDevice(1));
  int device = -1;
  REQUIRE_CUDA(cudaGetDevice(&device));
  CHECK(device == 1);

  int other_thread_device = -1;
  cudaError_t other_status = cudaErrorUnknown;
  std::thread([&] { other_status = cudaGetDevice(&other_thread_device); }).join();
  CHECK(name(other_status) == "cudaSuccess");
  CHECK(other_thread_device == 0);

  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaGetDevice(&device));
  CHECK(device == 0);
}

TEST_CASE("runtime: versions", "[runtime][device]") {
  int runtime_version = 0;
  REQUIRE_CUDA(cudaRuntimeGetVersion(&runtime_version));
  CHECK(runtime_version == 13000);
  int driver_version = 0;
  REQUIRE_CUDA(cudaDriverGetVersion(&driver_version));
  CHECK(driver_version >= 13000);
  CHECK(name(cudaRuntimeGetVersion(nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaDriverGetVersion(nullptr)) == "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: error names and strings are NVIDIA's", "[runtime][errors]") {
  CHECK(std::string(cudaGetErrorName(cudaSuccess)) == "cudaSuccess");
  CHECK(std::string(cudaGetErrorString(cudaSuccess)) == "no error");
  CHECK(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) == "cudaErrorMemoryAllocation");
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidValue)) == "invalid argument");
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidDevice)) == "invalid device ordinal");
  CHECK(std::string(cudaGetErrorString(cudaErrorNoDevice)) == "no CUDA-capable device is detected");
  CHECK(std::string(cudaGetErrorString(cudaErrorStubLibrary)) == "CUDA driver is a stub library");
  CHECK(std::string(cudaGetErrorString(cudaErrorInsufficientDriver)) ==
        "CUDA driver version is insufficient for CUDA runtime version");
  CHECK(std::string(cudaGetErrorString(cudaErrorNotReady)) == "device not ready");
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidResourceHandle)) == "invalid resource handle");
  CHECK(std::string(cudaGetErrorName(static_cast<cudaError_t>(12345))) == "unrecognized error code");
  CHECK(std::string(cudaGetErrorString(static_cast<cudaError_t>(12345))) == "unrecognized error code");
}

TEST_CASE("runtime: the last error is per thread, peeked or taken", "[runtime][errors]") {
  cudaGetLastError();
  REQUIRE(name(cudaMalloc(nullptr, 16)) == "cudaErrorInvalidValue");

  // A later successful call does not clear it; peeking does not either; taking does.
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMalloc(&ptr, 4096));
  CHECK(name(cudaPeekAtLastError()) == "cudaErrorInvalidValue");
  CHECK(name(cudaPeekAtLastError()) == "cudaErrorInvalidValue");

  cudaError_t seen_by_other_thread = cudaErrorUnknown;
  std::thread([&] { seen_by_other_thread = cudaGetLastError(); }).join();
  CHECK(name(seen_by_other_thread) == "cudaSuccess");

  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetLastError()) == "cudaSuccess");
  CHECK(name(cudaPeekAtLastError()) == "cudaSuccess");
  REQUIRE_CUDA(cudaFree(ptr));
}

TEST_CASE("runtime: cudaErrorNotReady is a status, not a recorded error", "[runtime][errors]") {
  cudaGetLastError();
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  CHECK(name(cudaStreamQuery(stream)) == "cudaErrorNotReady");
  CHECK(name(cudaPeekAtLastError()) == "cudaSuccess");
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(name(cudaStreamQuery(stream)) == "cudaSuccess");
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: cudaDeviceReset destroys the device's memory and starts afresh", "[runtime][device]") {
  REQUIRE_CUDA(cudaSetDevice(1));
  void* ptr = nullptr;
  REQUIRE_CUDA(cudaMalloc(&ptr, kMiB));
  size_t free_before = 0, total = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_before, &total));

  REQUIRE_CUDA(cudaDeviceReset());
  // The allocation went with the context: freeing it now is freeing an unknown pointer.
  CHECK(name(cudaFree(ptr)) == "cudaErrorInvalidValue");
  cudaGetLastError();

  size_t free_after = 0;
  REQUIRE_CUDA(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after > free_before);
  REQUIRE_CUDA(cudaMalloc(&ptr, kMiB));
  REQUIRE_CUDA(cudaFree(ptr));
  REQUIRE_CUDA(cudaSetDevice(0));
}

TEST_CASE("runtime: device flags, limits, cache configuration, priorities, profiler", "[runtime][device]") {
  REQUIRE_CUDA(cudaSetDevice(1));
  unsigned flags = 0;
  REQUIRE_CUDA(cudaGetDeviceFlags(&flags));
  CHECK(flags == cudaDeviceMapHost);  // mapped host memory is always on
  REQUIRE_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  REQUIRE_CUDA(cudaGetDeviceFlags(&flags));
  CHECK(flags == (cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
  CHECK(name(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield)) == "cudaErrorInvalidValue");
  CHECK(name(cudaSetDeviceFlags(0x100)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetDeviceFlags(nullptr)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleAuto));

  size_t value = 0;
  REQUIRE_CUDA(cudaDeviceGetLimit(&value, cudaLimitMallocHeapSize));
  CHECK(value == 8 * kMiB);
  REQUIRE_CUDA(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 * kMiB));
  REQUIRE_CUDA(cudaDeviceGetLimit(&value, cudaLimitMallocHeapSize));
  CHECK(value == 32 * kMiB);
  CHECK(name(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 3)) == "cudaErrorUnsupportedLimit");
  CHECK(name(cudaDeviceSetLimit(static_cast<cudaLimit>(99), 3)) == "cudaErrorInvalidValue");
  cudaFuncCache cache = cudaFuncCachePreferL1;
  REQUIRE_CUDA(cudaDeviceGetCacheConfig(&cache));
  CHECK(cache == cudaFuncCachePreferNone);
  REQUIRE_CUDA(cudaDeviceSetCacheConfig(cudaFuncCachePreferEqual));
  REQUIRE_CUDA(cudaDeviceGetCacheConfig(&cache));
  CHECK(cache == cudaFuncCachePreferEqual);
  int least = 1, greatest = 1;
  REQUIRE_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(least == 0);
  CHECK(greatest == -5);
  CHECK_CUDA(cudaProfilerStart());
  CHECK_CUDA(cudaProfilerStop());
  // The settings go with the primary context.
  REQUIRE_CUDA(cudaDeviceReset());
  REQUIRE_CUDA(cudaDeviceGetLimit(&value, cudaLimitMallocHeapSize));
  CHECK(value == 8 * kMiB);
  REQUIRE_CUDA(cudaSetDevice(0));
}

TEST_CASE("runtime: PCI bus ids, device choice, valid devices, device initialisation", "[runtime][device]") {
  char id[16] = {};
  REQUIRE_CUDA(cudaDeviceGetPCIBusId(id, sizeof id, 1));
  CHECK(std::string(id) == "0000:02:00.0");
  int device = -1;
  REQUIRE_CUDA(cudaDeviceGetByPCIBusId(&device, "0000:02:00.0"));
  CHECK(device == 1);
  REQUIRE_CUDA(cudaDeviceGetByPCIBusId(&device, "01:00.0"));
  CHECK(device == 0);
  CHECK(name(cudaDeviceGetByPCIBusId(&device, "0000:07:00.0")) == "cudaErrorInvalidDevice");
  CHECK(name(cudaDeviceGetByPCIBusId(&device, "not a bus id")) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceGetByPCIBusId(nullptr, "01:00.0")) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceGetPCIBusId(id, sizeof id, 2)) == "cudaErrorInvalidDevice");

  // Device 1 has less memory: asking for more than it has chooses device 0; no more than device 1
  // has: the lowest ordinal that fits.
  cudaDeviceProp want{};
  want.major = 9;
  want.totalGlobalMem = kDevice1Memory + 1;
  REQUIRE_CUDA(cudaChooseDevice(&device, &want));
  CHECK(device == 0);
  want.totalGlobalMem = kDevice1Memory;
  REQUIRE_CUDA(cudaChooseDevice(&device, &want));
  CHECK(device == 0);
  CHECK(name(cudaChooseDevice(&device, nullptr)) == "cudaErrorInvalidValue");

  // A thread that selects no device works on the first valid one.
  int valid[2] = {1, 0};
  REQUIRE_CUDA(cudaSetValidDevices(valid, 2));
  int seen = -1;
  std::thread([&] { seen = cudaGetDevice(&seen) == cudaSuccess ? seen : -2; }).join();
  CHECK(seen == 1);
  REQUIRE_CUDA(cudaSetValidDevices(nullptr, 0));
  std::thread([&] { seen = cudaGetDevice(&seen) == cudaSuccess ? seen : -2; }).join();
  CHECK(seen == 0);
  int bad[1] = {5};
  CHECK(name(cudaSetValidDevices(bad, 1)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaSetValidDevices(nullptr, 1)) == "cudaErrorInvalidValue");
  CHECK(name(cudaSetValidDevices(valid, 3)) == "cudaErrorInvalidValue");  // more than there are devices

  // cudaInitDevice initialises without making the device current, with its flags when valid.
  std::thread([&] {
    seen = -1;
    if (cudaInitDevice(1, cudaDeviceScheduleBlockingSync, cudaInitDeviceFlagsAreValid) != cudaSuccess) return;
    int current = -1;
    unsigned flags = 0;
    if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(1) != cudaSuccess ||
        cudaGetDeviceFlags(&flags) != cudaSuccess)
      return;
    seen = current == 0 && (flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync ? 1 : 0;
  }).join();
  CHECK(seen == 1);
  REQUIRE_CUDA(cudaInitDevice(1, 0, cudaInitDeviceFlagsAreValid));  // back to the default flags
  CHECK(name(cudaInitDevice(2, 0, 0)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaInitDevice(0, 0, 2)) == "cudaErrorInvalidValue");
  CHECK(name(cudaInitDevice(0, cudaDeviceScheduleSpin | cudaDeviceScheduleYield, cudaInitDeviceFlagsAreValid)) ==
        "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaInitDevice(0, cudaDeviceScheduleSpin | cudaDeviceScheduleYield, 0));  // flags not applied
}

TEST_CASE("runtime: shared memory bank configuration and host atomics", "[runtime][device]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaSharedMemConfig config = cudaSharedMemBankSizeDefault;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // deprecated, still exported: tested as such
  REQUIRE_CUDA(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
  REQUIRE_CUDA(cudaDeviceGetSharedMemConfig(&config));
  CHECK(config == cudaSharedMemBankSizeFourByte);  // fixed on these devices: the setting has no effect
  CHECK(name(cudaDeviceSetSharedMemConfig(static_cast<cudaSharedMemConfig>(3))) == "cudaErrorInvalidValue");
  CHECK(name(cudaDeviceGetSharedMemConfig(nullptr)) == "cudaErrorInvalidValue");
#pragma GCC diagnostic pop
  const cudaAtomicOperation ops[2] = {cudaAtomicOperationIntegerAdd, cudaAtomicOperationCAS};
  unsigned caps[2] = {9, 9};
  REQUIRE_CUDA(cudaDeviceGetHostAtomicCapabilities(caps, ops, 2, 1));
  CHECK((caps[0] == 0 && caps[1] == 0));
  CHECK(name(cudaDeviceGetHostAtomicCapabilities(caps, ops, 2, 4)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaDeviceGetHostAtomicCapabilities(caps, ops, 0, 0)) == "cudaErrorInvalidValue");
}

TEST_CASE("runtime: cudaMalloc3D gives pitched rows for every slice", "[runtime][device][memory]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaPitchedPtr p{};
  REQUIRE_CUDA(cudaMalloc3D(&p, cudaExtent{100, 3, 4}));
  CHECK((p.ptr != nullptr && p.pitch >= 100 && p.xsize == 100 && p.ysize == 3));
  // The last row of the last slice is inside the allocation.
  REQUIRE_CUDA(cudaMemset(static_cast<char*>(p.ptr) + (3 * 4 - 1) * p.pitch, 0, 100));
  REQUIRE_CUDA(cudaFree(p.ptr));
  CHECK(name(cudaMalloc3D(nullptr, cudaExtent{1, 1, 1})) == "cudaErrorInvalidValue");
  CHECK(name(cudaMalloc3D(&p, cudaExtent{1, SIZE_MAX, 2})) == "cudaErrorMemoryAllocation");
}

TEST_CASE("runtime: async notifications go to the driver", "[runtime][device]") {
  cudaAsyncCallbackHandle_t handle = nullptr;
  const cudaAsyncCallback callback = [](cudaAsyncNotificationInfo_t*, void*, cudaAsyncCallbackHandle_t) {};
  REQUIRE_CUDA(cudaDeviceRegisterAsyncNotification(1, callback, nullptr, &handle));
  CHECK(name(cudaDeviceUnregisterAsyncNotification(0, handle)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaDeviceUnregisterAsyncNotification(1, handle));
  CHECK(name(cudaDeviceRegisterAsyncNotification(2, callback, nullptr, &handle)) == "cudaErrorInvalidDevice");
}

TEST_CASE("runtime: peer atomic capabilities come from the driver", "[runtime][device][peers]") {
  const cudaAtomicOperation ops[2] = {cudaAtomicOperationIntegerAdd, cudaAtomicOperationFloatMax};
  unsigned caps[2] = {0, 9};
  REQUIRE_CUDA(cudaDeviceGetP2PAtomicCapabilities(caps, ops, 2, 0, 1));
  CHECK((caps[0] & cudaAtomicCapabilityScalar64) != 0);
  CHECK(caps[1] == 0);
  CHECK(name(cudaDeviceGetP2PAtomicCapabilities(caps, ops, 2, 1, 1)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaDeviceGetP2PAtomicCapabilities(caps, ops, 2, 0, 5)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaDeviceGetP2PAtomicCapabilities(caps, ops, 0, 0, 1)) == "cudaErrorInvalidValue");
}

TEST_CASE("runtime: GPUDirect RDMA flushes and the persisting L2 reset", "[runtime][device]") {
  REQUIRE_CUDA(cudaSetDevice(1));
  int options = 0;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, 1));
  CHECK((options & cudaFlushGPUDirectRDMAWritesOptionHost) != 0);
  REQUIRE_CUDA(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                  cudaFlushGPUDirectRDMAWritesToAllDevices));
  CHECK(name(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                static_cast<cudaFlushGPUDirectRDMAWritesScope>(1))) ==
        "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaCtxResetPersistingL2Cache());
  REQUIRE_CUDA(cudaSetDevice(0));
}
