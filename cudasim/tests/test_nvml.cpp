// The simulated NVML (libnvidia-ml.so.1): initialisation reference counting, every function's
// errors, and memory figures that follow the simulated driver's state in the same process.
// Runs with the driver tests' platform: two devices of 8 GiB and 2 GiB, 300 MiB per context.
#include "driver_support.h"
#include "nvml_api.h"

#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

using namespace driver_test;

namespace {

constexpr unsigned long long kDevice0 = 8ull << 30;
constexpr unsigned long long kDevice1 = 2ull << 30;
constexpr unsigned long long kContextOverhead = 300ull << 20;

std::string name(nvmlReturn_t rc) { return nvmlErrorString(rc); }

// The calling process's NVML view of a device: (total, free, used) from the v1 query.
nvmlMemory_t memory_of(unsigned int index) {
  nvmlDevice_t device = nullptr;
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(index, &device) == NVML_SUCCESS);
  nvmlMemory_t memory{};
  REQUIRE(nvmlDeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS);
  CHECK(memory.free + memory.used == memory.total);
  return memory;
}

// Holds one NVML initialisation for a test's scope.
struct NvmlSession {
  NvmlSession() { REQUIRE(nvmlInit_v2() == NVML_SUCCESS); }
  ~NvmlSession() { CHECK(nvmlShutdown() == NVML_SUCCESS); }
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;
};

}  // namespace

TEST_CASE("nvml: every call before nvmlInit is NVML_ERROR_UNINITIALIZED", "[nvml]") {
  unsigned int count = 0;
  nvmlDevice_t device = nullptr;
  nvmlMemory_t memory{};
  nvmlMemory_v2_t memory_v2{};
  memory_v2.version = nvmlMemory_v2;
  CHECK(nvmlDeviceGetCount_v2(&count) == NVML_ERROR_UNINITIALIZED);
  CHECK(nvmlDeviceGetCount_v2(nullptr) == NVML_ERROR_UNINITIALIZED);
  CHECK(nvmlDeviceGetHandleByIndex_v2(0, &device) == NVML_ERROR_UNINITIALIZED);
  CHECK(nvmlDeviceGetMemoryInfo(device, &memory) == NVML_ERROR_UNINITIALIZED);
  CHECK(nvmlDeviceGetMemoryInfo_v2(device, &memory_v2) == NVML_ERROR_UNINITIALIZED);
  CHECK(nvmlShutdown() == NVML_ERROR_UNINITIALIZED);
}

TEST_CASE("nvml: initialisation is reference counted", "[nvml]") {
  unsigned int count = 0;
  REQUIRE(nvmlInit_v2() == NVML_SUCCESS);
  REQUIRE(nvmlInit() == NVML_SUCCESS);  // the unversioned export behaves the same
  CHECK(nvmlShutdown() == NVML_SUCCESS);
  CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS);  // one initialisation left
  CHECK(count == 2);
  CHECK(nvmlShutdown() == NVML_SUCCESS);
  CHECK(nvmlDeviceGetCount_v2(&count) == NVML_ERROR_UNINITIALIZED);
  CHECK(nvmlShutdown() == NVML_ERROR_UNINITIALIZED);  // more shutdowns than initialisations
  REQUIRE(nvmlInit_v2() == NVML_SUCCESS);             // and it can start again
  CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS);
  CHECK(nvmlShutdown() == NVML_SUCCESS);
}

TEST_CASE("nvml: devices, handles and argument errors", "[nvml]") {
  NvmlSession session;
  unsigned int count = 0;
  REQUIRE(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS);
  CHECK(count == 2);
  CHECK(nvmlDeviceGetCount_v2(nullptr) == NVML_ERROR_INVALID_ARGUMENT);

  nvmlDevice_t first = nullptr, again = nullptr, second = nullptr;
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(0, &first) == NVML_SUCCESS);
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(0, &again) == NVML_SUCCESS);
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(1, &second) == NVML_SUCCESS);
  CHECK(first != nullptr);
  CHECK(first == again);
  CHECK(first != second);
  CHECK(nvmlDeviceGetHandleByIndex_v2(2, &again) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(nvmlDeviceGetHandleByIndex_v2(0, nullptr) == NVML_ERROR_INVALID_ARGUMENT);

  nvmlMemory_t memory{};
  CHECK(nvmlDeviceGetMemoryInfo(first, nullptr) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(nvmlDeviceGetMemoryInfo(nullptr, &memory) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(nvmlDeviceGetMemoryInfo(reinterpret_cast<nvmlDevice_t>(&memory), &memory) == NVML_ERROR_INVALID_ARGUMENT);
  // A handle of a device that does not exist (the table's third entry).
  char* const base = reinterpret_cast<char*>(first);
  const auto step = reinterpret_cast<char*>(second) - base;
  nvmlDevice_t beyond = reinterpret_cast<nvmlDevice_t>(base + 2 * step);
  CHECK(nvmlDeviceGetMemoryInfo(beyond, &memory) == NVML_ERROR_INVALID_ARGUMENT);

  nvmlMemory_v2_t v2{};
  CHECK(nvmlDeviceGetMemoryInfo_v2(first, nullptr) == NVML_ERROR_INVALID_ARGUMENT);
  v2.version = 1;
  CHECK(nvmlDeviceGetMemoryInfo_v2(first, &v2) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  v2.version = (2u << 24) | 32u;  // the right number with a wrong size
  CHECK(nvmlDeviceGetMemoryInfo_v2(first, &v2) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  CHECK(nvmlMemory_v2 == 0x02000028u);  // sizeof(nvmlMemory_v2_t) == 40, version 2 in the top byte
  v2.version = nvmlMemory_v2;
  CHECK(nvmlDeviceGetMemoryInfo_v2(nullptr, &v2) == NVML_ERROR_INVALID_ARGUMENT);
  REQUIRE(nvmlDeviceGetMemoryInfo_v2(second, &v2) == NVML_SUCCESS);
  CHECK(v2.version == nvmlMemory_v2);
  CHECK(v2.total == kDevice1);
  CHECK(v2.reserved == 0);
  CHECK(v2.free + v2.used == v2.total);
}

TEST_CASE("nvml: error strings", "[nvml]") {
  CHECK(name(NVML_SUCCESS) == "Success");
  CHECK(name(NVML_ERROR_UNINITIALIZED) == "Uninitialized");
  CHECK(name(NVML_ERROR_INVALID_ARGUMENT) == "Invalid Argument");
  CHECK(name(NVML_ERROR_NOT_SUPPORTED) == "Not Supported");
  CHECK(name(NVML_ERROR_NOT_FOUND) == "Not Found");
  CHECK(name(NVML_ERROR_ARGUMENT_VERSION_MISMATCH) == "Argument Version Mismatch");
  CHECK(name(NVML_ERROR_UNKNOWN) == "Unknown Error");
  CHECK(name(static_cast<nvmlReturn_t>(12345)) == "Unknown Error");
  // Documented values.
  CHECK(NVML_ERROR_UNINITIALIZED == 1);
  CHECK(NVML_ERROR_INVALID_ARGUMENT == 2);
  CHECK(NVML_ERROR_NOT_SUPPORTED == 3);
  CHECK(NVML_ERROR_NOT_FOUND == 6);
  CHECK(NVML_ERROR_ARGUMENT_VERSION_MISMATCH == 25);
  CHECK(NVML_ERROR_UNKNOWN == 999);
}

TEST_CASE("nvml: figures follow the driver's allocations in the same process", "[nvml]") {
  primary_context();
  NvmlSession session;
  size_t free = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
  nvmlMemory_t before = memory_of(0);
  CHECK(before.total == kDevice0);
  CHECK(before.total == total);
  CHECK(before.free == free);  // used == what cuMemGetInfo counts as taken
  CHECK(before.used >= kContextOverhead);

  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 64 * kMiB) == CUDA_SUCCESS);
  nvmlMemory_t allocated = memory_of(0);
  CHECK(allocated.used - before.used == 64 * kMiB);
  REQUIRE(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
  CHECK(allocated.free == free);
  nvmlMemory_v2_t v2{};
  v2.version = nvmlMemory_v2;
  nvmlDevice_t device = nullptr;
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(0, &device) == NVML_SUCCESS);
  REQUIRE(nvmlDeviceGetMemoryInfo_v2(device, &v2) == NVML_SUCCESS);
  CHECK(v2.used == allocated.used);
  CHECK(v2.free == allocated.free);

  // Pool reservations and arrays count too.
  CUdeviceptr pooled = 0;
  REQUIRE(cuMemAllocAsync(&pooled, 3 * kMiB, nullptr) == CUDA_SUCCESS);
  CHECK(memory_of(0).used - allocated.used == 4 * kMiB);  // 2 MiB units
  REQUIRE(cuMemFreeAsync(pooled, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);  // release threshold 0: given back
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 1000;
  desc.Height = 1000;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr;
  REQUIRE(cuArrayCreate(&array, &desc) == CUDA_SUCCESS);
  CHECK(memory_of(0).used - allocated.used == 4 * kMiB);
  REQUIRE(cuArrayDestroy(array) == CUDA_SUCCESS);

  REQUIRE(cuMemFree(ptr) == CUDA_SUCCESS);
  CHECK(memory_of(0).used == before.used);
  CHECK(memory_of(1).total == kDevice1);
}

TEST_CASE("nvml: works without cuInit, and sees contexts once the program makes them", "[nvml]") {
  int rc = in_child([] {
    // A fresh driver in the child: nothing initialised.
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    unsigned int count = 0;
    CHILD_CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count == 2);
    nvmlDevice_t device = nullptr;
    nvmlMemory_t memory{};
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(1, &device) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS);
    CHILD_CHECK(memory.total == kDevice1 && memory.used == 0 && memory.free == kDevice1);
    int cuda_count = 0;
    CHILD_CHECK(cuDeviceGetCount(&cuda_count) == CUDA_ERROR_NOT_INITIALIZED);  // NVML did not init CUDA
    CHILD_CHECK(start_primary_context());
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(0, &device) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS);
    CHILD_CHECK(memory.used == kContextOverhead);
    CHILD_CHECK(nvmlShutdown() == NVML_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
  rc = in_child([] {
    setenv("CUDASIM_DEVICES", "3", 1);
    setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    unsigned int count = 0;
    CHILD_CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count == 3);
    nvmlDevice_t device = nullptr;
    nvmlMemory_t memory{};
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(2, &device) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS && memory.total == (1ull << 30));
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("nvml: sees every device whatever CUDA_VISIBLE_DEVICES says, matched to CUDA's by UUID", "[nvml]") {
  const int rc = in_child([] {
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);  // CUDA sees device 1 only, as its ordinal 0
    CHILD_CHECK(start_primary_context());
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 64 << 20) == CUDA_SUCCESS);
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    unsigned int count = 0;
    CHILD_CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count == 2);
    CUuuid cuda_uuid{};
    CHILD_CHECK(cuDeviceGetUuid_v2(&cuda_uuid, 0) == CUDA_SUCCESS);
    char expected[64];
    const auto* b = reinterpret_cast<const unsigned char*>(cuda_uuid.bytes);
    std::snprintf(expected, sizeof expected, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                  b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    nvmlDevice_t hidden = nullptr, seen = nullptr;
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(0, &hidden) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(1, &seen) == NVML_SUCCESS);
    char uuid[64] = {};
    CHILD_CHECK(nvmlDeviceGetUUID(seen, uuid, sizeof uuid) == NVML_SUCCESS && std::strcmp(uuid, expected) == 0);
    CHILD_CHECK(nvmlDeviceGetUUID(hidden, uuid, sizeof uuid) == NVML_SUCCESS && std::strcmp(uuid, expected) != 0);
    nvmlMemory_t memory{};
    CHILD_CHECK(nvmlDeviceGetMemoryInfo(seen, &memory) == NVML_SUCCESS);
    CHILD_CHECK(memory.total == kDevice1 && memory.used == kContextOverhead + (64 << 20));
    CHILD_CHECK(nvmlDeviceGetMemoryInfo(hidden, &memory) == NVML_SUCCESS);
    CHILD_CHECK(memory.total == kDevice0 && memory.used == 0);
    CHILD_CHECK(nvmlShutdown() == NVML_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
  // No device visible to CUDA: NVML still sees both.
  const int none = in_child([] {
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    CHILD_CHECK(cuInit(0) == CUDA_ERROR_NO_DEVICE);
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    unsigned int count = 0;
    CHILD_CHECK(nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count == 2);
    return 0;
  });
  REQUIRE(none == 0);
}

TEST_CASE("nvml: a malformed simulator configuration fails nvmlInit", "[nvml]") {
  int rc = in_child([] {
    setenv("CUDASIM_DEVICES", "many", 1);
    CHILD_CHECK(nvmlInit_v2() == NVML_ERROR_UNKNOWN);
    unsigned int count = 0;
    CHILD_CHECK(nvmlDeviceGetCount_v2(&count) == NVML_ERROR_UNINITIALIZED);
    CHILD_CHECK(nvmlShutdown() == NVML_ERROR_UNINITIALIZED);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("nvml: found by its soname beside the driver, exporting NVML's names", "[nvml]") {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(library != nullptr);  // the test links it; LD_LIBRARY_PATH (cudasim_dir) finds it too
  CHECK(dlsym(library, "nvmlInit_v2") == reinterpret_cast<void*>(&nvmlInit_v2));
  for (const char* symbol : {"nvmlInit", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetCount_v2",
                             "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetMemoryInfo",
                             "nvmlDeviceGetMemoryInfo_v2"}) {
    INFO(symbol);
    CHECK(dlsym(library, symbol) != nullptr);
  }
  dlclose(library);
}

TEST_CASE("nvml: NCCL's look-ups are found: unversioned names, the compute capability, P2P status, the rest refused", "[nvml]") {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(library != nullptr);
  using Count = nvmlReturn_t (*)(unsigned int*);
  using ByIndex = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
  using Capability = nvmlReturn_t (*)(nvmlDevice_t, int*, int*);
  const auto count = reinterpret_cast<Count>(dlsym(library, "nvmlDeviceGetCount"));
  const auto by_index = reinterpret_cast<ByIndex>(dlsym(library, "nvmlDeviceGetHandleByIndex"));
  const auto capability = reinterpret_cast<Capability>(dlsym(library, "nvmlDeviceGetCudaComputeCapability"));
  REQUIRE(count != nullptr);
  REQUIRE(by_index != nullptr);
  REQUIRE(capability != nullptr);
  CHECK(dlsym(library, "nvmlDeviceGetP2PStatus") == reinterpret_cast<void*>(&nvmlDeviceGetP2PStatus));
  REQUIRE(nvmlInit_v2() == NVML_SUCCESS);
  unsigned int n = 0, n2 = 0;
  REQUIRE(count(&n) == NVML_SUCCESS);
  REQUIRE(nvmlDeviceGetCount_v2(&n2) == NVML_SUCCESS);
  CHECK(n == n2);
  nvmlDevice_t device = nullptr, device2 = nullptr;
  REQUIRE(by_index(0, &device) == NVML_SUCCESS);
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(0, &device2) == NVML_SUCCESS);
  CHECK(device == device2);
  int major = 0, minor = -1;
  REQUIRE(capability(device, &major, &minor) == NVML_SUCCESS);
  CHECK(major == 9);
  CHECK(minor == 0);
  CHECK(capability(device, nullptr, &minor) == NVML_ERROR_INVALID_ARGUMENT);
  for (const char* symbol : {"nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetIndex", "nvmlDeviceGetNvLinkState",
                             "nvmlDeviceGetFieldValues", "nvmlSystemGetConfComputeState"}) {
    INFO(symbol);
    CHECK(dlsym(library, symbol) != nullptr);
  }
  REQUIRE(nvmlShutdown() == NVML_SUCCESS);
  dlclose(library);
}

TEST_CASE("nvml: P2P status agrees with the driver's peer access, per capability", "[nvml]") {
  NvmlSession session;
  nvmlDevice_t d0 = nullptr, d1 = nullptr;
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS);
  REQUIRE(nvmlDeviceGetHandleByIndex_v2(1, &d1) == NVML_SUCCESS);
  REQUIRE(start_primary_context());
  int can_access = -1;
  REQUIRE(cuDeviceCanAccessPeer(&can_access, 0, 1) == CUDA_SUCCESS);
  REQUIRE(can_access == 1);  // the test platform's default: every distinct pair is peers
  int atomics = -1;
  REQUIRE(cuDeviceGetP2PAttribute(&atomics, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 0, 1) == CUDA_SUCCESS);
  REQUIRE(atomics == 1);
  auto status = [](nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t index) {
    nvmlGpuP2PStatus_t s = NVML_P2P_STATUS_UNKNOWN;
    REQUIRE(nvmlDeviceGetP2PStatus(a, b, index, &s) == NVML_SUCCESS);
    return s;
  };
  for (nvmlGpuP2PCapsIndex_t index : {NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_WRITE, NVML_P2P_CAPS_INDEX_ATOMICS,
                                      NVML_P2P_CAPS_INDEX_PCI}) {
    INFO("capability " << index);
    CHECK(status(d0, d1, index) == NVML_P2P_STATUS_OK);
    CHECK(status(d1, d0, index) == NVML_P2P_STATUS_OK);
    // A device is not its own peer (cuDeviceCanAccessPeer(0, 0) is 0), and says so with success.
    CHECK(status(d0, d0, index) == NVML_P2P_STATUS_NOT_SUPPORTED);
  }
  // No NVLink is simulated (nvmlDeviceGetNvLinkState is not supported).
  CHECK(status(d0, d1, NVML_P2P_CAPS_INDEX_NVLINK) == NVML_P2P_STATUS_NOT_SUPPORTED);
  // Bad arguments.
  nvmlGpuP2PStatus_t s = NVML_P2P_STATUS_OK;
  CHECK(nvmlDeviceGetP2PStatus(d0, d1, NVML_P2P_CAPS_INDEX_READ, nullptr) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(nvmlDeviceGetP2PStatus(d0, d1, NVML_P2P_CAPS_INDEX_UNKNOWN, &s) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(nvmlDeviceGetP2PStatus(d0, d1, static_cast<nvmlGpuP2PCapsIndex_t>(-1), &s) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(nvmlDeviceGetP2PStatus(nullptr, d1, NVML_P2P_CAPS_INDEX_READ, &s) == NVML_ERROR_INVALID_ARGUMENT);
  nvmlDevice_t bogus = reinterpret_cast<nvmlDevice_t>(reinterpret_cast<char*>(d0) + 1);
  CHECK(nvmlDeviceGetP2PStatus(d0, bogus, NVML_P2P_CAPS_INDEX_READ, &s) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(s == NVML_P2P_STATUS_OK);  // untouched by the failed calls
}

TEST_CASE("nvml: P2P status before cuInit and with CUDASIM_PEER_ACCESS=none", "[nvml]") {
  int rc = in_child([] {
    // Before cuInit: the configuration as cuInit would read it.
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    nvmlDevice_t d0 = nullptr, d1 = nullptr;
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(1, &d1) == NVML_SUCCESS);
    nvmlGpuP2PStatus_t s = NVML_P2P_STATUS_UNKNOWN;
    CHILD_CHECK(nvmlDeviceGetP2PStatus(d0, d1, NVML_P2P_CAPS_INDEX_READ, &s) == NVML_SUCCESS);
    CHILD_CHECK(s == NVML_P2P_STATUS_OK);
    return 0;
  });
  REQUIRE(rc == 0);
  rc = in_child([] {
    setenv("CUDASIM_PEER_ACCESS", "none", 1);
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    nvmlDevice_t d0 = nullptr, d1 = nullptr;
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(1, &d1) == NVML_SUCCESS);
    for (nvmlGpuP2PCapsIndex_t index : {NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_WRITE,
                                        NVML_P2P_CAPS_INDEX_ATOMICS, NVML_P2P_CAPS_INDEX_PCI}) {
      nvmlGpuP2PStatus_t s = NVML_P2P_STATUS_OK;
      CHILD_CHECK(nvmlDeviceGetP2PStatus(d0, d1, index, &s) == NVML_SUCCESS);
      CHILD_CHECK(s == NVML_P2P_STATUS_NOT_SUPPORTED);
    }
    // After cuInit the driver's answer is the same.
    CHILD_CHECK(start_primary_context());
    int can_access = -1;
    CHILD_CHECK(cuDeviceCanAccessPeer(&can_access, 0, 1) == CUDA_SUCCESS && can_access == 0);
    nvmlGpuP2PStatus_t s = NVML_P2P_STATUS_OK;
    CHILD_CHECK(nvmlDeviceGetP2PStatus(d1, d0, NVML_P2P_CAPS_INDEX_READ, &s) == NVML_SUCCESS);
    CHILD_CHECK(s == NVML_P2P_STATUS_NOT_SUPPORTED);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("nvml: handles by PCI bus id are the devices at cuDeviceGetPCIBusId's addresses", "[nvml]") {
  const int rc = in_child([] {
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);  // CUDA sees device 1 only, as its ordinal 0
    CHILD_CHECK(nvmlInit_v2() == NVML_SUCCESS);
    nvmlDevice_t d0 = nullptr, d1 = nullptr, found = nullptr;
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetHandleByIndex_v2(1, &d1) == NVML_SUCCESS);
    // Before cuInit: the addresses cuInit's devices will have.
    CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2("0000:02:00.0", &found) == NVML_SUCCESS && found == d1);
    CHILD_CHECK(start_primary_context());
    char bus_id[32] = {};
    CHILD_CHECK(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, 0) == CUDA_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(bus_id, &found) == NVML_SUCCESS && found == d1);
    CHILD_CHECK(nvmlDeviceGetHandleByPciBusId(bus_id, &found) == NVML_SUCCESS && found == d1);
    // The device CUDA_VISIBLE_DEVICES hides is NVML's still, at the address before it; every form.
    for (const char* text : {"0000:01:00.0", "00000000:01:00.0", "1:0.0", "01:00.0", "0:1:0.0"}) {
      found = nullptr;
      CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(text, &found) == NVML_SUCCESS && found == d0);
    }
    // Addresses no simulated device has.
    for (const char* text : {"0000:03:00.0", "0001:01:00.0", "0000:01:01.0", "0000:01:00.1", "0000:00:00.0"})
      CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(text, &found) == NVML_ERROR_NOT_FOUND);
    // Malformed addresses and NULL arguments.
    for (const char* text : {"", "01", "0000:01", "zz:00.0", "0000:01:00.0x", "0000:01:00.0:0"})
      CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(text, &found) == NVML_ERROR_INVALID_ARGUMENT);
    CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(nullptr, &found) == NVML_ERROR_INVALID_ARGUMENT);
    CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(bus_id, nullptr) == NVML_ERROR_INVALID_ARGUMENT);
    CHILD_CHECK(nvmlShutdown() == NVML_SUCCESS);
    CHILD_CHECK(nvmlDeviceGetHandleByPciBusId_v2(bus_id, &found) == NVML_ERROR_UNINITIALIZED);
    return 0;
  });
  REQUIRE(rc == 0);
}
