// CUDASIM_SHARED_DEVICES: one simulated device's memory shared by processes. Each scenario runs in
// forked children (a fresh driver reads its own environment at cuInit); the test process itself
// never initialises the driver.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "child_process.h"

using namespace driver_test;

namespace {

// The environment of every process of one scenario: one 8 GiB device shared through `dir`, no
// context overhead unless the scenario sets one.
void share_device(const std::string& dir, const char* overhead = "0") {
  setenv("CUDASIM_SHARED_DEVICES", dir.c_str(), 1);
  setenv("CUDASIM_DEVICE_MEMORY", "8GiB", 1);
  setenv("CUDASIM_CONTEXT_OVERHEAD", overhead, 1);
}

// A process that takes `bytes` of the shared device, says so through a pipe, and holds it until
// killed (at the latest when the Holder goes).
struct Holder {
  pid_t pid = -1;
  Holder(const std::string& dir, std::size_t bytes, const char* overhead = "0") {
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    pid = fork();
    if (pid == 0) {
      share_device(dir, overhead);
      CUdeviceptr ptr = 0;
      const char ok = start_primary_context() && cuMemAlloc(&ptr, bytes) == CUDA_SUCCESS ? 'y' : 'n';
      _exit(write(ready[1], &ok, 1) == 1 ? (pause(), 0) : 2);
    }
    char ok = 0;
    const bool told = read(ready[0], &ok, 1) == 1;
    close(ready[0]);
    close(ready[1]);
    REQUIRE((told && ok == 'y'));
  }
  ~Holder() { kill(); }
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    waitpid(std::exchange(pid, -1), nullptr, 0);
  }
};

}  // namespace

TEST_CASE("shared devices: every process sees the others' memory, and none passes the device", "[driver][shared]") {
  runtime_test::ScratchDir dir;
  Holder holder(dir.path(), 6 * kGiB);
  const int rc = in_child([&] {
    share_device(dir.path());
    CHILD_CHECK(start_primary_context());
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
    CHILD_CHECK(total == 8 * kGiB);
    CHILD_CHECK(free == 2 * kGiB);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 3 * kGiB) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemAlloc(&ptr, 1 * kGiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 1 * kGiB);
    // Every path that takes device memory counts: virtual memory too.
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle handle = 0;
    CHILD_CHECK(cuMemCreate(&handle, 2 * kGiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemCreate(&handle, 2 * kGiB, &prop, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 2 * kGiB);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("shared devices: a killed process's memory is free at once", "[driver][shared]") {
  runtime_test::ScratchDir dir;
  Holder holder(dir.path(), 7 * kGiB);
  Holder second(dir.path(), 512 * kMiB);
  holder.kill();
  const int rc = in_child([&] {
    share_device(dir.path());
    CHILD_CHECK(start_primary_context());
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
    CHILD_CHECK(free == 8 * kGiB - 512 * kMiB);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 7 * kGiB) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("shared devices: context overheads are the device's too", "[driver][shared]") {
  runtime_test::ScratchDir dir;
  Holder holder(dir.path(), 1 * kGiB, "3GiB");
  const int rc = in_child([&] {
    share_device(dir.path(), "3GiB");
    CHILD_CHECK(start_primary_context());
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS);
    CHILD_CHECK(free == 8 * kGiB - 7 * kGiB);  // two contexts and the holder's gigabyte
    return 0;
  });
  CHECK(rc == 0);
  // A third context does not fit beside two and 1 GiB + 1 GiB.
  Holder other(dir.path(), 1 * kGiB, "3GiB");
  const int refused = in_child([&] {
    share_device(dir.path(), "3GiB");
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    CHILD_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    return 0;
  });
  CHECK(refused == 0);
}

TEST_CASE("shared devices: bad settings make cuInit fail with one line", "[driver][shared]") {
  runtime_test::ScratchDir dir;
  CHECK(in_child([&] {
          setenv("CUDASIM_SHARED_DEVICES", "relative/dir", 1);
          return cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
        }) == 0);
  // A device file of another size that a process uses is not taken over; an unused one is.
  Holder holder(dir.path(), 1 * kGiB);
  CHECK(in_child([&] {
          share_device(dir.path());
          setenv("CUDASIM_DEVICE_MEMORY", "4GiB", 1);
          return cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
        }) == 0);
  holder.kill();
  CHECK(in_child([&] {
          share_device(dir.path());
          setenv("CUDASIM_DEVICE_MEMORY", "4GiB", 1);
          size_t free = 0, total = 0;
          CHILD_CHECK(start_primary_context());
          CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && total == 4 * kGiB && free == 4 * kGiB);
          return 0;
        }) == 0);
  // Off: each process has the device to itself.
  CHECK(in_child([&] {
          setenv("CUDASIM_SHARED_DEVICES", "0", 1);
          setenv("CUDASIM_DEVICE_MEMORY", "8GiB", 1);
          setenv("CUDASIM_CONTEXT_OVERHEAD", "0", 1);
          size_t free = 0, total = 0;
          CHILD_CHECK(start_primary_context());
          CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 8 * kGiB);
          return 0;
        }) == 0);
}

TEST_CASE("shared devices: a forked child does not hold its parent's memory", "[driver][shared]") {
  runtime_test::ScratchDir dir;
  const int rc = in_child([&] {
    share_device(dir.path());
    CHILD_CHECK(start_primary_context());
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 6 * kGiB) == CUDA_SUCCESS);
    // The grandchild's fresh driver attaches again: it sees the parent's 6 GiB, not twice.
    const int inner = in_child([&] {
      CHILD_CHECK(start_primary_context());
      size_t free = 0, total = 0;
      CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 2 * kGiB);
      return 0;
    });
    CHILD_CHECK(inner == 0);
    size_t free = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free == 2 * kGiB);  // the child's exit took nothing
    return 0;
  });
  CHECK(rc == 0);
}
