// fork() while other threads use every allocation path (test_lifecycle.py, ForkDuringAllocations):
// THREADS threads each run rounds of cuMemAlloc/Free, cuMemAllocPitch, cuMemAllocAsync/FreeAsync,
// their own pool (cuMemAllocFromPoolAsync), VMM (cuMemCreate, Map, SetAccess, RetainAllocationHandle,
// Unmap, Release), managed memory, arrays (2D, 3D, mipmapped), IPC export and cuMemGetInfo, while the
// main thread forks FORKS times. Each child, on its own fresh driver, runs one round of every path
// itself and exits; one that has not exited after TIMEOUT_S seconds is killed and counted as hung.
// Prints key=value lines; exits 0 when every child finished and allocated, 3 on a failed call in the
// parent.
//
//   fork_during_paths THREADS FORKS [TIMEOUT_S]
#include <cuda.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "driver_check.h"

namespace {

constexpr std::size_t kBlock = 1 << 20;

// Where a failed call is reported: the parent exits (CHECK_CU), a child leaves with status 4 without
// running the parent's exit handlers.
bool g_in_child = false;

#define CHECK_PATH(call)                                                                               \
  do {                                                                                                 \
    const CUresult path_status = (call);                                                               \
    if (path_status != CUDA_SUCCESS) {                                                                 \
      std::fprintf(stderr, "%s: %s -> %s\n", g_in_child ? "child" : "parent", #call,                  \
                   cu_error_name(path_status));                                                        \
      if (g_in_child) _exit(4);                                                                        \
      std::exit(3);                                                                                    \
    }                                                                                                  \
  } while (0)

void make_current(CUdevice device) {
  CUcontext context = nullptr;
  CHECK_PATH(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_PATH(cuCtxSetCurrent(context));
}

void vmm_round(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  std::size_t granularity = 0;
  CHECK_PATH(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle handle{};
  CHECK_PATH(cuMemCreate(&handle, granularity, &prop, 0));
  CUdeviceptr ptr = 0;
  CHECK_PATH(cuMemAddressReserve(&ptr, granularity, 0, 0, 0));
  CHECK_PATH(cuMemMap(ptr, granularity, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_PATH(cuMemSetAccess(ptr, granularity, &access, 1));
  CUmemGenericAllocationHandle retained{};
  CHECK_PATH(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(ptr)));
  CHECK_PATH(cuMemRelease(retained));
  CHECK_PATH(cuMemUnmap(ptr, granularity));
  CHECK_PATH(cuMemRelease(handle));
  CHECK_PATH(cuMemAddressFree(ptr, granularity));
}

void array_round() {
  const CUDA_ARRAY_DESCRIPTOR flat{.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
  CUarray array = nullptr;
  CHECK_PATH(cuArrayCreate(&array, &flat));
  CHECK_PATH(cuArrayDestroy(array));
  CUDA_ARRAY3D_DESCRIPTOR cube{.Width = 32, .Height = 32, .Depth = 4, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1,
                               .Flags = 0};
  CHECK_PATH(cuArray3DCreate(&array, &cube));
  CHECK_PATH(cuArrayDestroy(array));
  cube.Depth = 0;
  CUmipmappedArray mipmapped = nullptr;
  CHECK_PATH(cuMipmappedArrayCreate(&mipmapped, &cube, 3));
  CHECK_PATH(cuMipmappedArrayDestroy(mipmapped));
}

// One use of every path, on the current context.
void one_round(CUdevice device, CUstream stream, CUmemoryPool pool) {
  CUdeviceptr block = 0;
  CHECK_PATH(cuMemAlloc(&block, kBlock));
  CUipcMemHandle exported{};
  cuIpcGetMemHandle(&exported, block);  // exported or refused, as the mode has it: only the lock matters
  CHECK_PATH(cuMemFree(block));
  std::size_t pitch = 0;
  CHECK_PATH(cuMemAllocPitch(&block, &pitch, 1000, 64, 4));
  CHECK_PATH(cuMemFree(block));
  CHECK_PATH(cuMemAllocAsync(&block, kBlock, stream));
  CHECK_PATH(cuMemFreeAsync(block, stream));
  CHECK_PATH(cuMemAllocFromPoolAsync(&block, kBlock, pool, stream));
  CHECK_PATH(cuMemFreeAsync(block, stream));
  CHECK_PATH(cuStreamSynchronize(stream));
  vmm_round(device);
  CHECK_PATH(cuMemAllocManaged(&block, kBlock, CU_MEM_ATTACH_GLOBAL));
  CHECK_PATH(cuMemFree(block));
  array_round();
  std::size_t free = 0, total = 0;
  CHECK_PATH(cuMemGetInfo(&free, &total));
  CHECK_PATH(cuCtxSynchronize());
}

struct Resources {
  CUstream stream = nullptr;
  CUmemoryPool pool = nullptr;
};

Resources make_resources(CUdevice device) {
  Resources made;
  CHECK_PATH(cuStreamCreate(&made.stream, CU_STREAM_NON_BLOCKING));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  CHECK_PATH(cuMemPoolCreate(&made.pool, &props));
  return made;
}

void release_resources(const Resources& resources) {
  CHECK_PATH(cuStreamDestroy(resources.stream));
  CHECK_PATH(cuMemPoolDestroy(resources.pool));
}

// The child: its driver starts afresh (no context); one round of every path, then out without the
// parent's exit handlers.
[[noreturn]] void child_main() {
  g_in_child = true;
  CHECK_PATH(cuInit(0));
  CUdevice device = 0;
  CHECK_PATH(cuDeviceGet(&device, 0));
  make_current(device);
  const Resources resources = make_resources(device);
  one_round(device, resources.stream, resources.pool);
  release_resources(resources);
  _exit(0);
}

enum class ChildEnd { finished, failed, hung };

ChildEnd wait_for(pid_t child, double timeout_s) {
  const timespec pause{0, 2'000'000};
  for (double waited = 0; waited < timeout_s; waited += 0.002) {
    int status = 0;
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ChildEnd::finished : ChildEnd::failed;
    if (done < 0) return ChildEnd::failed;
    nanosleep(&pause, nullptr);
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  return ChildEnd::hung;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s THREADS FORKS [TIMEOUT_S]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int forks = std::atoi(argv[2]);
  const double timeout_s = argc > 3 ? std::atof(argv[3]) : 20.0;
  CHECK_PATH(cuInit(0));
  CUdevice device = 0;
  CHECK_PATH(cuDeviceGet(&device, 0));
  make_current(device);

  std::atomic<bool> stop{false};
  std::atomic<long> rounds{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      make_current(device);
      const Resources resources = make_resources(device);
      while (!stop.load(std::memory_order_relaxed)) {
        one_round(device, resources.stream, resources.pool);
        rounds.fetch_add(1, std::memory_order_relaxed);
      }
      release_resources(resources);
    });
  }
  while (rounds.load() < threads) std::this_thread::yield();  // every thread is under way

  int finished = 0, failed = 0, hung = 0;
  for (int i = 0; i < forks; ++i) {
    const pid_t child = fork();
    if (child == 0) child_main();
    if (child < 0) {
      ++failed;
      continue;
    }
    switch (wait_for(child, timeout_s)) {
      case ChildEnd::finished:
        ++finished;
        break;
      case ChildEnd::failed:
        ++failed;
        break;
      case ChildEnd::hung:
        ++hung;
        break;
    }
  }
  stop = true;
  for (std::thread& worker : workers) worker.join();
  std::printf("forks=%d\nfinished=%d\nfailed=%d\nhung=%d\n", forks, finished, failed, hung);
  return finished == forks ? 0 : 1;
}
