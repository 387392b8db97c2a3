// The simulated driver's virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, sharing through file descriptors) and managed memory (cuMemAllocManaged). Run
// with CUDASIM_DEVICE_MEMORY=8GiB,2GiB (two devices) and the default 300 MiB context overhead.
#include "driver_support.h"
#include "report_support.h"

#include "driver_latency.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace driver_test;

namespace {

constexpr size_t kGranularity = 2 * kMiB;

CUmemAllocationProp device_prop(int device = 0, CUmemAllocationHandleType types = CU_MEM_HANDLE_TYPE_NONE) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = types;
  return prop;
}

CUmemAccessDesc access_for(int device, CUmemAccess_flags flags) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

CUresult set_access(CUdeviceptr ptr, size_t size, CUmemAccess_flags flags, int device = 0) {
  const CUmemAccessDesc desc = access_for(device, flags);
  return cuMemSetAccess(ptr, size, &desc, 1);
}

// Device 0's free memory as cuMemGetInfo reports it (its primary context is current).
size_t free_memory() {
  size_t free = 0, total = 0;
  if (cuMemGetInfo(&free, &total) != CUDA_SUCCESS) return 0;
  return free;
}

CUmemGenericAllocationHandle create(size_t size, const CUmemAllocationProp& prop = device_prop()) {
  CUmemGenericAllocationHandle handle = 0;
  REQUIRE(cuMemCreate(&handle, size, &prop, 0) == CUDA_SUCCESS);
  return handle;
}

CUdeviceptr reserve(size_t size) {
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAddressReserve(&ptr, size, 0, 0, 0) == CUDA_SUCCESS);
  return ptr;
}

// Maps the whole handle at `ptr` and opens it read-write to device 0.
void map_rw(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) {
  REQUIRE(cuMemMap(ptr, size, 0, handle, 0) == CUDA_SUCCESS);
  REQUIRE(set_access(ptr, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
}

std::string temp_path(const char* tag) {
  return "/tmp/cudasim-vmm-" + std::string(tag) + "-" + std::to_string(getpid()) + ".json";
}

}  // namespace

TEST_CASE("vmm: device attributes and allocation granularity", "[driver][vmm]") {
  primary_context();
  for (CUdevice_attribute attribute :
       {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
        CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS}) {
    int value = -1;
    CHECK(cuDeviceGetAttribute(&value, attribute, 1) == CUDA_SUCCESS);
    CHECK(value == 1);
  }
  size_t granularity = 0;
  CUmemAllocationProp prop = device_prop(1);
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS);
  CHECK(granularity == kGranularity);
  granularity = 0;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS);
  CHECK(granularity == kGranularity);

  CHECK(cuMemGetAllocationGranularity(nullptr, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAllocationGranularity(&granularity, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, static_cast<CUmemAllocationGranularity_flags>(2)) ==
        CUDA_ERROR_INVALID_VALUE);
  prop = device_prop(2);  // no such device; INVALID_DEVICE is not among this call's results
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
        CUDA_ERROR_INVALID_VALUE);
  prop = device_prop();
  prop.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
        CUDA_ERROR_INVALID_VALUE);
  prop = device_prop();
  prop.location.type = CU_MEM_LOCATION_TYPE_INVALID;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
        CUDA_ERROR_INVALID_VALUE);
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;  // valid in CUDA, not simulated
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
        CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("vmm: address reservations", "[driver][vmm]") {
  primary_context();
  CUdeviceptr a = 0;
  REQUIRE(cuMemAddressReserve(&a, 6 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
  CHECK(a % kGranularity == 0);
  CUdeviceptr big = 0;
  REQUIRE(cuMemAddressReserve(&big, 4 * kMiB, kGiB, 0, 0) == CUDA_SUCCESS);
  CHECK(big % kGiB == 0);
  // A free hint is honoured; an occupied one is not.
  REQUIRE(cuMemAddressFree(a, 6 * kMiB) == CUDA_SUCCESS);
  CUdeviceptr again = 0;
  REQUIRE(cuMemAddressReserve(&again, 6 * kMiB, 0, a, 0) == CUDA_SUCCESS);
  CHECK(again == a);
  CUdeviceptr other = 0;
  REQUIRE(cuMemAddressReserve(&other, 2 * kMiB, 0, a, 0) == CUDA_SUCCESS);
  CHECK(other != a);
  // Reserved address space is not memory: no call may touch it.
  char host[64] = {};
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemcpyHtoD(a, host, sizeof host) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpy(a, reinterpret_cast<CUdeviceptr>(host), sizeof host) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoH(reinterpret_cast<void*>(a), a, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAddressRange(&base, &size, a) == CUDA_ERROR_NOT_FOUND);
  int mapped = -1;
  CHECK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, a + 100) == CUDA_SUCCESS);
  CHECK(mapped == 0);
  CHECK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 100) == CUDA_SUCCESS);
  CHECK(base == a);
  CUmemorytype type{};
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) == CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr out = 0;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  CHECK(cuMemAddressReserve(nullptr, kGranularity, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAddressReserve(&out, 0, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAddressReserve(&out, page + 1, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE);  // not a page multiple
  CHECK(cuMemAddressReserve(&out, kGranularity, 0, a + 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAddressReserve(&out, kGranularity, 3 * kMiB, 0, 0) == CUDA_ERROR_INVALID_VALUE);  // not a power of 2
  CHECK(cuMemAddressReserve(&out, kGranularity, 0, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAddressFree(a, 4 * kMiB) == CUDA_ERROR_INVALID_VALUE);             // not the size reserved
  CHECK(cuMemAddressFree(a + kGranularity, 4 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // not the start
  CHECK(cuMemAddressFree(0x10000, kGranularity) == CUDA_ERROR_INVALID_VALUE);   // never reserved
  // Nothing may stay mapped in a range being freed.
  CUmemGenericAllocationHandle handle = create(kGranularity);
  REQUIRE(cuMemMap(a + 2 * kMiB, kGranularity, 0, handle, 0) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(a, 6 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemUnmap(a + 2 * kMiB, kGranularity) == CUDA_SUCCESS);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(a, 6 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(a, 6 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // twice
  CHECK(cuMemAddressFree(other, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(big, 4 * kMiB) == CUDA_SUCCESS);
}

TEST_CASE("vmm: physical allocations are charged to their device", "[driver][vmm]") {
  primary_context();
  const size_t before = free_memory();
  CUmemGenericAllocationHandle handle = create(64 * kMiB);
  CHECK(free_memory() == before - 64 * kMiB);
  CUmemAllocationProp prop{};
  CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS);
  CHECK(prop.type == CU_MEM_ALLOCATION_TYPE_PINNED);
  CHECK(prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE);
  CHECK(prop.location.id == 0);
  CHECK(prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);  // nothing mapped: freed at once
  CHECK(free_memory() == before);
  CHECK(cuMemRelease(handle) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAllocationPropertiesFromHandle(nullptr, handle) == CUDA_ERROR_INVALID_VALUE);

  // Device 1 (2 GiB, no context): its own capacity.
  CUmemGenericAllocationHandle on_one = 0;
  CUmemAllocationProp one = device_prop(1);
  CHECK(cuMemCreate(&on_one, 2 * kGiB + kGranularity, &one, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  REQUIRE(cuMemCreate(&on_one, 2 * kGiB, &one, 0) == CUDA_SUCCESS);
  CHECK(cuMemCreate(&handle, kGranularity, &one, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(free_memory() == before);  // device 0 untouched
  CHECK(cuMemRelease(on_one) == CUDA_SUCCESS);
  REQUIRE(cuMemCreate(&on_one, kGranularity, &one, 0) == CUDA_SUCCESS);
  CHECK(cuMemRelease(on_one) == CUDA_SUCCESS);

  CUmemAllocationProp bad = device_prop();
  CHECK(cuMemCreate(nullptr, kGranularity, &bad, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemCreate(&handle, kGranularity, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemCreate(&handle, kGranularity, &bad, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemCreate(&handle, 0, &bad, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemCreate(&handle, kGranularity + 4096, &bad, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemCreate(&handle, kMiB, &bad, 0) == CUDA_ERROR_INVALID_VALUE);
  bad.location.id = 7;
  CHECK(cuMemCreate(&handle, kGranularity, &bad, 0) == CUDA_ERROR_INVALID_DEVICE);
  bad = device_prop();
  bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  CHECK(cuMemCreate(&handle, kGranularity, &bad, 0) == CUDA_ERROR_INVALID_VALUE);
  bad = device_prop();
  bad.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CHECK(cuMemCreate(&handle, kGranularity, &bad, 0) == CUDA_ERROR_NOT_SUPPORTED);
  bad = device_prop(0, CU_MEM_HANDLE_TYPE_FABRIC);
  CHECK(cuMemCreate(&handle, kGranularity, &bad, 0) == CUDA_ERROR_NOT_SUPPORTED);
  bad = device_prop(0, CU_MEM_HANDLE_TYPE_WIN32);
  CHECK(cuMemCreate(&handle, kGranularity, &bad, 0) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(free_memory() == before);
}

TEST_CASE("CUDASIM_LATENCY reads published figures, overrides and rejects what it cannot read", "[driver][config]") {
  using cudasim::TimedCall;
  std::string error;
  const auto published = cudasim::parse_driver_latency("published", error);
  REQUIRE(published);
  CHECK(published->of(TimedCall::mem_create) == 193.32);
  CHECK(published->of(TimedCall::mem_map) == 1.45);
  const auto none = cudasim::parse_driver_latency("none", error);
  REQUIRE(none);
  for (const double us : none->us) CHECK(us == 0.0);
  const auto mixed = cudasim::parse_driver_latency("published, cuMemCreate=100,cuMemMap=0.5", error);
  REQUIRE(mixed);
  CHECK(mixed->of(TimedCall::mem_create) == 100.0);
  CHECK(mixed->of(TimedCall::mem_map) == 0.5);
  CHECK(mixed->of(TimedCall::mem_unmap) == 25.63);
  for (const char* bad : {"", "fast", "cuMemCreate", "cuMemCreate=", "cuMemCreate=-1", "cuMemCreate=2000000",
                          "cuMemCreat=1", "cuMemCreate=1us", "published,,none", "cuMemCreate=nan"}) {
    INFO(bad);
    error.clear();
    CHECK_FALSE(cudasim::parse_driver_latency(bad, error));
    CHECK(error.rfind("expected ", 0) == 0);
  }
}

TEST_CASE("CUDASIM_LATENCY makes each virtual-memory call take its figure", "[driver][vmm][config]") {
  const int rc = in_child([] {
    // 200 ms for cuMemCreate alone: every other call stays free.
    setenv("CUDASIM_LATENCY", "none,cuMemCreate=200000", 1);
    CHILD_CHECK(start_primary_context());
    const CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle handle = 0;
    CHILD_CHECK(succeeds_slowly([&] { return cuMemCreate(&handle, kGranularity, &prop, 0); }));
    CUdeviceptr ptr = 0;
    const auto start = std::chrono::steady_clock::now();
    CHILD_CHECK(cuMemAddressReserve(&ptr, kGranularity, 0, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemMap(ptr, kGranularity, 0, handle, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemUnmap(ptr, kGranularity) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAddressFree(ptr, kGranularity) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
    CHILD_CHECK(std::chrono::steady_clock::now() - start < kTestLatency);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("vmm: sizes no device or address space holds are refused, never wrapped", "[driver][vmm]") {
  primary_context();
  const size_t before = free_memory();
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp prop = device_prop();
  // Not a multiple of the granularity: CUDA_ERROR_INVALID_VALUE, as documented, however large.
  CHECK(cuMemCreate(&handle, SIZE_MAX, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemCreate(&handle, SIZE_MAX - 4095, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
  // Multiples larger than the device: out of memory, nothing charged.
  for (const size_t huge : {SIZE_MAX - kGranularity + 1, size_t{1} << 63, 8 * kGiB + kGranularity}) {
    INFO(huge);
    CHECK(cuMemCreate(&handle, huge, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  }
  CHECK(free_memory() == before);

  // Address space: a size or alignment no address space has room for.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  CUdeviceptr out = 0;
  CHECK(cuMemAddressReserve(&out, SIZE_MAX - page + 1, 0, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAddressReserve(&out, size_t{1} << 63, 0, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAddressReserve(&out, kGranularity, size_t{1} << 63, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);

  // Two adjacent accessible mappings form one range for copies and sets; a count that would wrap
  // ptr + count past the end of the address space to a small address is still out of range.
  const CUmemGenericAllocationHandle first = create(kGranularity), second = create(kGranularity);
  const CUdeviceptr va = reserve(2 * kGranularity);
  map_rw(va, kGranularity, first);
  map_rw(va + kGranularity, kGranularity, second);
  const size_t wrapping = SIZE_MAX - va + 1 + 16;  // va + wrapping == 16
  CHECK(cuMemsetD8(va, 1, wrapping) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD8(va + kGranularity - 1, 1, wrapping) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD8(va, 1, 2 * kGranularity + 1) == CUDA_ERROR_INVALID_VALUE);  // just past the end
  CHECK(cuMemsetD8(va + 1, 1, 2 * kGranularity - 1) == CUDA_SUCCESS);  // across both mappings
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(cuMemUnmap(va, 2 * kGranularity) == CUDA_SUCCESS);
  CHECK(cuMemRelease(first) == CUDA_SUCCESS);
  CHECK(cuMemRelease(second) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(va, 2 * kGranularity) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
}

TEST_CASE("vmm: mapping, access, copies and sets", "[driver][vmm]") {
  primary_context();
  CUmemGenericAllocationHandle handle = create(4 * kMiB);
  const CUdeviceptr va = reserve(16 * kMiB);
  const CUdeviceptr first = va, second = va + 4 * kMiB;
  REQUIRE(cuMemMap(first, 4 * kMiB, 0, handle, 0) == CUDA_SUCCESS);

  // Mapped but not yet accessible: not memory any call may use.
  char host[256] = {};
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long flags = 99;
  CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CHECK(cuMemGetAccess(&flags, &device0, first) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CHECK(cuMemcpyHtoD(first, host, sizeof host) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD8(first, 1, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAddressRange(&base, &size, first) == CUDA_ERROR_NOT_FOUND);
  int mapped = 0;
  CHECK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, first) == CUDA_SUCCESS);
  CHECK(mapped == 1);

  REQUIRE(set_access(first, 4 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
  CHECK(cuMemGetAccess(&flags, &device0, first + kMiB) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUmemLocation device1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CHECK(cuMemGetAccess(&flags, &device1, first) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);

  // Device memory for every other call.
  for (size_t i = 0; i < sizeof host; ++i) host[i] = static_cast<char>(i);
  CHECK(cuMemcpyHtoD(first + 100, host, sizeof host) == CUDA_SUCCESS);
  CHECK(cuMemsetD8(first + 4 * kMiB - 16, 0x5a, 16) == CUDA_SUCCESS);
  char back[256] = {};
  CHECK(cuMemcpyDtoH(back, first + 100, sizeof back) == CUDA_SUCCESS);
  CHECK(std::memcmp(back, host, sizeof host) == 0);
  CHECK(cuMemcpyDtoH(back, first + 4 * kMiB - 16, 16) == CUDA_SUCCESS);
  CHECK(back[15] == 0x5a);
  CHECK(reinterpret_cast<const char*>(first)[101] == 1);  // the host sees the same bytes
  CHECK(cuMemGetAddressRange(&base, &size, first + 12345) == CUDA_SUCCESS);
  CHECK(base == first);
  CHECK(size == 4 * kMiB);
  CUmemorytype type{};
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, first) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  int ordinal = -1, managed = -1;
  CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, first) == CUDA_SUCCESS);
  CHECK(ordinal == 0);
  CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, first) == CUDA_SUCCESS);
  CHECK(managed == 0);
  CHECK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, first + 5) == CUDA_SUCCESS);
  CHECK(base == va);  // the reservation, as documented
  CHECK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, first + 5) == CUDA_SUCCESS);
  CHECK(size == 16 * kMiB);
  CHECK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, first + 5) == CUDA_SUCCESS);
  CHECK(base == first);
  CHECK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, first + 5) == CUDA_SUCCESS);
  CHECK(size == 4 * kMiB);
  CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS access{};
  CHECK(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, first) == CUDA_SUCCESS);
  CHECK(access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
  CHECK(cuMemFree(first) == CUDA_ERROR_INVALID_VALUE);  // unmapped and released, never freed

  // The same handle mapped a second time: one memory, two addresses.
  map_rw(second, 4 * kMiB, handle);
  CHECK(reinterpret_cast<const char*>(second)[101] == 1);
  reinterpret_cast<char*>(first)[7] = 42;
  CHECK(reinterpret_cast<const char*>(second)[7] == 42);
  CHECK(cuMemsetD32(second + 1024, 0xdeadbeef, 4) == CUDA_SUCCESS);
  unsigned int word = 0;
  CHECK(cuMemcpyDtoH(&word, first + 1028, sizeof word) == CUDA_SUCCESS);
  CHECK(word == 0xdeadbeef);
  unsigned long long block_first = 0, block_second = 0;
  CHECK(cuPointerGetAttribute(&block_first, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, first) == CUDA_SUCCESS);
  CHECK(cuPointerGetAttribute(&block_second, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, second) == CUDA_SUCCESS);
  CHECK(block_first == block_second);
  // Adjacent accessible mappings form one range for copies; an async copy on a stream too.
  CHECK(cuMemcpyHtoD(second - 8, "abcdefghijklmnop", 16) == CUDA_SUCCESS);
  char joined[16] = {};
  CHECK(cuMemcpyDtoH(joined, second - 8, sizeof joined) == CUDA_SUCCESS);
  CHECK(std::memcmp(joined, "abcdefghijklmnop", 16) == 0);
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CHECK(cuMemsetD8Async(first, 0x11, 64, stream) == CUDA_SUCCESS);
  CHECK(cuMemcpyDtoDAsync(second + 3 * kMiB, first, 64, stream) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(reinterpret_cast<const unsigned char*>(first)[3 * kMiB + 63] == 0x11);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);

  // Part of a handle, at an offset.
  const CUdeviceptr part = va + 8 * kMiB;
  REQUIRE(cuMemMap(part, 2 * kMiB, 2 * kMiB, handle, 0) == CUDA_SUCCESS);
  REQUIRE(set_access(part, 2 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
  CHECK(reinterpret_cast<const unsigned char*>(part)[kMiB + 63] == 0x11);

  // Read-only access: readable, but no copy or set may write it.
  REQUIRE(set_access(part, 2 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READ) == CUDA_SUCCESS);
  CHECK(cuMemGetAccess(&flags, &device0, part) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READ);
  CHECK(cuMemcpyDtoH(back, part + kMiB, 16) == CUDA_SUCCESS);
  CHECK(cuMemsetD8(part, 0, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyHtoD(part, host, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoD(part, first, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoD(first, part, 16) == CUDA_SUCCESS);
  // Back to no access: not memory again.
  REQUIRE(set_access(part, 2 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_NONE) == CUDA_SUCCESS);
  CHECK(cuMemcpyDtoH(back, part, 16) == CUDA_ERROR_INVALID_VALUE);

  // cuMemMap misuse.
  CUmemGenericAllocationHandle small = create(kGranularity);
  CHECK(cuMemMap(va + 12 * kMiB + 4096, kGranularity, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);  // unaligned
  CHECK(cuMemMap(va + 12 * kMiB, kMiB, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);      // size
  CHECK(cuMemMap(va + 12 * kMiB, kGranularity, kMiB, handle, 0) == CUDA_ERROR_INVALID_VALUE);  // offset
  CHECK(cuMemMap(va + 12 * kMiB, 4 * kMiB, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);  // beyond the handle
  CHECK(cuMemMap(va + 12 * kMiB, 4 * kMiB, 2 * kMiB, handle, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMap(va + 12 * kMiB, kGranularity, 0, small, 1) == CUDA_ERROR_INVALID_VALUE);  // flags
  CHECK(cuMemMap(va + 12 * kMiB, kGranularity, 0, 0xbad, 0) == CUDA_ERROR_INVALID_VALUE);  // handle
  CHECK(cuMemMap(va + 12 * kMiB, 0, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMap(first, kGranularity, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);  // already mapped
  CHECK(cuMemMap(va + 2 * kMiB, kGranularity, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemMap(va + 14 * kMiB, 4 * kMiB, 0, handle, 0) == CUDA_ERROR_INVALID_VALUE);  // past the reservation
  const CUdeviceptr elsewhere = reserve(kGranularity);
  REQUIRE(cuMemAddressFree(elsewhere, kGranularity) == CUDA_SUCCESS);
  CHECK(cuMemMap(elsewhere, kGranularity, 0, small, 0) == CUDA_ERROR_INVALID_VALUE);  // not reserved

  // cuMemSetAccess / cuMemGetAccess misuse.
  const CUmemAccessDesc rw = access_for(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CHECK(cuMemSetAccess(first, 4 * kMiB, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemSetAccess(first, 4 * kMiB, &rw, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(set_access(first, 4 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 9) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(set_access(first, 4 * kMiB, static_cast<CUmemAccess_flags>(2)) == CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc host_access = rw;
  host_access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CHECK(cuMemSetAccess(first, 4 * kMiB, &host_access, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(set_access(first, 2 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_ERROR_INVALID_VALUE);  // part
  CHECK(set_access(va + 12 * kMiB, 2 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_ERROR_INVALID_VALUE);
  CHECK(set_access(first, 8 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READ) == CUDA_SUCCESS);  // two whole mappings
  CHECK(set_access(first, 8 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
  CHECK(cuMemGetAccess(nullptr, &device0, first) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAccess(&flags, nullptr, first) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAccess(&flags, &device0, va + 12 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // not mapped
  CUmemLocation device9{CU_MEM_LOCATION_TYPE_DEVICE, 9};
  CHECK(cuMemGetAccess(&flags, &device9, first) == CUDA_ERROR_INVALID_DEVICE);

  // cuMemUnmap takes whole mappings only.
  CHECK(cuMemUnmap(first, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemUnmap(first + 2 * kMiB, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemUnmap(va + 12 * kMiB, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemUnmap(first, 8 * kMiB) == CUDA_SUCCESS);  // two adjacent mappings at once
  CHECK(cuMemUnmap(part, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemUnmap(part, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoH(back, first, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(cuMemRelease(small) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(va, 16 * kMiB) == CUDA_SUCCESS);
}

TEST_CASE("vmm: access is per device, and peer access between contexts does not change it", "[driver][vmm][peers]") {
  primary_context();
  CUmemGenericAllocationHandle handle = create(4 * kMiB);
  const CUdeviceptr va = reserve(4 * kMiB);
  map_rw(va, 4 * kMiB, handle);  // device 0 only
  CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemLocation device1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  unsigned long long flags = 99;
  CUcontext own = primary_context();
  CUcontext other = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&other, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(other) == CUDA_SUCCESS);
  CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS access{};
  CHECK(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va) == CUDA_SUCCESS);
  CHECK(access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE);  // for device 1, the current context's

  // cuCtxEnablePeerAccess opens cuMemAlloc memory to device 1, not virtual memory: only cuMemSetAccess does.
  REQUIRE(cuCtxEnablePeerAccess(own, 0) == CUDA_SUCCESS);
  CHECK(cuMemGetAccess(&flags, &device1, va) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CHECK(set_access(va, 4 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 1) == CUDA_SUCCESS);
  CHECK(cuMemGetAccess(&flags, &device1, va + 3 * kMiB) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CHECK(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va) == CUDA_SUCCESS);
  CHECK(access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
  CHECK(cuMemGetAccess(&flags, &device0, va) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // Taking device 1's access back (PROT_NONE for it alone) leaves device 0's, and the memory usable.
  CHECK(cuMemsetD8(va, 0x3c, 64) == CUDA_SUCCESS);
  CHECK(set_access(va, 4 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_NONE, 1) == CUDA_SUCCESS);
  CHECK(cuMemGetAccess(&flags, &device1, va) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CHECK(cuMemGetAccess(&flags, &device0, va) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CHECK(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va) == CUDA_SUCCESS);
  CHECK(access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE);
  unsigned char back[64] = {};
  CHECK(cuMemcpyDtoH(back, va, sizeof back) == CUDA_SUCCESS);
  CHECK(back[63] == 0x3c);
  CHECK(cuCtxDisablePeerAccess(own) == CUDA_SUCCESS);

  REQUIRE(cuCtxSetCurrent(own) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
  CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(va, 4 * kMiB) == CUDA_SUCCESS);
}

TEST_CASE("vmm: memory is freed when released and unmapped, in either order", "[driver][vmm]") {
  primary_context();
  const size_t before = free_memory();
  const CUdeviceptr va = reserve(8 * kMiB);

  SECTION("release before unmap") {
    CUmemGenericAllocationHandle handle = create(4 * kMiB);
    map_rw(va, 4 * kMiB, handle);
    CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
    CHECK(free_memory() == before - 4 * kMiB);  // still mapped: still held
    reinterpret_cast<char*>(va)[0] = 3;           // and still usable
    CHECK(cuMemsetD8(va, 4, 1) == CUDA_SUCCESS);
    CHECK(cuMemRelease(handle) == CUDA_ERROR_INVALID_VALUE);  // the handle itself is gone
    CHECK(cuMemMap(va + 4 * kMiB, 4 * kMiB, 0, handle, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
    CHECK(free_memory() == before);
  }
  SECTION("unmap before release") {
    CUmemGenericAllocationHandle handle = create(4 * kMiB);
    map_rw(va, 4 * kMiB, handle);
    CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
    CHECK(free_memory() == before - 4 * kMiB);
    map_rw(va + 4 * kMiB, 4 * kMiB, handle);  // the handle maps again
    CHECK(cuMemUnmap(va + 4 * kMiB, 4 * kMiB) == CUDA_SUCCESS);
    CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
    CHECK(free_memory() == before);
  }
  SECTION("cuMemRetainAllocationHandle takes another reference") {
    CUmemGenericAllocationHandle handle = create(4 * kMiB);
    map_rw(va, 4 * kMiB, handle);
    CUmemGenericAllocationHandle retained = 0;
    CHECK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 12345)) == CUDA_SUCCESS);
    CHECK(retained == handle);
    CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
    CUmemAllocationProp prop{};
    CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS);  // one reference left
    CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
    CHECK(free_memory() == before - 4 * kMiB);
    CHECK(cuMemRelease(retained) == CUDA_SUCCESS);
    CHECK(free_memory() == before);
    // A released, unmapped handle can be retained through an address no more.
    CHECK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va)) == CUDA_ERROR_INVALID_VALUE);
    // A released handle that is still mapped can be retained through its address.
    handle = create(2 * kMiB);
    REQUIRE(cuMemMap(va, 2 * kMiB, 0, handle, 0) == CUDA_SUCCESS);
    CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
    CHECK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va)) == CUDA_SUCCESS);
    CHECK(retained == handle);
    CHECK(cuMemUnmap(va, 2 * kMiB) == CUDA_SUCCESS);
    CHECK(free_memory() == before - 2 * kMiB);
    CHECK(cuMemRelease(retained) == CUDA_SUCCESS);
    CHECK(free_memory() == before);
    CHECK(cuMemRetainAllocationHandle(nullptr, reinterpret_cast<void*>(va)) == CUDA_ERROR_INVALID_VALUE);
  }
  CHECK(cuMemAddressFree(va, 8 * kMiB) == CUDA_SUCCESS);
}

TEST_CASE("vmm: export to a file descriptor and import share one memory", "[driver][vmm]") {
  primary_context();
  const size_t before = free_memory();
  CUmemGenericAllocationHandle handle = create(4 * kMiB, device_prop(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUmemAllocationProp prop{};
  REQUIRE(cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS);
  CHECK(prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  const CUdeviceptr va = reserve(8 * kMiB);
  map_rw(va, 4 * kMiB, handle);
  std::memcpy(reinterpret_cast<void*>(va + 5000), "shared bytes", 13);
  unsigned long long allowed = 0;
  CHECK(cuPointerGetAttribute(&allowed, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va) == CUDA_SUCCESS);
  CHECK(allowed == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  REQUIRE(fd >= 0);
  // The descriptor is the memory itself.
  void* view = mmap(nullptr, 4 * kMiB, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(view != MAP_FAILED);
  CHECK(std::strcmp(static_cast<const char*>(view) + 5000, "shared bytes") == 0);
  munmap(view, 4 * kMiB);

  CUmemGenericAllocationHandle imported = 0;
  REQUIRE(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
  CHECK(free_memory() == before - 4 * kMiB);  // one memory, charged once
  map_rw(va + 4 * kMiB, 4 * kMiB, imported);
  char back[13] = {};
  CHECK(cuMemcpyDtoH(back, va + 4 * kMiB + 5000, sizeof back) == CUDA_SUCCESS);
  CHECK(std::strcmp(back, "shared bytes") == 0);
  unsigned long long block_a = 0, block_b = 0;
  CHECK(cuPointerGetAttribute(&block_a, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va) == CUDA_SUCCESS);
  CHECK(cuPointerGetAttribute(&block_b, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va + 4 * kMiB) == CUDA_SUCCESS);
  CHECK(block_a == block_b);

  // Another process (a forked child, fresh driver) imports the descriptor: the same bytes, charged
  // to the process that allocated them.
  const int child = in_child([fd] {
    CHILD_CHECK(start_primary_context());
    const size_t child_before = free_memory();
    CUmemGenericAllocationHandle h = 0;
    CHILD_CHECK(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
    CHILD_CHECK(free_memory() == child_before);
    CUmemAllocationProp p{};
    CHILD_CHECK(cuMemGetAllocationPropertiesFromHandle(&p, h) == CUDA_SUCCESS);
    CHILD_CHECK(p.location.id == 0 && p.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr at = 0;
    CHILD_CHECK(cuMemAddressReserve(&at, 4 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemMap(at, 4 * kMiB, 0, h, 0) == CUDA_SUCCESS);
    CHILD_CHECK(set_access(at, 4 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
    CHILD_CHECK(std::strcmp(reinterpret_cast<const char*>(at + 5000), "shared bytes") == 0);
    CHILD_CHECK(cuMemsetD8(at + 5000, 'S', 1) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    CHILD_CHECK(cuMemUnmap(at, 4 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemRelease(h) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(child == 0);
  CHECK(reinterpret_cast<const char*>(va)[5000] == 'S');

  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(free_memory() == before - 4 * kMiB);  // the imported handle still holds it
  CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemRelease(imported) == CUDA_SUCCESS);
  CHECK(free_memory() == before - 4 * kMiB);  // still mapped through the imported handle
  CHECK(cuMemUnmap(va + 4 * kMiB, 4 * kMiB) == CUDA_SUCCESS);
  CHECK(free_memory() == before);
  close(fd);
  CHECK(cuMemAddressFree(va, 8 * kMiB) == CUDA_SUCCESS);

  // Misuse.
  CUmemGenericAllocationHandle plain = create(kGranularity);  // no shareable handle type requested
  CHECK(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_FABRIC, 0) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_NONE, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemExportToShareableHandle(nullptr, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRelease(plain) == CUDA_SUCCESS);
  CHECK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
        CUDA_ERROR_INVALID_VALUE);  // released
  CUmemGenericAllocationHandle h = 0;
  auto as_handle = [](int descriptor) { return reinterpret_cast<void*>(static_cast<intptr_t>(descriptor)); };
  CHECK(cuMemImportFromShareableHandle(&h, as_handle(-1), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemImportFromShareableHandle(&h, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
        CUDA_ERROR_INVALID_VALUE);  // closed
  const int foreign = memfd_create("not-cuda", MFD_CLOEXEC);
  REQUIRE(foreign >= 0);
  REQUIRE(ftruncate(foreign, static_cast<off_t>(kGranularity)) == 0);
  CHECK(cuMemImportFromShareableHandle(&h, as_handle(foreign), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemImportFromShareableHandle(&h, as_handle(foreign), CU_MEM_HANDLE_TYPE_FABRIC) ==
        CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuMemImportFromShareableHandle(nullptr, as_handle(foreign), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
        CUDA_ERROR_INVALID_VALUE);
  close(foreign);
}

// The descriptors this process holds (entries of /proc/self/fd, less the one listing them).
int open_descriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.' ? 1 : 0;
  closedir(dir);
  return count - 1;
}

// The descriptor of this process whose target starts with `prefix` (e.g. "/memfd:..."), or -1.
int descriptor_named(const std::string& prefix) {
  for (int fd = 0; fd < 4096; ++fd) {
    char link[64], target[256] = {};
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    if (readlink(link, target, sizeof target - 1) > 0 && std::string(target).rfind(prefix, 0) == 0) return fd;
  }
  return -1;
}

// In a child: at most `descriptors` open descriptors (ulimit -n), one device of `memory`, its primary
// context current.
bool start_one_device_under(rlim_t descriptors, const char* memory) {
  const rlimit limit{descriptors, descriptors};
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  setenv("CUDASIM_DEVICE_MEMORY", memory, 1);
  setenv("CUDASIM_DEVICES", "1", 1);
  return start_primary_context();
}

TEST_CASE("vmm: a 12 GiB arena of 2 MiB pieces holds a few descriptors, under a 1024 limit", "[driver][vmm]") {
  // As gpumem's VMM arena preallocates: one exportable 2 MiB piece per granule, each mapped.
  const int rc = in_child([] {
    CHILD_CHECK(start_one_device_under(1024, "16GiB"));
    const int before = open_descriptors();
    constexpr size_t kPieces = 12 * kGiB / kGranularity;
    CUdeviceptr va = 0;
    CHILD_CHECK(cuMemAddressReserve(&va, kPieces * kGranularity, 0, 0, 0) == CUDA_SUCCESS);
    const CUmemAllocationProp prop = device_prop(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    std::vector<CUmemGenericAllocationHandle> pieces(kPieces);
    for (size_t i = 0; i < kPieces; ++i) {
      const CUdeviceptr at = va + i * kGranularity;
      CHILD_CHECK(cuMemCreate(&pieces[i], kGranularity, &prop, 0) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemMap(at, kGranularity, 0, pieces[i], 0) == CUDA_SUCCESS);
      CHILD_CHECK(set_access(at, kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
    }
    const int held = open_descriptors();
    std::fprintf(stderr, "descriptors: %d before, %d with %zu pieces mapped\n", before, held, kPieces);
    CHILD_CHECK(held >= 0 && held < 64);
    // Every piece is memory of its own.
    for (size_t i = 0; i < kPieces; i += 997) CHILD_CHECK(cuMemsetD8(va + i * kGranularity + 7, 0x5a, 1) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    for (size_t i = 0; i < kPieces; ++i) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(va + i * kGranularity);
      CHILD_CHECK(bytes[7] == (i % 997 == 0 ? 0x5a : 0) && bytes[6] == 0);
    }
    for (size_t i = 0; i < kPieces; ++i) {
      CHILD_CHECK(cuMemUnmap(va + i * kGranularity, kGranularity) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemRelease(pieces[i]) == CUDA_SUCCESS);
    }
    CHILD_CHECK(cuMemAddressFree(va, kPieces * kGranularity) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
}

// Whether this process may open a mapped file again through /proc/self/map_files (what lets the
// driver hold an exported or imported allocation without a descriptor).
bool map_files_open() {
  const int fd = memfd_create("probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return false;
  void* at = mmap(nullptr, 4096, PROT_NONE, MAP_SHARED, fd, 0);
  close(fd);
  if (at == MAP_FAILED) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", reinterpret_cast<unsigned long>(at),
                reinterpret_cast<unsigned long>(at) + 4096);
  const int opened = open(path, O_RDONLY | O_CLOEXEC);
  if (opened >= 0) close(opened);
  munmap(at, 4096);
  return opened >= 0;
}

TEST_CASE("vmm: exported and imported allocations hold no descriptor each, under a 64 limit", "[driver][vmm]") {
  // A real driver keeps no descriptor per exported or imported allocation: 300 pieces exported, each
  // descriptor closed once imported again, mapped through both handles, exported a second time.
  if (!map_files_open()) {
    WARN("not checked: /proc/self/map_files cannot be opened here (no CAP_CHECKPOINT_RESTORE), so the "
         "simulator keeps one descriptor per exported allocation");
    return;
  }
  const int rc = in_child([] {
    CHILD_CHECK(start_one_device_under(64, "4GiB"));
    constexpr size_t kPieces = 300;
    CUdeviceptr va = 0;
    CHILD_CHECK(cuMemAddressReserve(&va, 2 * kPieces * kGranularity, 0, 0, 0) == CUDA_SUCCESS);
    const CUmemAllocationProp prop = device_prop(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    std::vector<CUmemGenericAllocationHandle> pieces(kPieces), imported(kPieces);
    const int before = open_descriptors();
    for (size_t i = 0; i < kPieces; ++i) {
      const CUdeviceptr at = va + i * kGranularity;
      CHILD_CHECK(cuMemCreate(&pieces[i], kGranularity, &prop, 0) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemMap(at, kGranularity, 0, pieces[i], 0) == CUDA_SUCCESS);
      CHILD_CHECK(set_access(at, kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
      *reinterpret_cast<unsigned*>(at + 64) = static_cast<unsigned>(i) * 7 + 1;
      int fd = -1;
      CHILD_CHECK(cuMemExportToShareableHandle(&fd, pieces[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
                  CUDA_SUCCESS);
      CHILD_CHECK(cuMemImportFromShareableHandle(&imported[i], reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
      close(fd);
      const CUdeviceptr again = va + (kPieces + i) * kGranularity;
      CHILD_CHECK(cuMemMap(again, kGranularity, 0, imported[i], 0) == CUDA_SUCCESS);
      CHILD_CHECK(set_access(again, kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
    }
    const int held = open_descriptors();
    std::fprintf(stderr, "descriptors: %d before, %d with %zu pieces exported and imported\n", before, held, kPieces);
    CHILD_CHECK(held >= 0 && held <= before + 1);  // the device's backing file at most
    for (size_t i = 0; i < kPieces; ++i) {
      // The bytes written through the first mapping, seen through the imported one; a second export works.
      CHILD_CHECK(*reinterpret_cast<const unsigned*>(va + (kPieces + i) * kGranularity + 64) == i * 7 + 1);
      int fd = -1;
      CHILD_CHECK(cuMemExportToShareableHandle(&fd, imported[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
                  CUDA_SUCCESS);
      close(fd);
    }
    for (size_t i = 0; i < kPieces; ++i) {
      CHILD_CHECK(cuMemUnmap(va + i * kGranularity, kGranularity) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemUnmap(va + (kPieces + i) * kGranularity, kGranularity) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemRelease(pieces[i]) == CUDA_SUCCESS && cuMemRelease(imported[i]) == CUDA_SUCCESS);
    }
    CHILD_CHECK(cuMemAddressFree(va, 2 * kPieces * kGranularity) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("vmm: a file-size limit does not limit device memory", "[driver][vmm]") {
  // ulimit -f bounds files, which a real driver's memory is not: 64 MiB of VMM memory under a 1 MiB
  // limit, mapped twice, written and read through both, released and created again.
  const int rc = in_child([] {
    const rlimit limit{kMiB, kMiB};
    CHILD_CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
    CHILD_CHECK(start_primary_context());
    constexpr size_t kBytes = 64 * kMiB;
    for (int round = 0; round < 2; ++round) {
      CUdeviceptr va = 0;
      CHILD_CHECK(cuMemAddressReserve(&va, 2 * kBytes, 0, 0, 0) == CUDA_SUCCESS);
      const CUmemAllocationProp prop = device_prop(0, CU_MEM_HANDLE_TYPE_NONE);
      CUmemGenericAllocationHandle handle = 0;
      CHILD_CHECK(cuMemCreate(&handle, kBytes, &prop, 0) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemMap(va, kBytes, 0, handle, 0) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemMap(va + kBytes, kBytes, 0, handle, 0) == CUDA_SUCCESS);
      CHILD_CHECK(set_access(va, 2 * kBytes, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
      auto* first = reinterpret_cast<unsigned char*>(va);
      const auto* second = reinterpret_cast<const unsigned char*>(va + kBytes);
      CHILD_CHECK(first[kBytes - 1] == 0 && second[5] == 0);  // new memory is empty, also the second time
      CHILD_CHECK(cuMemsetD8(va + kBytes - 1, 0x6b, 1) == CUDA_SUCCESS);
      CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
      first[5] = 0x3c;
      CHILD_CHECK(second[kBytes - 1] == 0x6b && second[5] == 0x3c);  // one memory, two mappings
      CHILD_CHECK(cuMemUnmap(va, 2 * kBytes) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemAddressFree(va, 2 * kBytes) == CUDA_SUCCESS);
    }
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("vmm: released memory comes back empty; the device's backing file cannot be imported", "[driver][vmm]") {
  primary_context();
  const CUdeviceptr va = reserve(4 * kMiB);
  CUmemGenericAllocationHandle first = create(4 * kMiB);
  map_rw(va, 4 * kMiB, first);
  std::memset(reinterpret_cast<void*>(va), 0xee, 4 * kMiB);
  CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemRelease(first) == CUDA_SUCCESS);
  // The same range of the backing file serves the next allocation, emptied.
  CUmemGenericAllocationHandle second = create(4 * kMiB);
  map_rw(va, 4 * kMiB, second);
  const auto* bytes = reinterpret_cast<const unsigned char*>(va);
  size_t nonzero = 0;
  for (size_t i = 0; i < 4 * kMiB; ++i) nonzero += bytes[i] != 0 ? 1 : 0;
  CHECK(nonzero == 0);
  const int backing = descriptor_named("/memfd:cudasim-vmm-backing-0");
  REQUIRE(backing >= 0);
  CUmemGenericAllocationHandle imported = 0;
  CHECK(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(backing)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemRelease(second) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(va, 4 * kMiB) == CUDA_SUCCESS);
}

TEST_CASE("vmm: exporting keeps every mapping's bytes; another process reopening the descriptor sees them",
          "[driver][vmm]") {
  primary_context();
  CUmemGenericAllocationHandle handle = create(4 * kMiB, device_prop(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  const CUdeviceptr va = reserve(8 * kMiB);
  map_rw(va, 4 * kMiB, handle);
  REQUIRE(cuMemMap(va + 4 * kMiB, 2 * kMiB, 2 * kMiB, handle, 0) == CUDA_SUCCESS);  // its second half again
  REQUIRE(set_access(va + 4 * kMiB, 2 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READ) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(va, 0x11, 4 * kMiB) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(va + 3 * kMiB, 0x33, 16) == CUDA_SUCCESS);
  // A copy still queued when the export is asked lands before the bytes move.
  Gate gate;
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(va + 100, 0x77, 1, stream) == CUDA_SUCCESS);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  opener.join();
  const auto* bytes = reinterpret_cast<const unsigned char*>(va);
  CHECK(bytes[0] == 0x11);
  CHECK(bytes[100] == 0x77);
  CHECK(bytes[3 * kMiB + 5] == 0x33);
  CHECK(bytes[4 * kMiB + kMiB + 5] == 0x33);  // the second mapping shows the same memory
  auto* view = static_cast<unsigned char*>(mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(view != MAP_FAILED);
  CHECK(view[100] == 0x77);
  view[200] = 0x22;  // written through the descriptor, seen through both mappings
  CHECK(bytes[200] == 0x22);
  view[2 * kMiB + 1] = 0x44;
  CHECK(bytes[4 * kMiB + 1] == 0x44);
  munmap(view, 4 * kMiB);
  int again = -1;  // a second export: the same file
  REQUIRE(cuMemExportToShareableHandle(&again, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  struct stat one {}, two {};
  REQUIRE(fstat(fd, &one) == 0);
  REQUIRE(fstat(again, &two) == 0);
  CHECK(one.st_ino == two.st_ino);
  close(again);
  // Another process opens the descriptor by its /proc path (a new open file, as gpumem does where it
  // cannot duplicate it): the same bytes, both ways.
  const pid_t parent = getpid();
  const int child = in_child([fd, parent] {
    CHILD_CHECK(start_primary_context());
    const std::string path = "/proc/" + std::to_string(parent) + "/fd/" + std::to_string(fd);
    const int reopened = open(path.c_str(), O_RDWR | O_CLOEXEC);
    CHILD_CHECK(reopened >= 0);
    CUmemGenericAllocationHandle h = 0;
    CHILD_CHECK(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(reopened)),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
    close(reopened);
    CUdeviceptr at = 0;
    CHILD_CHECK(cuMemAddressReserve(&at, 4 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemMap(at, 4 * kMiB, 0, h, 0) == CUDA_SUCCESS);
    CHILD_CHECK(set_access(at, 4 * kMiB, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
    const auto* seen = reinterpret_cast<const unsigned char*>(at);
    CHILD_CHECK(seen[0] == 0x11 && seen[100] == 0x77 && seen[200] == 0x22 && seen[3 * kMiB + 5] == 0x33);
    CHILD_CHECK(cuMemsetD8(at + 300, 0x99, 1) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    return 0;
  });
  CHECK(child == 0);
  CHECK(bytes[300] == 0x99);
  close(fd);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemUnmap(va, 4 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemUnmap(va + 4 * kMiB, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(va, 8 * kMiB) == CUDA_SUCCESS);
}

TEST_CASE("vmm: a mapping faults until cuMemSetAccess grants access, and after cuMemUnmap", "[driver][vmm]") {
  auto touch_child = [](CUmemAccess_flags flags, bool write, bool unmap_first) {
    return in_child([=] {
      CHILD_CHECK(start_primary_context());
      CUmemAllocationProp prop = device_prop();
      CUmemGenericAllocationHandle handle = 0;
      CUdeviceptr va = 0;
      CHILD_CHECK(cuMemCreate(&handle, kGranularity, &prop, 0) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemAddressReserve(&va, kGranularity, 0, 0, 0) == CUDA_SUCCESS);
      CHILD_CHECK(cuMemMap(va, kGranularity, 0, handle, 0) == CUDA_SUCCESS);
      if (flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) CHILD_CHECK(set_access(va, kGranularity, flags) == CUDA_SUCCESS);
      if (unmap_first) CHILD_CHECK(cuMemUnmap(va, kGranularity) == CUDA_SUCCESS);
      std::signal(SIGSEGV, SIG_DFL);  // the test framework's handler would report it as a failure
      auto* p = reinterpret_cast<volatile char*>(va);
      if (write) p[10] = 1;
      return p[10] == 1 ? 0 : 2;
    });
  };
  CHECK(touch_child(CU_MEM_ACCESS_FLAGS_PROT_NONE, true, false) == 1000 + SIGSEGV);
  CHECK(touch_child(CU_MEM_ACCESS_FLAGS_PROT_NONE, false, false) == 1000 + SIGSEGV);
  CHECK(touch_child(CU_MEM_ACCESS_FLAGS_PROT_READ, false, false) == 2);  // readable (zeroes)
  CHECK(touch_child(CU_MEM_ACCESS_FLAGS_PROT_READ, true, false) == 1000 + SIGSEGV);
  CHECK(touch_child(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, true, false) == 0);
  CHECK(touch_child(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, true, true) == 1000 + SIGSEGV);
}

TEST_CASE("vmm: a forked child sees none of its parent's virtual memory", "[driver][vmm]") {
  primary_context();
  CUmemGenericAllocationHandle handle = create(kGranularity);
  const CUdeviceptr va = reserve(kGranularity);
  map_rw(va, kGranularity, handle);
  const int rc = in_child([=] {
    CHILD_CHECK(start_primary_context());
    CUmemAllocationProp prop{};
    CUmemGenericAllocationHandle retained = 0;
    unsigned long long flags = 0;
    CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
    char host[8] = {};
    CHILD_CHECK(cuMemRelease(handle) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemUnmap(va, kGranularity) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(set_access(va, kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemGetAccess(&flags, &device0, va) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va)) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemAddressFree(va, kGranularity) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemcpyHtoD(va, host, sizeof host) == CUDA_ERROR_INVALID_VALUE);
    // Its own virtual memory works, with handles of its own.
    CUmemGenericAllocationHandle mine = 0;
    prop = device_prop();
    CHILD_CHECK(cuMemCreate(&mine, kGranularity, &prop, 0) == CUDA_SUCCESS);
    CHILD_CHECK(mine != handle);
    CUdeviceptr at = 0;
    CHILD_CHECK(cuMemAddressReserve(&at, kGranularity, 0, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemMap(at, kGranularity, 0, mine, 0) == CUDA_SUCCESS);
    CHILD_CHECK(set_access(at, kGranularity, CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemsetD8(at, 7, kGranularity) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemcpyDtoH(host, at + 100, sizeof host) == CUDA_SUCCESS && host[7] == 7);
    return 0;
  });
  CHECK(rc == 0);
  CHECK(cuMemUnmap(va, kGranularity) == CUDA_SUCCESS);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(cuMemAddressFree(va, kGranularity) == CUDA_SUCCESS);
}

TEST_CASE("vmm: CUDASIM_FAIL_ALLOC_AFTER counts cuMemCreate", "[driver][vmm]") {
  const int rc = in_child([] {
    setenv("CUDASIM_FAIL_ALLOC_AFTER", "2", 1);
    CHILD_CHECK(start_primary_context());
    CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle a = 0, b = 0;
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemCreate(&a, kGranularity, &prop, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemCreate(&b, kGranularity, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemRelease(a) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemCreate(&b, kGranularity, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("vmm: cuGetProcAddress answers the virtual memory and managed entry points", "[driver][vmm]") {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  CHECK(cuGetProcAddress_v2("cuMemCreate", &fn, 13000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemCreate));
  CHECK(cuGetProcAddress_v2("cuMemCreate", &fn, 10010, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(cuGetProcAddress_v2("cuMemRetainAllocationHandle", &fn, 10020, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuGetProcAddress_v2("cuMemRetainAllocationHandle", &fn, 11000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemRetainAllocationHandle));
  CHECK(cuGetProcAddress_v2("cuMemAllocManaged", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                            &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuMemAllocManaged));
  for (const char* name : {"cuMemGetAllocationGranularity", "cuMemAddressReserve", "cuMemAddressFree",
                           "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemGetAccess",
                           "cuMemGetAllocationPropertiesFromHandle", "cuMemExportToShareableHandle",
                           "cuMemImportFromShareableHandle"}) {
    INFO(name);
    CHECK(cuGetProcAddress_v2(name, &fn, 12080, 0, &status) == CUDA_SUCCESS);
    CHECK(fn != nullptr);
  }
}

TEST_CASE("managed memory: allocation, use and free", "[driver][managed]") {
  primary_context();
  const size_t before = free_memory();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAllocManaged(&ptr, 3 * kMiB + 5, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK(free_memory() == before);  // not resident on the device (see README)
  auto* host = reinterpret_cast<unsigned char*>(ptr);
  host[0] = 9;  // valid on the host
  unsigned char back[4] = {};
  CHECK(cuMemcpyDtoH(back, ptr, 1) == CUDA_SUCCESS);
  CHECK(back[0] == 9);
  CHECK(cuMemsetD8(ptr + 1, 0x77, 3 * kMiB + 4) == CUDA_SUCCESS);
  CHECK(cuMemcpyDtoH(back, ptr + 3 * kMiB + 1, 4) == CUDA_SUCCESS);
  CHECK(back[3] == 0x77);
  CHECK(host[3 * kMiB + 4] == 0x77);
  CHECK(cuMemcpy(ptr, reinterpret_cast<CUdeviceptr>("xyz"), 3) == CUDA_SUCCESS);
  CHECK(host[1] == 'y');
  CHECK(cuMemsetD8(ptr, 0, 3 * kMiB + 6) == CUDA_ERROR_INVALID_VALUE);  // past the end
  int managed = 0, ordinal = -1;
  CUmemorytype type{};
  void* host_pointer = nullptr;
  CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr + 10) == CUDA_SUCCESS);
  CHECK(managed == 1);
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) == CUDA_SUCCESS);
  CHECK(ordinal == 0);
  CHECK(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, ptr + 10) == CUDA_SUCCESS);
  CHECK(host_pointer == reinterpret_cast<void*>(ptr + 10));
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, ptr + 100) == CUDA_SUCCESS);
  CHECK(base == ptr);
  CHECK(size == 3 * kMiB + 5);
  CHECK(cuMemFree(ptr + 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
  CHECK(cuMemFree(ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemcpyDtoH(back, ptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocManaged(&ptr, 4096, CU_MEM_ATTACH_HOST) == CUDA_SUCCESS);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);

  CHECK(cuMemAllocManaged(&ptr, 0, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocManaged(nullptr, 16, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocManaged(&ptr, 16, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocManaged(&ptr, 16, CU_MEM_ATTACH_SINGLE) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocManaged(&ptr, 16, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST) == CUDA_ERROR_INVALID_VALUE);
  const int rc = in_child([] {
    CUdeviceptr p = 0;
    CHILD_CHECK(cuMemAllocManaged(&p, 16, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAllocManaged(&p, 16, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_CONTEXT);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("the report counts virtual and managed memory", "[driver][vmm][managed][report]") {
  const std::string path = temp_path("report");
  const int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CHILD_CHECK(start_primary_context());
    CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle a = 0, b = 0;
    CUdeviceptr va = 0, managed = 0, other = 0;
    CHILD_CHECK(cuMemAddressReserve(&va, 16 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAddressReserve(&other, 2 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAddressFree(other, 2 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemCreate(&a, 4 * kMiB, &prop, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemCreate(&b, 6 * kMiB, &prop, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemMap(va, 4 * kMiB, 0, a, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemMap(va + 4 * kMiB, 2 * kMiB, 0, a, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemUnmap(va + 4 * kMiB, 2 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemRelease(b) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemRelease(a) == CUDA_SUCCESS);  // still mapped once: 4 MiB live
    CHILD_CHECK(cuMemAllocManaged(&managed, 3 * kMiB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(managed) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAllocManaged(&managed, kMiB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    std::exit(0);
  });
  REQUIRE(rc == 0);
  const nlohmann::json report = take_report(path);
  const auto& device = report["devices"][0];
  CHECK(device["vmm"] == nlohmann::json({{"creates", 2}, {"releases", 2}, {"bytes", 4 * kMiB},
                                         {"peak_bytes", 10 * kMiB}, {"maps", 2}, {"unmaps", 1},
                                         {"reserved_va_bytes", 16 * kMiB}}));
  CHECK(device["managed"] == nlohmann::json({{"allocs", 2}, {"frees", 1}, {"bytes", kMiB},
                                             {"peak_bytes", 3 * kMiB}}));
  CHECK(device["bytes_reserved"] == 4 * kMiB);  // VMM memory is device memory taken
  CHECK(device["driver_allocs"] == 0);
  CHECK(report["devices"][1]["vmm"]["creates"] == 0);
  CHECK(report["devices"][1]["managed"]["allocs"] == 0);
}
