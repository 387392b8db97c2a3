// The simulated driver's devices as CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER select them: ordinals,
// UUIDs (with or without "GPU-", abbreviated), the list ending at an invalid entry, and memory shared
// between processes that see one device under different ordinals. Each configuration runs in a
// forked child (the driver reads the environment once, at cuInit).
#include "driver_support.h"

#include <catch2/catch.hpp>
#include <sys/mman.h>

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
