// The simulated driver's devices as CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER select them: ordinals,
// UUIDs (with or without "GPU-", abbreviated), the list ending at an invalid entry, and memory shared
// between processes that see one device under different ordinals. Each configuration runs in a
// forked child (the driver reads the environment once, at cuInit).
#include "driver_support.h"

#include <catch2/catch.hpp>
#include <cudaProfiler.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace driver_test;

namespace {

// The number a device's UUID ends with: the simulated device's number, whatever its ordinal.
int uuid_number(CUdevice dev) {
  CUuuid uuid{};
  if (cuDeviceGetUuid_v2(&uuid, dev) != CUDA_SUCCESS) return -1;
  return static_cast<unsigned char>(uuid.bytes[15]);
}

// Sets (or, for null, unsets) an environment variable in a child.
void set_or_unset(const char* name, const char* value) {
  if (value == nullptr) unsetenv(name);
  else setenv(name, value, 1);
}

// In a child with four devices of 1, 2, 3 and 4 GiB: whether CUDA_VISIBLE_DEVICES=`list` (unset
// for null) shows exactly the devices numbered `expected`, in that order, each with its own UUID,
// PCI bus and memory; an empty `expected` means cuInit answers CUDA_ERROR_NO_DEVICE.
int sees(const char* list, const std::vector<int>& expected, const char* order = nullptr) {
  return in_child([&] {
    setenv("CUDASIM_DEVICES", "4", 1);
    setenv("CUDASIM_DEVICE_MEMORY", "1GiB,2GiB,3GiB,4GiB", 1);
    set_or_unset("CUDA_VISIBLE_DEVICES", list);
    set_or_unset("CUDA_DEVICE_ORDER", order);
    const CUresult init = cuInit(0);
    int count = -1;
    if (expected.empty()) {
      CHILD_CHECK(init == CUDA_ERROR_NO_DEVICE);
      CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
      return 0;
    }
    CHILD_CHECK(init == CUDA_SUCCESS);
    CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS);
    std::vector<int> seen;
    for (CUdevice dev = 0; dev < count; ++dev) {
      const int number = uuid_number(dev);
      int bus = -1;
      size_t total = 0;
      char name[64] = {};
      CHILD_CHECK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev) == CUDA_SUCCESS);
      CHILD_CHECK(cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS);
      CHILD_CHECK(cuDeviceGetName(name, sizeof name, dev) == CUDA_SUCCESS);
      CHILD_CHECK(bus == number + 1);
      CHILD_CHECK(total == static_cast<size_t>(number + 1) * kGiB);
      CHILD_CHECK(std::string(name) == "Simulated CUDA Device " + std::to_string(number));
      seen.push_back(number);
    }
    if (seen != expected) {
      std::fprintf(stderr, "CUDA_VISIBLE_DEVICES=%s: saw", list == nullptr ? "(unset)" : list);
      for (int n : seen) std::fprintf(stderr, " %d", n);
      std::fprintf(stderr, "\n");
      return 1;
    }
    return 0;
  });
}

// The UUID of simulated device `number` as nvidia-smi prints it.
std::string uuid_text(int number) {
  char text[64];
  std::snprintf(text, sizeof text, "GPU-63756461-7369-6d00-0000-0000000000%02x", number);
  return text;
}

}  // namespace

TEST_CASE("CUDA_VISIBLE_DEVICES selects and orders devices by number", "[driver][devices]") {
  CHECK(sees(nullptr, {0, 1, 2, 3}) == 0);
  CHECK(sees("2", {2}) == 0);
  CHECK(sees("2,0", {2, 0}) == 0);
  CHECK(sees("3,2,1,0", {3, 2, 1, 0}) == 0);
  CHECK(sees(" 1 , 3 ", {1, 3}) == 0);
  // The first entry that names no device ends the list, as the CUDA documentation's example says.
  CHECK(sees("0,2,-1,1", {0, 2}) == 0);
  CHECK(sees("1,4,0", {1}) == 0);
  CHECK(sees("1,1,0", {1}) == 0);  // a device listed again
  CHECK(sees("1,,0", {1}) == 0);
  CHECK(sees("1,x,0", {1}) == 0);
  CHECK(sees("MIG-GPU-63756461/0/0", {}) == 0);  // MIG instances are not simulated
  CHECK(sees("", {}) == 0);
  CHECK(sees("4", {}) == 0);
  CHECK(sees("-1", {}) == 0);
}

TEST_CASE("CUDA_VISIBLE_DEVICES names devices by UUID, with or without GPU-, abbreviated", "[driver][devices]") {
  const std::string three = uuid_text(3), one = uuid_text(1);
  CHECK(sees((three + "," + one).c_str(), {3, 1}) == 0);
  CHECK(sees(one.substr(4).c_str(), {1}) == 0);  // without "GPU-"
  // The four UUIDs differ in their last digit only, so any shorter prefix is ambiguous.
  CHECK(sees(("0," + three.substr(0, three.size() - 1)).c_str(), {0}) == 0);
  // With one device a short prefix names it.
  CHECK(in_child([] {
          setenv("CUDASIM_DEVICES", "1", 1);
          setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
          setenv("CUDA_VISIBLE_DEVICES", "GPU-6375", 1);
          int count = 0;
          CHILD_CHECK(cuInit(0) == CUDA_SUCCESS && cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 1);
          setenv("CUDA_VISIBLE_DEVICES", "6375", 1);  // read once: this changes nothing now
          CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 1);
          return 0;
        }) == 0);
  CHECK(in_child([] {
          setenv("CUDASIM_DEVICES", "1", 1);
          setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
          setenv("CUDA_VISIBLE_DEVICES", "63756461-73", 1);  // without "GPU-" (all digits would be an index)
          int count = 0;
          CHILD_CHECK(cuInit(0) == CUDA_SUCCESS && cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 1);
          return 0;
        }) == 0);
  CHECK(sees("2,GPU-63756461", {2}) == 0);  // ambiguous: ends the list
  CHECK(sees("GPU-63756461-7369-6d00-0000-0000000000ff", {}) == 0);  // no such device
  CHECK(sees((one + ",1").c_str(), {1}) == 0);  // the same device twice
  CHECK(sees(("0," + one.substr(4, 13)).c_str(), {0}) == 0);  // a prefix that fits them all
}

TEST_CASE("CUDA_DEVICE_ORDER: both orders number the equally fast devices alike", "[driver][devices]") {
  CHECK(sees(nullptr, {0, 1, 2, 3}, "PCI_BUS_ID") == 0);
  CHECK(sees(nullptr, {0, 1, 2, 3}, "FASTEST_FIRST") == 0);
  CHECK(sees("3,1", {3, 1}, "PCI_BUS_ID") == 0);
  CHECK(sees("2", {2}, "SLOWEST_FIRST") == 0);  // another value is ignored, as by the driver
}

TEST_CASE("memory shared with a process that sees its device under another ordinal", "[driver][devices][ipc]") {
  // This process sees both devices; the child sees only device 1, as its ordinal 0.
  CUcontext ctx = nullptr;
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  // Virtual memory on device 1, exported as a descriptor.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  REQUIRE(cuMemCreate(&handle, 2 * kMiB, &prop, 0) == CUDA_SUCCESS);
  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  // cuMemAlloc memory on device 1, shared through a legacy IPC handle.
  CUdeviceptr legacy = 0;
  REQUIRE(cuMemAlloc(&legacy, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(legacy, 0x42, 4096) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CUipcMemHandle ipc{};
  REQUIRE(cuIpcGetMemHandle(&ipc, legacy) == CUDA_SUCCESS);

  auto child = [&](const char* visible, CUresult expected_import, int expected_ordinal) {
    return in_child([=] {
      setenv("CUDA_VISIBLE_DEVICES", visible, 1);
      CHILD_CHECK(start_primary_context());
      CUmemGenericAllocationHandle imported = 0;
      const CUresult rc = cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      CHILD_CHECK(rc == expected_import);
      if (rc == CUDA_SUCCESS) {
        CUmemAllocationProp seen{};
        CHILD_CHECK(cuMemGetAllocationPropertiesFromHandle(&seen, imported) == CUDA_SUCCESS);
        CHILD_CHECK(seen.location.id == expected_ordinal);
        CHILD_CHECK(cuMemRelease(imported) == CUDA_SUCCESS);
      }
      CUdeviceptr opened = 0;
      CHILD_CHECK(cuIpcOpenMemHandle(&opened, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
      int ordinal = -1;
      CHILD_CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, opened) == CUDA_SUCCESS);
      CHILD_CHECK(ordinal == expected_ordinal);
      CHILD_CHECK(reinterpret_cast<const unsigned char*>(opened)[4095] == 0x42);
      CHILD_CHECK(cuIpcCloseMemHandle(opened) == CUDA_SUCCESS);
      return 0;
    });
  };
  CHECK(child("1", CUDA_SUCCESS, 0) == 0);    // device 1 is the child's ordinal 0
  CHECK(child("0,1", CUDA_SUCCESS, 1) == 0);  // and here its ordinal 1
  // A process that does not see device 1 cannot import its virtual memory; the legacy handle still
  // opens, on the current device.
  CHECK(child("0", CUDA_ERROR_NOT_SUPPORTED, 0) == 0);
  close(fd);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  CHECK(cuMemFree(legacy) == CUDA_SUCCESS);
  CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
}

// --- per-context settings, function attributes and occupancy ---

namespace {

const char kSettingsPtx[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry work()\n{\n\tret;\n}\n";

CUresult launch_with_shared(CUfunction f, unsigned shared) {
  return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, shared, nullptr, nullptr, nullptr);
}

}  // namespace

TEST_CASE("context limits and cache configuration are kept per context", "[driver][contexts]") {
  CUcontext ctx = primary_context();
  size_t value = 0;
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS);
  CHECK(value == 1024);
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS);
  CHECK(value == 8 * kMiB);
  CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64 * kMiB) == CUDA_SUCCESS);
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS);
  CHECK(value == 64 * kMiB);
  CHECK(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 100) == CUDA_SUCCESS);  // a hint, rounded down
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_MAX_L2_FETCH_GRANULARITY) == CUDA_SUCCESS);
  CHECK(value == 64);
  CHECK(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 129) == CUDA_ERROR_INVALID_VALUE);
  int persisting = 0;
  REQUIRE(cuDeviceGetAttribute(&persisting, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 0) == CUDA_SUCCESS);
  CHECK(persisting > 0);
  CHECK(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, static_cast<size_t>(persisting) * 2) == CUDA_SUCCESS);
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == CUDA_SUCCESS);
  CHECK(value == static_cast<size_t>(persisting));  // clamped to the device's maximum
  CHECK(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4) == CUDA_ERROR_UNSUPPORTED_LIMIT);
  CHECK(cuCtxSetLimit(CU_LIMIT_MAX, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxGetLimit(nullptr, CU_LIMIT_STACK_SIZE) == CUDA_ERROR_INVALID_VALUE);

  CUfunc_cache config = CU_FUNC_CACHE_PREFER_L1;
  CHECK(cuCtxGetCacheConfig(&config) == CUDA_SUCCESS);
  CHECK(config == CU_FUNC_CACHE_PREFER_NONE);
  CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED) == CUDA_SUCCESS);
  CHECK(cuCtxGetCacheConfig(&config) == CUDA_SUCCESS);
  CHECK(config == CU_FUNC_CACHE_PREFER_SHARED);
  CHECK(cuCtxSetCacheConfig(static_cast<CUfunc_cache>(7)) == CUDA_ERROR_INVALID_VALUE);

  // Another context has its own; a primary context reset starts from the defaults again.
  CUcontext other = nullptr;
  REQUIRE(cuCtxCreate(&other, nullptr, 0, 0) == CUDA_SUCCESS);
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS);
  CHECK(value == 8 * kMiB);
  REQUIRE(cuCtxDestroy(other) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  CHECK(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE) == CUDA_SUCCESS);
  CHECK(value == 64 * kMiB);
  CHECK(cuProfilerStart() == CUDA_SUCCESS);  // no profiler: nothing to do
  CHECK(cuProfilerStop() == CUDA_SUCCESS);
  const int rc = in_child([] {
    CUfunc_cache c{};
    size_t v = 0;
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE) == CUDA_ERROR_INVALID_CONTEXT);  // none current
    CHILD_CHECK(cuCtxGetCacheConfig(&c) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuProfilerStart() == CUDA_ERROR_INVALID_CONTEXT);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("stream priorities: the device's range, clamped, read back", "[driver][streams]") {
  primary_context();
  int supported = 0, least = 1, greatest = 1;
  CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(supported == 1);
  CHECK(cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS);
  CHECK(least == 0);
  CHECK(greatest == -5);
  CHECK(cuCtxGetStreamPriorityRange(nullptr, &greatest) == CUDA_SUCCESS);  // either may be NULL
  CUstream high = nullptr, low = nullptr, middle = nullptr;
  REQUIRE(cuStreamCreateWithPriority(&high, CU_STREAM_NON_BLOCKING, -10) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreateWithPriority(&low, CU_STREAM_DEFAULT, 3) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreateWithPriority(&middle, CU_STREAM_DEFAULT, -2) == CUDA_SUCCESS);
  int priority = 1;
  CHECK(cuStreamGetPriority(high, &priority) == CUDA_SUCCESS);
  CHECK(priority == -5);
  CHECK(cuStreamGetPriority(low, &priority) == CUDA_SUCCESS);
  CHECK(priority == 0);
  CHECK(cuStreamGetPriority(middle, &priority) == CUDA_SUCCESS);
  CHECK(priority == -2);
  CHECK(cuStreamGetPriority(nullptr, &priority) == CUDA_SUCCESS);  // the legacy stream
  CHECK(priority == 0);
  CHECK(cuStreamGetPriority(CU_STREAM_PER_THREAD, &priority) == CUDA_SUCCESS);
  CHECK(cuStreamGetPriority(high, nullptr) == CUDA_ERROR_INVALID_VALUE);
  for (CUstream s : {high, low, middle}) CHECK(cuStreamDestroy(s) == CUDA_SUCCESS);
  CHECK(cuStreamGetPriority(high, &priority) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("function attributes: reported, settable where documented, and the launch follows them",
          "[driver][kernels]") {
  primary_context();
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  REQUIRE(cuModuleLoadData(&module, kSettingsPtx) == CUDA_SUCCESS);
  REQUIRE(cuModuleGetFunction(&f, module, "work") == CUDA_SUCCESS);
  int value = -1;
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f) == CUDA_SUCCESS);
  CHECK(value == 1024);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_SUCCESS);
  CHECK(value == 32);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f) == CUDA_SUCCESS);
  CHECK(value == 90);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f) == CUDA_SUCCESS);
  CHECK(value == 0);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f) == CUDA_SUCCESS);
  CHECK(value == 48 * 1024);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, f) == CUDA_SUCCESS);
  CHECK(value == -1);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX, f) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_ERROR_INVALID_VALUE);

  // More dynamic shared memory only once the function opts in to it, up to the device's limit.
  CHECK(launch_with_shared(f, 64 * 1024) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 * 1024) == CUDA_SUCCESS);
  CHECK(launch_with_shared(f, 64 * 1024) == CUDA_SUCCESS);
  CHECK(launch_with_shared(f, 101 * 1024) == CUDA_ERROR_INVALID_VALUE);
  int optin = 0;
  REQUIRE(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0) == CUDA_SUCCESS);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50) == CUDA_SUCCESS);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, f) == CUDA_SUCCESS);
  CHECK(value == 50);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 16) == CUDA_ERROR_INVALID_VALUE);  // read-only
  CHECK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_L1) == CUDA_SUCCESS);
  CHECK(cuFuncSetCacheConfig(f, static_cast<CUfunc_cache>(9)) == CUDA_ERROR_INVALID_VALUE);
  const char* name = nullptr;
  CHECK(cuFuncGetName(&name, f) == CUDA_SUCCESS);
  CHECK(std::string(name) == "work");
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_ERROR_INVALID_HANDLE);

  // A library kernel: per-device calls, the same settings through its function handle.
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  REQUIRE(cuLibraryLoadData(&library, kSettingsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  REQUIRE(cuLibraryGetKernel(&kernel, library, "work") == CUDA_SUCCESS);
  CHECK(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel, 0) == CUDA_SUCCESS);
  CHECK(value == 48 * 1024);
  CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 80 * 1024, kernel, 0) == CUDA_SUCCESS);
  CHECK(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel, 9) ==
        CUDA_ERROR_INVALID_DEVICE);
  CUfunction through = nullptr;
  CHECK(cuKernelGetFunction(&through, kernel) == CUDA_SUCCESS);
  CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, through) == CUDA_SUCCESS);
  CHECK(value == 80 * 1024);
  CHECK(launch_with_shared(through, 70 * 1024) == CUDA_SUCCESS);
  CHECK(cuKernelSetCacheConfig(kernel, CU_FUNC_CACHE_PREFER_EQUAL, 0) == CUDA_SUCCESS);
  CHECK(cuKernelGetName(&name, kernel) == CUDA_SUCCESS);
  CHECK(std::string(name) == "work");
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel, 0) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("occupancy follows the documented model of the simulated device", "[driver][kernels]") {
  primary_context();
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  REQUIRE(cuLibraryLoadData(&library, kSettingsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  REQUIRE(cuLibraryGetKernel(&kernel, library, "work") == CUDA_SUCCESS);
  const auto f = reinterpret_cast<CUfunction>(kernel);
  auto blocks = [f](int block, size_t shared) {
    int n = -1;
    return cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, shared) == CUDA_SUCCESS ? n : -1;
  };
  CHECK(blocks(1024, 0) == 2);     // 2048 threads per multiprocessor
  CHECK(blocks(256, 0) == 8);
  CHECK(blocks(100, 0) == 16);     // whole warps: 128 threads each
  CHECK(blocks(32, 0) == 32);      // at most 32 blocks
  CHECK(blocks(64, 40000) == 5);   // 233472 bytes of shared memory, 1 KiB of it reserved per block
  CHECK(blocks(1025, 0) == 0);     // no such block
  CHECK(blocks(64, 49153) == 0);   // more than the function may use
  int n = 0;
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 64, 0, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) ==
        CUDA_SUCCESS);
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 64, 0, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, nullptr, 64, 0) == CUDA_ERROR_INVALID_HANDLE);

  int grid = 0, block = 0;
  CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, nullptr, 0, 0) == CUDA_SUCCESS);
  CHECK(block == 1024);  // every size that fills the multiprocessor ties: the largest wins
  CHECK(grid == 2 * 132);
  CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, nullptr, 0, 200) == CUDA_SUCCESS);
  CHECK(block == 128);  // 200 (7 warps) fits 9 blocks, 1800 threads; 192 fits 10, 1920; 128 fits 16, 2048
  CHECK(grid == 16 * 132);
  // Shared memory that grows with the block: 100 bytes per thread.
  CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, [](int size) { return size_t(size) * 100; }, 0, 0) ==
        CUDA_SUCCESS);
  // Up to 491 threads the function's 48 KiB suffice: 480 fits 4 blocks (1920 threads), 256 fits 8
  // (25600 + 1024 bytes each), 2048 threads.
  CHECK(block == 256);
  CHECK(grid == 8 * 132);
  size_t available = 0;
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&available, f, 2, 1024) == CUDA_SUCCESS);
  CHECK(available == 48 * 1024);  // the function's own limit
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&available, f, 8, 64) == CUDA_SUCCESS);
  CHECK(available == 233472 / 8 - 1024);
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&available, f, 3, 1024) == CUDA_SUCCESS);
  CHECK(available == 0);  // three such blocks never fit
  REQUIRE(cuLibraryUnload(library) == CUDA_SUCCESS);
}

TEST_CASE("peer copies between two contexts' memory", "[driver][peers]") {
  CUcontext ctx0 = primary_context();
  CUcontext ctx1 = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  REQUIRE(cuMemAlloc(&a, 4096) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx1) == CUDA_SUCCESS);
  REQUIRE(cuMemAlloc(&b, 4096) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx0) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(a, 0x61, 4096) == CUDA_SUCCESS);
  CHECK(cuMemcpyPeer(b, ctx1, a, ctx0, 4096) == CUDA_SUCCESS);
  unsigned char back[4] = {};
  REQUIRE(cuMemcpyDtoH(back, b + 4092, 4) == CUDA_SUCCESS);
  CHECK(back[3] == 0x61);
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(b, 0x62, 16) == CUDA_SUCCESS);
  // The memset is ordered on the legacy stream, which a non-blocking stream does not wait for.
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(cuMemcpyPeerAsync(a, ctx0, b, ctx1, 16, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoH(back, a, 4) == CUDA_SUCCESS);
  CHECK(back[0] == 0x62);
  CUcontext gone = nullptr;
  REQUIRE(cuCtxCreate(&gone, nullptr, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxDestroy(gone) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx0) == CUDA_SUCCESS);
  CHECK(cuMemcpyPeer(b, gone, a, ctx0, 16) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuMemcpyPeer(b, ctx1, a, ctx0, 8192) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(a) == CUDA_SUCCESS);
  CHECK(cuMemFree(b) == CUDA_SUCCESS);
  CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
}

// 12.x's names, which cuda.h maps to newer forms or declares only as deprecated.
extern "C" CUresult device_get_uuid_v1(CUuuid* uuid, CUdevice dev) __asm__("cuDeviceGetUuid");

TEST_CASE("PCI bus ids name the visible devices both ways", "[driver][devices]") {
  CHECK(in_child([] {
          setenv("CUDASIM_DEVICES", "3", 1);
          setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
          setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
          CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
          char id[32] = {};
          CHILD_CHECK(cuDeviceGetPCIBusId(id, sizeof id, 0) == CUDA_SUCCESS);
          CHILD_CHECK(std::string(id) == "0000:03:00.0");  // device 2: bus 3
          CHILD_CHECK(cuDeviceGetPCIBusId(id, sizeof id, 1) == CUDA_SUCCESS);
          CHILD_CHECK(std::string(id) == "0000:01:00.0");
          char short_id[8] = {};
          CHILD_CHECK(cuDeviceGetPCIBusId(short_id, sizeof short_id, 1) == CUDA_SUCCESS);
          CHILD_CHECK(std::string(short_id) == "0000:01");  // shortened to the length given
          CUdevice dev = -1;
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "0000:03:00.0") == CUDA_SUCCESS && dev == 0);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "0000:01:00") == CUDA_SUCCESS && dev == 1);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "01:00.0") == CUDA_SUCCESS && dev == 1);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "00000000:03:00.0") == CUDA_SUCCESS && dev == 0);
          // Device 1 is hidden, device 9 does not exist: well-formed, but no visible device.
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "0000:02:00.0") == CUDA_ERROR_INVALID_DEVICE);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "0000:0a:00.0") == CUDA_ERROR_INVALID_DEVICE);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "0001:03:00.0") == CUDA_ERROR_INVALID_DEVICE);
          for (const char* bad : {"", "03", "0000:03", "0000:03:00.", "zz:00.0", "0000:03:00.0x", "0:0:0:0.0"})
            CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, bad) == CUDA_ERROR_INVALID_VALUE);
          CHILD_CHECK(cuDeviceGetByPCIBusId(nullptr, "01:00.0") == CUDA_ERROR_INVALID_VALUE);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, nullptr) == CUDA_ERROR_INVALID_VALUE);
          CHILD_CHECK(cuDeviceGetPCIBusId(id, 0, 0) == CUDA_ERROR_INVALID_VALUE);
          CHILD_CHECK(cuDeviceGetPCIBusId(id, sizeof id, 2) == CUDA_ERROR_INVALID_DEVICE);
          return 0;
        }) == 0);
  CHECK(in_child([] {
          char id[32] = {};
          CUdevice dev = 0;
          CHILD_CHECK(cuDeviceGetPCIBusId(id, sizeof id, 0) == CUDA_ERROR_NOT_INITIALIZED);
          CHILD_CHECK(cuDeviceGetByPCIBusId(&dev, "01:00.0") == CUDA_ERROR_NOT_INITIALIZED);
          return 0;
        }) == 0);
}

// cuDeviceComputeCapability and cuDeviceGetProperties are deprecated, and still exported: tested as such.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("older device queries agree with the attributes", "[driver][devices]") {
  primary_context();
  int major = 0, minor = -1, attr_major = 0, attr_minor = -1;
  REQUIRE(cuDeviceComputeCapability(&major, &minor, 0) == CUDA_SUCCESS);
  REQUIRE(cuDeviceGetAttribute(&attr_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == CUDA_SUCCESS);
  REQUIRE(cuDeviceGetAttribute(&attr_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0) == CUDA_SUCCESS);
  CHECK((major == attr_major && minor == attr_minor));
  CHECK(cuDeviceComputeCapability(&major, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceComputeCapability(&major, &minor, 5) == CUDA_ERROR_INVALID_DEVICE);

  CUdevprop prop{};
  REQUIRE(cuDeviceGetProperties(&prop, 1) == CUDA_SUCCESS);
  int value = 0;
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1) == CUDA_SUCCESS);
  CHECK(prop.maxThreadsPerBlock == value);
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 1) == CUDA_SUCCESS);
  CHECK(prop.maxGridSize[1] == value);
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1) == CUDA_SUCCESS);
  CHECK(prop.SIMDWidth == value);
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 1) == CUDA_SUCCESS);
  CHECK(prop.textureAlign == value);
  CHECK(cuDeviceGetProperties(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetProperties(&prop, -1) == CUDA_ERROR_INVALID_DEVICE);

  CUuuid v1{}, v2{};
  REQUIRE(device_get_uuid_v1(&v1, 1) == CUDA_SUCCESS);
  REQUIRE(cuDeviceGetUuid_v2(&v2, 1) == CUDA_SUCCESS);
  CHECK(std::memcmp(v1.bytes, v2.bytes, sizeof v1.bytes) == 0);

  int supported = -1;
  REQUIRE(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0) == CUDA_SUCCESS);
  CHECK(supported == 0);
  CHECK(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_MAX, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetExecAffinitySupport(nullptr, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0) == CUDA_ERROR_INVALID_VALUE);

  const CUatomicOperation ops[2] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_FLOAT_MAX};
  unsigned caps[2] = {7, 7};
  REQUIRE(cuDeviceGetHostAtomicCapabilities(caps, ops, 2, 0) == CUDA_SUCCESS);
  CHECK((caps[0] == 0 && caps[1] == 0));
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(value == 0);  // the same answer
  const CUatomicOperation bad = CU_ATOMIC_OPERATION_MAX;
  CHECK(cuDeviceGetHostAtomicCapabilities(caps, &bad, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetHostAtomicCapabilities(caps, ops, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetHostAtomicCapabilities(caps, ops, 2, 7) == CUDA_ERROR_INVALID_DEVICE);

  void* fn = nullptr;
  REQUIRE(cuGetProcAddress_v2("cuDeviceGetPCIBusId", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) ==
          CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuDeviceGetPCIBusId));
  REQUIRE(cuGetProcAddress_v2("cuDeviceGetUuid", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&device_get_uuid_v1));
}
#pragma GCC diagnostic pop

TEST_CASE("async notifications are registered and unregistered per device", "[driver][devices]") {
  primary_context();
  static bool called = false;
  const CUasyncCallback callback = [](CUasyncNotificationInfo*, void*, CUasyncCallbackHandle) { called = true; };
  CUasyncCallbackHandle first = nullptr, second = nullptr;
  REQUIRE(cuDeviceRegisterAsyncNotification(0, callback, nullptr, &first) == CUDA_SUCCESS);
  REQUIRE(cuDeviceRegisterAsyncNotification(1, callback, &called, &second) == CUDA_SUCCESS);
  CHECK((first != nullptr && second != nullptr && first != second));
  CHECK(cuDeviceUnregisterAsyncNotification(0, second) == CUDA_ERROR_INVALID_VALUE);  // device 1's
  REQUIRE(cuDeviceUnregisterAsyncNotification(1, second) == CUDA_SUCCESS);
  CHECK(cuDeviceUnregisterAsyncNotification(1, second) == CUDA_ERROR_INVALID_VALUE);  // already gone
  REQUIRE(cuDeviceUnregisterAsyncNotification(0, first) == CUDA_SUCCESS);
  CHECK(cuDeviceRegisterAsyncNotification(0, nullptr, nullptr, &first) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceRegisterAsyncNotification(0, callback, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceRegisterAsyncNotification(4, callback, nullptr, &first) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(!called);  // no notification is ever sent here
}

TEST_CASE("peer atomic capabilities follow the peer link, as NATIVE_ATOMIC_SUPPORTED says", "[driver][peers]") {
  primary_context();
  const CUatomicOperation ops[4] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS,
                                    CU_ATOMIC_OPERATION_FLOAT_ADD, CU_ATOMIC_OPERATION_FLOAT_MAX};
  unsigned caps[4] = {0, 0, 0, 0};
  REQUIRE(cuDeviceGetP2PAtomicCapabilities(caps, ops, 4, 0, 1) == CUDA_SUCCESS);
  int native = 0;
  REQUIRE(cuDeviceGetP2PAttribute(&native, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 0, 1) == CUDA_SUCCESS);
  CHECK(native == 1);
  CHECK(caps[0] == (CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_REDUCTION |
                    CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64));
  CHECK((caps[1] & CU_ATOMIC_CAPABILITY_SCALAR_128) != 0);
  CHECK((caps[2] & CU_ATOMIC_CAPABILITY_VECTOR_32x4) != 0);
  CHECK(caps[3] == 0);
  unsigned reverse[4] = {0, 0, 0, 0};
  REQUIRE(cuDeviceGetP2PAtomicCapabilities(reverse, ops, 4, 1, 0) == CUDA_SUCCESS);
  CHECK(std::equal(caps, caps + 4, reverse));
  // Documented errors.
  CHECK(cuDeviceGetP2PAtomicCapabilities(caps, ops, 4, 0, 0) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGetP2PAtomicCapabilities(caps, ops, 4, 0, 2) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGetP2PAtomicCapabilities(caps, ops, 4, -1, 1) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGetP2PAtomicCapabilities(nullptr, ops, 4, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetP2PAtomicCapabilities(caps, nullptr, 4, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetP2PAtomicCapabilities(caps, ops, 0, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  const CUatomicOperation bad[1] = {CU_ATOMIC_OPERATION_MAX};
  CHECK(cuDeviceGetP2PAtomicCapabilities(caps, bad, 1, 0, 1) == CUDA_ERROR_INVALID_VALUE);

  // Without peer access nothing is native.
  CHECK(in_child([] {
          setenv("CUDASIM_PEER_ACCESS", "none", 1);
          CHILD_CHECK(start_primary_context());
          unsigned child_caps[4] = {9, 9, 9, 9};
          const CUatomicOperation child_ops[4] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS,
                                                  CU_ATOMIC_OPERATION_FLOAT_ADD, CU_ATOMIC_OPERATION_AND};
          CHILD_CHECK(cuDeviceGetP2PAtomicCapabilities(child_caps, child_ops, 4, 0, 1) == CUDA_SUCCESS);
          CHILD_CHECK(child_caps[0] == 0 && child_caps[1] == 0 && child_caps[2] == 0 && child_caps[3] == 0);
          return 0;
        }) == 0);
}

TEST_CASE("the 1D linear texture limit: plain formats with 1, 2 or 4 channels", "[driver][devices]") {
  primary_context();
  int attribute = 0;
  REQUIRE(cuDeviceGetAttribute(&attribute, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 0) == CUDA_SUCCESS);
  CHECK(attribute > 0);
  size_t width = 0;
  REQUIRE(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, 1) == CUDA_SUCCESS);
  CHECK(width == static_cast<size_t>(attribute));
  REQUIRE(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0) == CUDA_SUCCESS);
  CHECK(width == static_cast<size_t>(attribute));
  CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 3, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, static_cast<CUarray_format>(0x7777), 1, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_NV12, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetTexture1DLinearMaxWidth(nullptr, CU_AD_FORMAT_FLOAT, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 1, 2) == CUDA_ERROR_INVALID_DEVICE);
}

TEST_CASE("GPUDirect RDMA flushes: supported as the attribute says, arguments checked", "[driver][devices]") {
  primary_context();
  int options = 0, rdma = 1;
  REQUIRE(cuDeviceGetAttribute(&options, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 0) == CUDA_SUCCESS);
  REQUIRE(cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(options == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST);  // not MEMOPS: stream memops refuse the flush
  CHECK(rdma == 0);
  CHECK(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                   CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER) == CUDA_SUCCESS);
  CHECK(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                   CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES) == CUDA_SUCCESS);
  CHECK(cuFlushGPUDirectRDMAWrites(static_cast<CUflushGPUDirectRDMAWritesTarget>(1),
                                   CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                   static_cast<CUflushGPUDirectRDMAWritesScope>(150)) == CUDA_ERROR_INVALID_VALUE);
  CUcontext popped = nullptr;
  while (cuCtxPopCurrent(&popped) == CUDA_SUCCESS) {
  }
  CHECK(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                   CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER) == CUDA_ERROR_INVALID_CONTEXT);
  primary_context();
}

// What stays unsupported is reported so: no attribute claims a feature whose calls are stubs.
TEST_CASE("attributes of features that are not simulated read 0", "[driver][devices]") {
  primary_context();
  for (const CUdevice_attribute attribute :
       {CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH,
        CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED}) {
    int value = -1;
    REQUIRE(cuDeviceGetAttribute(&value, attribute, 0) == CUDA_SUCCESS);
    INFO("attribute " << static_cast<int>(attribute));
    CHECK(value == 0);
  }
  // And the other way round: interprocess events and host registration are simulated.
  int ipc_events = 0;
  REQUIRE(cuDeviceGetAttribute(&ipc_events, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(ipc_events == 1);
  int host_register = 0;  // cuMemHostRegister (host_memory.cpp)
  REQUIRE(cuDeviceGetAttribute(&host_register, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 0) == CUDA_SUCCESS);
  CHECK(host_register == 1);
}
