// The simulated driver: initialisation, devices, contexts, device memory, capacity and faults.
// The Meson test runs this with CUDASIM_DEVICE_MEMORY=8GiB,2GiB (two devices) and the default
// 300 MiB context overhead; scenarios that need another configuration run in a forked child.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace driver_test;

TEST_CASE("before cuInit calls answer CUDA_ERROR_NOT_INITIALIZED", "[driver][init]") {
  int rc = in_child([] {
    int count = -1;
    CUdeviceptr ptr = 0;
    CUcontext ctx = nullptr;
    int version = 0;
    const char* text = nullptr;
    CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuMemAlloc(&ptr, 1024) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_ERROR_NOT_INITIALIZED);
    // These work without initialisation, as documented.
    CHILD_CHECK(cuDriverGetVersion(&version) == CUDA_SUCCESS && version == 13000);
    CHILD_CHECK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text) == CUDA_SUCCESS);
    CHILD_CHECK(std::strcmp(text, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    CHILD_CHECK(cuInit(1) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("devices follow CUDASIM_DEVICE_MEMORY", "[driver][devices]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  int count = 0;
  REQUIRE(cuDeviceGetCount(&count) == CUDA_SUCCESS);
  REQUIRE(count == 2);
  size_t total = 0;
  REQUIRE(cuDeviceTotalMem(&total, 0) == CUDA_SUCCESS);
  CHECK(total == 8 * kGiB);
  REQUIRE(cuDeviceTotalMem(&total, 1) == CUDA_SUCCESS);
  CHECK(total == 2 * kGiB);
  CUdevice dev = -1;
  CHECK(cuDeviceGet(&dev, 1) == CUDA_SUCCESS);
  CHECK(dev == 1);
  CHECK(cuDeviceGet(&dev, 2) == CUDA_ERROR_INVALID_DEVICE);
  char name[64] = {};
  CHECK(cuDeviceGetName(name, sizeof name, 0) == CUDA_SUCCESS);
  CHECK(std::strlen(name) > 0);

  auto attribute = [](CUdevice_attribute a) {
    int value = -1;
    REQUIRE(cuDeviceGetAttribute(&value, a, 0) == CUDA_SUCCESS);
    return value;
  };
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 1);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) > 0);
  int value = 0;
  CHECK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("sizes take units and one entry per device", "[driver][config]") {
  int rc = in_child([] {
    setenv("CUDASIM_DEVICES", "3", 1);
    setenv("CUDASIM_DEVICE_MEMORY", "1GiB, 512M,3000000", 1);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    size_t total = 0;
    CHILD_CHECK(cuDeviceTotalMem(&total, 0) == CUDA_SUCCESS && total == kGiB);
    CHILD_CHECK(cuDeviceTotalMem(&total, 1) == CUDA_SUCCESS && total == 512 * kMiB);
    CHILD_CHECK(cuDeviceTotalMem(&total, 2) == CUDA_SUCCESS && total == 3000000);
    return 0;
  });
  REQUIRE(rc == 0);
  rc = in_child([] {
    setenv("CUDASIM_ALLOC_LATENCY_US", "10", 1);  // well-formed cost-model settings are accepted
    setenv("CUDASIM_FREE_LATENCY_US", "0", 1);
    setenv("CUDASIM_CONTEXT_OVERHEAD", "0 B", 1);
    CHILD_CHECK(start_primary_context());
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == total);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("CUDASIM_ALLOC_LATENCY_US and CUDASIM_FREE_LATENCY_US slow cuMemAlloc and cuMemFree",
          "[driver][config]") {
  int rc = in_child([] {
    CHILD_CHECK(start_with_test_latencies());
    CUdeviceptr ptr = 0;
    CHILD_CHECK(succeeds_slowly([&] { return cuMemAlloc(&ptr, 4096); }));
    CHILD_CHECK(succeeds_slowly([&] { return cuMemFree(ptr); }));
    return 0;
  });
  REQUIRE(rc == 0);
}

namespace {

// The process's resident set (VmRSS in /proc/self/status), in bytes; 0 when unreadable.
size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmRSS:  123 kB"
  }
  return 0;
}

}  // namespace

TEST_CASE("without CUDASIM_* variables: one 16 GiB device, 300 MiB per context, memory costs no RAM",
          "[driver][config]") {
  int rc = in_child([] {
    std::vector<std::string> names;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string variable = *entry;
      if (variable.rfind("CUDASIM_", 0) == 0) names.push_back(variable.substr(0, variable.find('=')));
    }
    for (const std::string& variable : names) unsetenv(variable.c_str());
    CHILD_CHECK(start_primary_context());
    int count = 0;
    CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 1);
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
    CHILD_CHECK(total == 16 * kGiB);
    CHILD_CHECK(free == total - 300 * kMiB);
    const size_t resident_before = resident_bytes();
    CHILD_CHECK(resident_before > 0);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 12 * kGiB) == CUDA_SUCCESS);
    const size_t resident_after = resident_bytes();
    CHILD_CHECK(resident_after < resident_before + 64 * kMiB);
    CHILD_CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("a malformed variable is named on stderr and cuInit fails", "[driver][config]") {
  for (const char* variable : {"CUDASIM_DEVICE_MEMORY", "CUDASIM_DEVICES", "CUDASIM_CONTEXT_OVERHEAD",
                               "CUDASIM_FAIL_ALLOC_AFTER", "CUDASIM_ALLOC_LATENCY_US", "CUDASIM_DRIVER_VERSION",
                               "CUDASIM_LATENCY"}) {
    INFO(variable);
    char path[] = "/tmp/cudasim-stderr-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    int rc = in_child([&] {
      setenv(variable, "lots", 1);
      dup2(fd, 2);
      CHILD_CHECK(cuInit(0) == CUDA_ERROR_INVALID_VALUE);
      CHILD_CHECK(cuInit(0) == CUDA_ERROR_INVALID_VALUE);  // the answer sticks
      int count = 0;
      CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
      return 0;
    });
    close(fd);
    std::ifstream in(path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    std::remove(path);
    CHECK(rc == 0);
    CHECK(text.find(variable) != std::string::npos);
    CHECK(text.find("lots") != std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  }
}

TEST_CASE("calls that need a context answer CUDA_ERROR_INVALID_CONTEXT without one", "[driver][contexts]") {
  int rc = in_child([] {
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUdeviceptr ptr = 0;
    size_t free = 0, total = 0;
    CUstream stream = nullptr;
    CUcontext ctx = reinterpret_cast<CUcontext>(1);
    CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx == nullptr);
    CHILD_CHECK(cuMemAlloc(&ptr, 1024) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuStreamCreate(&stream, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuCtxPopCurrent(&ctx) == CUDA_ERROR_INVALID_CONTEXT);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("context life cycle and the context overhead", "[driver][contexts]") {
  int rc = in_child([] {
    setenv("CUDASIM_DEVICES", "2", 1);
    setenv("CUDASIM_DEVICE_MEMORY", "1G", 1);
    setenv("CUDASIM_CONTEXT_OVERHEAD", "100M", 1);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUcontext primary = nullptr, created = nullptr, popped = nullptr, current = nullptr;
    unsigned flags = 0;
    int active = -1;
    CHILD_CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHILD_CHECK(cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 1);
    CHILD_CHECK(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
    CHILD_CHECK(total == kGiB && free == kGiB - 100 * kMiB);

    // A created context takes another overhead and becomes current.
    CHILD_CHECK(cuCtxCreate(&created, nullptr, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == created);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == kGiB - 200 * kMiB);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 64 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == kGiB - 264 * kMiB);
    CUdevice dev = -1;
    CHILD_CHECK(cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 0);

    // Destroying it frees its memory and overhead and pops it.
    CHILD_CHECK(cuCtxDestroy(created) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == primary);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == kGiB - 100 * kMiB);
    CHILD_CHECK(cuMemFree(ptr) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuCtxDestroy(created) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHILD_CHECK(cuCtxPushCurrent(created) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHILD_CHECK(cuCtxDestroy(primary) == CUDA_ERROR_INVALID_CONTEXT);  // primary: release it instead

    // Push/pop nest.
    CHILD_CHECK(cuCtxPushCurrent(primary) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == primary);
    CHILD_CHECK(cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == primary);

    // Releasing the last reference destroys the primary context and its memory.
    CHILD_CHECK(cuMemAlloc(&ptr, kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHILD_CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuMemAlloc(&ptr, kMiB) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHILD_CHECK(cuDevicePrimaryCtxRetain(&current, 0) == CUDA_SUCCESS && current == primary);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == kGiB - 100 * kMiB);

    // Reset destroys everything the primary context holds.
    CHILD_CHECK(cuMemAlloc(&ptr, kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHILD_CHECK(cuCtxCreate(&created, nullptr, 0, 7) == CUDA_ERROR_INVALID_DEVICE);

    // A new context reuses the destroyed one's handle (as a real driver may reuse the address); the
    // handle then names the new, live context, with a new id.
    unsigned long long old_id = 0, new_id = 0;
    CUcontext again = nullptr;
    CHILD_CHECK(cuCtxCreate(&created, nullptr, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxGetId(created, &old_id) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxDestroy(created) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxCreate(&again, nullptr, 0, 0) == CUDA_SUCCESS && again == created);
    CHILD_CHECK(cuCtxGetId(again, &new_id) == CUDA_SUCCESS && new_id != old_id);
    CHILD_CHECK(cuMemAlloc(&ptr, kMiB) == CUDA_SUCCESS && cuMemFree(ptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxDestroy(again) == CUDA_SUCCESS);

    // But not while a thread still has the destroyed context on its stack: that thread must keep
    // seeing CUDA_ERROR_CONTEXT_IS_DESTROYED.
    CUcontext held = nullptr, other = nullptr;
    CHILD_CHECK(cuCtxCreate(&held, nullptr, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxPushCurrent(held) == CUDA_SUCCESS);  // twice on this thread's stack
    CHILD_CHECK(cuCtxDestroy(held) == CUDA_SUCCESS);      // pops one
    CHILD_CHECK(cuCtxCreate(&other, nullptr, 0, 0) == CUDA_SUCCESS && other != held);
    CHILD_CHECK(cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == other);
    CHILD_CHECK(cuMemAlloc(&ptr, kMiB) == CUDA_ERROR_CONTEXT_IS_DESTROYED);  // `held` is current again
    CHILD_CHECK(cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == held);
    CHILD_CHECK(cuCtxDestroy(other) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("memory round trips and alignment", "[driver][memory]") {
  primary_context();
  CUdeviceptr small = 0, large = 0;
  REQUIRE(cuMemAlloc(&small, 1000) == CUDA_SUCCESS);
  REQUIRE(cuMemAlloc(&large, 3 * kMiB) == CUDA_SUCCESS);
  CHECK(small % 512 == 0);
  CHECK(large % (2 * kMiB) == 0);

  std::vector<unsigned> host(1000 / sizeof(unsigned));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned>(i * 7);
  REQUIRE(cuMemcpyHtoD(small, host.data(), host.size() * sizeof(unsigned)) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoD(large + kMiB, small, host.size() * sizeof(unsigned)) == CUDA_SUCCESS);
  std::vector<unsigned> back(host.size());
  REQUIRE(cuMemcpyDtoH(back.data(), large + kMiB, back.size() * sizeof(unsigned)) == CUDA_SUCCESS);
  CHECK(back == host);

  REQUIRE(cuMemsetD32(large, 0xdeadbeef, 16) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(large + 64, 0x5a, 3) == CUDA_SUCCESS);
  unsigned words[17] = {};
  REQUIRE(cuMemcpy(reinterpret_cast<CUdeviceptr>(words), large, sizeof words) == CUDA_SUCCESS);
  CHECK(words[0] == 0xdeadbeef);
  CHECK(words[15] == 0xdeadbeef);
  CHECK(words[16] == 0x005a5a5a);

  // Unified addressing: another device's memory has distinct addresses.
  CUcontext ctx1 = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxPushCurrent(ctx1) == CUDA_SUCCESS);
  CUdeviceptr other = 0;
  REQUIRE(cuMemAlloc(&other, 3 * kMiB) == CUDA_SUCCESS);
  int ordinal = -1;
  CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, other) == CUDA_SUCCESS);
  CHECK(ordinal == 1);
  CHECK((other + 3 * kMiB <= large || large + 3 * kMiB <= other));
  REQUIRE(cuMemFree(other) == CUDA_SUCCESS);
  REQUIRE(cuCtxPopCurrent(nullptr) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);

  CHECK(cuMemFree(small) == CUDA_SUCCESS);
  CHECK(cuMemFree(large) == CUDA_SUCCESS);
}

TEST_CASE("pitch allocations", "[driver][memory]") {
  primary_context();
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  REQUIRE(cuMemAllocPitch(&ptr, &pitch, 1000, 10, 4) == CUDA_SUCCESS);
  CHECK(pitch >= 1000);
  CHECK(pitch % 512 == 0);
  size_t size = 0;
  CHECK(cuMemGetAddressRange(nullptr, &size, ptr + 5) == CUDA_SUCCESS);
  CHECK(size == pitch * 10);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 1000, 10, 3) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 1000, 10, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 1000, 10, 32) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 0, 10, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 1000, 0, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocPitch(&ptr, nullptr, 1000, 10, 4) == CUDA_ERROR_INVALID_VALUE);
  // An invalid argument is reported as such even where the size would also be too large.
  CHECK(cuMemAllocPitch(&ptr, &pitch, SIZE_MAX, SIZE_MAX, 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("sizes whose rounding or product would overflow are out of memory, not wrapped", "[driver][memory]") {
  primary_context();
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  REQUIRE(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  // Sizes whose rounding up (to 512 bytes, a page or a 2 MiB pool block) would wrap past SIZE_MAX.
  for (const std::size_t huge : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 255, SIZE_MAX - 511, SIZE_MAX - 2 * kMiB + 2,
                                 SIZE_MAX / 2 + 1}) {
    INFO(huge);
    CHECK(cuMemAlloc(&ptr, huge) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocAsync(&ptr, huge, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocFromPoolAsync(&ptr, huge, pool, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocManaged(&ptr, huge, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_OUT_OF_MEMORY);
  }
  // Just more than the device holds.
  CHECK(cuMemAlloc(&ptr, total + 1) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAllocAsync(&ptr, total + 1, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
  size_t pitch = 0;
  // 4 KiB rows: 2^52 rows wrap pitch x height to 0, 2^52 + 1 rows to one row.
  CHECK(cuMemAllocPitch(&ptr, &pitch, 4096, std::size_t{1} << 52, 4) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 4096, (std::size_t{1} << 52) + 1, 4) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 1, SIZE_MAX, 16) == CUDA_ERROR_OUT_OF_MEMORY);   // 512 x SIZE_MAX
  CHECK(cuMemAllocPitch(&ptr, &pitch, SIZE_MAX - 10, 1, 4) == CUDA_ERROR_OUT_OF_MEMORY);  // the pitch wraps
  CHECK(cuMemAllocPitch(&ptr, &pitch, SIZE_MAX, SIZE_MAX, 8) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAllocPitch(&ptr, &pitch, 512, total / 512 + 1, 4) == CUDA_ERROR_OUT_OF_MEMORY);  // no wrap, too large
  // Nothing was taken: the whole device is still there.
  REQUIRE(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
  CHECK(free_after == free_before);
  REQUIRE(cuMemAlloc(&ptr, 1 << 20) == CUDA_SUCCESS);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("set counts whose size in bytes would overflow are invalid, not wrapped", "[driver][memory]") {
  primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
  // 2^63 16-bit or 2^62 32-bit elements are 2^64 bytes, which wraps to 0 (a range that is no
  // check at all); one element more wraps to one element's size. Each must be refused, not written.
  for (const std::size_t count : {SIZE_MAX / 2 + 1, SIZE_MAX / 2 + 2, SIZE_MAX}) {
    INFO(count);
    CHECK(cuMemsetD16(ptr, 0x1234, count) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemsetD16Async(ptr, 0x1234, count, nullptr) == CUDA_ERROR_INVALID_VALUE);
  }
  for (const std::size_t count : {SIZE_MAX / 4 + 1, SIZE_MAX / 4 + 2, SIZE_MAX}) {
    INFO(count);
    CHECK(cuMemsetD32(ptr, 0x12345678u, count) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemsetD32Async(ptr, 0x12345678u, count, nullptr) == CUDA_ERROR_INVALID_VALUE);
  }
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);  // nothing was queued to write past the allocation
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("pointer queries", "[driver][memory]") {
  CUcontext ctx = primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, ptr + 100) == CUDA_SUCCESS);
  CHECK(base == ptr);
  CHECK(size == 4096);
  CUmemorytype type{};
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr + 1) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CUcontext owner = nullptr;
  CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, ptr) == CUDA_SUCCESS);
  CHECK(owner == ctx);
  CUipcMemHandle handle{};
  CHECK(cuIpcGetMemHandle(&handle, ptr) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(ptr) == CUDA_SUCCESS);

  int host_value = 0;
  auto host = reinterpret_cast<CUdeviceptr>(&host_value);
  CHECK(cuMemGetAddressRange(&base, &size, ptr) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuMemGetAddressRange(&base, &size, host) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuIpcGetMemHandle(&handle, ptr) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("cuPointerGetAttributes answers several attributes at once, null values where none applies",
          "[driver][memory]") {
  CUcontext ctx = primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 8192) == CUDA_SUCCESS);
  CUcontext context = nullptr;
  CUmemorytype type{};
  CUdeviceptr device_pointer = 0, start = 0;
  void* host = reinterpret_cast<void*>(1);
  int ordinal = -1, managed = -1;
  size_t size = 0;
  unsigned long long buffer_id = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                      CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* data[] = {&context, &type, &device_pointer, &host, &ordinal, &managed, &start, &size, &buffer_id};
  constexpr unsigned kCount = sizeof attributes / sizeof attributes[0];
  REQUIRE(cuPointerGetAttributes(kCount, attributes, data, ptr + 100) == CUDA_SUCCESS);
  CHECK(context == ctx);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK(device_pointer == ptr + 100);
  CHECK(host == nullptr);  // device memory has no host pointer: its null value, not an error
  CHECK(ordinal == 0);
  CHECK(managed == 0);
  CHECK(start == ptr);
  CHECK(size == 8192);
  unsigned long long single_id = 0;
  CHECK(cuPointerGetAttribute(&single_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr) == CUDA_SUCCESS);
  CHECK(buffer_id == single_id);
  int ipc_capable = -1;  // cuMemAlloc memory has legacy IPC handles; pool memory has none
  CHECK(cuPointerGetAttribute(&ipc_capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr + 100) ==
        CUDA_SUCCESS);
  CHECK(ipc_capable == 1);
  CUdeviceptr pooled = 0;
  REQUIRE(cuMemAllocAsync(&pooled, 4096, nullptr) == CUDA_SUCCESS);
  CHECK(cuPointerGetAttribute(&ipc_capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, pooled) ==
        CUDA_SUCCESS);
  CHECK(ipc_capable == 0);
  REQUIRE(cuMemFreeAsync(pooled, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);

  // Not a CUDA pointer: every attribute gets its null value, and the call succeeds (documented).
  int on_stack = 0;
  REQUIRE(cuPointerGetAttributes(kCount, attributes, data, reinterpret_cast<CUdeviceptr>(&on_stack)) ==
          CUDA_SUCCESS);
  CHECK(context == nullptr);
  CHECK(static_cast<int>(type) == 0);
  CHECK(start == 0);
  CHECK(size == 0);
  CHECK(buffer_id == 0);

  // An attribute it does not list, or a null array or output: refused before anything is written.
  context = nullptr;
  CUpointer_attribute unlisted[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS};
  CHECK(cuPointerGetAttributes(2, unlisted, data, ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(context == nullptr);
  CHECK(cuPointerGetAttributes(1, nullptr, data, ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuPointerGetAttributes(1, attributes, nullptr, ptr) == CUDA_ERROR_INVALID_VALUE);
  void* null_output[] = {nullptr};
  CHECK(cuPointerGetAttributes(1, attributes, null_output, ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuPointerGetAttributes(0, nullptr, nullptr, ptr) == CUDA_SUCCESS);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("misuse of memory calls returns the documented codes", "[driver][memory]") {
  primary_context();
  CUdeviceptr ptr = 0, freed = 0;
  REQUIRE(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemAlloc(&freed, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(freed) == CUDA_SUCCESS);
  char host[8192] = {};

  CHECK(cuMemAlloc(nullptr, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAlloc(&ptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(freed) == CUDA_ERROR_INVALID_VALUE);        // double free
  CHECK(cuMemFree(ptr + 16) == CUDA_ERROR_INVALID_VALUE);     // not the base
  CHECK(cuMemFree(0x1234) == CUDA_ERROR_INVALID_VALUE);       // never allocated
  CHECK(cuMemcpyHtoD(ptr, host, 4097) == CUDA_ERROR_INVALID_VALUE);   // past the end
  CHECK(cuMemcpyHtoD(ptr + 4000, host, 97) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyHtoD(freed, host, 16) == CUDA_ERROR_INVALID_VALUE);   // freed
  CHECK(cuMemcpyDtoH(host, freed, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoH(nullptr, ptr, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoH(reinterpret_cast<void*>(freed), ptr, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyHtoD(ptr, reinterpret_cast<void*>(freed), 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoD(ptr, freed, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpy(freed, reinterpret_cast<CUdeviceptr>(host), 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD32(ptr + 2, 0, 4) == CUDA_ERROR_INVALID_VALUE);      // misaligned
  CHECK(cuMemsetD8(ptr, 0, 4097) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD8(freed, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  size_t free_bytes = 0, total = 0;
  CHECK(cuMemGetInfo(nullptr, &total) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetInfo(&free_bytes, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyHtoD(ptr, host, 0) == CUDA_SUCCESS);  // nothing to copy
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("freed device memory faults when touched", "[driver][memory]") {
  int status = in_child([] {
    CHILD_CHECK(start_primary_context());
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
    *reinterpret_cast<volatile char*>(ptr) = 1;  // live memory is plain host memory
    CHILD_CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
    std::signal(SIGSEGV, SIG_DFL);  // the test framework's handler would report it as a failure
    *reinterpret_cast<volatile char*>(ptr) = 2;  // must fault
    return 0;
  });
  CHECK(status == 1000 + SIGSEGV);
}

TEST_CASE("capacity is enforced with CUDA_ERROR_OUT_OF_MEMORY", "[driver][memory]") {
  int rc = in_child([] {
    setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
    setenv("CUDASIM_CONTEXT_OVERHEAD", "256M", 1);
    CHILD_CHECK(start_primary_context());
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 768 * kMiB);
    CUdeviceptr a = 0, b = 0;
    CHILD_CHECK(cuMemAlloc(&a, 768 * kMiB + 1) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemAlloc(&a, 512 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAlloc(&b, 256 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 0);
    CHILD_CHECK(cuMemAlloc(&b, 512) == CUDA_ERROR_OUT_OF_MEMORY);
    CUcontext created = nullptr;
    CHILD_CHECK(cuCtxCreate(&created, nullptr, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);  // no room for the overhead
    CHILD_CHECK(cuMemFree(a) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 512 * kMiB);
    CHILD_CHECK(cuMemAlloc(&a, 512 * kMiB) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("CUDASIM_FAIL_ALLOC_AFTER fails the later allocations", "[driver][memory]") {
  int rc = in_child([] {
    setenv("CUDASIM_FAIL_ALLOC_AFTER", "2", 1);
    CHILD_CHECK(start_primary_context());
    CUdeviceptr a = 0, b = 0, c = 0;
    CHILD_CHECK(cuMemAlloc(&a, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAlloc(&b, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAlloc(&c, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemFree(a) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAlloc(&c, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemAllocAsync(&c, 4096, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);  // pools too
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("error names and strings", "[driver][errors]") {
  const char* text = nullptr;
  CHECK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &text) == CUDA_SUCCESS);
  CHECK(std::string(text) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text) == CUDA_SUCCESS);
  CHECK(std::strlen(text) > 0);
  CHECK(cuGetErrorName(static_cast<CUresult>(12345), &text) == CUDA_ERROR_INVALID_VALUE);
  CHECK(text == nullptr);
  CHECK(cuGetErrorString(CUDA_SUCCESS, nullptr) == CUDA_ERROR_INVALID_VALUE);
}
