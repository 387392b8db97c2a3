// Memory scenarios through the CUDA driver API (a program linked against libcuda directly), run with
// and without the shim. Prints `key=value` lines; exits 0 when every call behaved as expected.
#include <cuda.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "driver_check.h"
#include "mem_scenario_support.h"

namespace {

CUcontext retain_primary(CUdevice device) {
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  return context;
}

int churn(int operations) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::size_t> size_of(1, 1 << 20);
  std::vector<CUdeviceptr> live;
  int allocations = 0;
  for (int i = 0; i < operations; ++i) {
    if (live.empty() || rng() % 10 < 6) {
      CUdeviceptr p = 0;
      CHECK_CU(cuMemAlloc(&p, size_of(rng)));
      ++allocations;
      live.push_back(p);
    } else {
      const std::size_t victim = rng() % live.size();
      CHECK_CU(cuMemFree(live[victim]));
      live[victim] = live.back();
      live.pop_back();
    }
  }
  for (CUdeviceptr p : live) CHECK_CU(cuMemFree(p));
  std::printf("operations=%d\nallocations=%d\n", operations, allocations);
  return 0;
}

// cuMemGetInfo with a null output: the driver's answer, before and after the first allocation.
int info_null_pointers() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  for (const char* when : {"before", "after"}) {
    std::printf("%s_null_free=%s\n", when, cu_error_name(cuMemGetInfo(nullptr, &total_bytes)));
    std::printf("%s_null_total=%s\n", when, cu_error_name(cuMemGetInfo(&free_bytes, nullptr)));
    std::printf("%s_null_both=%s\n", when, cu_error_name(cuMemGetInfo(nullptr, nullptr)));
    CUdeviceptr p = 0;
    if (std::string_view(when) == "before") CHECK_CU(cuMemAlloc(&p, 1 << 20));
  }
  CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
  std::printf("total=%zu\n", total_bytes);
  return 0;
}

int zero_bytes() {
  CUdeviceptr p = 0;
  std::printf("zero=%s\n", cu_error_name(cuMemAlloc(&p, 0)));
  return 0;
}

// Requests the driver refuses, and how: cuMemAllocPitch whose size overflows (too large: out of
// memory) or has no width (invalid), and cuMemRetainAllocationHandle on cuMemAlloc memory (invalid,
// whatever backs it), with the releases of the handle if one was given.
int driver_answers() {
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  std::printf("pitch_huge_width=%s\n", cu_error_name(cuMemAllocPitch(&p, &pitch, SIZE_MAX, 1, 4)));
  std::printf("pitch_huge_rows=%s\n", cu_error_name(cuMemAllocPitch(&p, &pitch, 1 << 20, SIZE_MAX / 1024, 8)));
  std::printf("pitch_no_width=%s\n", cu_error_name(cuMemAllocPitch(&p, &pitch, 0, SIZE_MAX, 4)));
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAlloc(&block, 1 << 20));
  for (const CUdeviceptr at : {block, block + 4096}) {
    CUmemGenericAllocationHandle handle{};
    const CUresult retained = cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(at));
    std::printf("retain%s=%s\n", at == block ? "" : "_inside", cu_error_name(retained));
    if (retained == CUDA_SUCCESS) {
      std::printf("release=%s\n", cu_error_name(cuMemRelease(handle)));
      std::printf("release_again=%s\n", cu_error_name(cuMemRelease(handle)));
    }
  }
  CHECK_CU(cuMemFree(block));
  return 0;
}

// cuIpcGetMemHandle on a block at a region's start and on one inside a region; cuMemGetAddressRange
// on the inner block names its whole region.
int ipc() {
  CUdeviceptr first = 0;
  CUdeviceptr second = 0;
  CHECK_CU(cuMemAlloc(&first, 1 << 20));
  CHECK_CU(cuMemAlloc(&second, 1 << 20));
  CUipcMemHandle handle{};
  std::printf("ipc_first=%s\n", cu_error_name(cuIpcGetMemHandle(&handle, first)));
  std::printf("ipc_second=%s\n", cu_error_name(cuIpcGetMemHandle(&handle, second)));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  CHECK_CU(cuMemGetAddressRange(&base, &size, second));
  std::printf("range_base_is_second=%d\nrange_size=%zu\n", base == second ? 1 : 0, size);
  CHECK_CU(cuMemFree(first));
  CHECK_CU(cuMemFree(second));
  return 0;
}

// Allocate and free the same size `rounds` times; with `program_syncs` the program synchronises the
// context after every free (so the shim never needs to): 1 with cuCtxSynchronize, 2 with
// cuCtxSynchronize_v2 naming the current context.
int sync_rounds(int rounds, int program_syncs) {
  for (int i = 0; i < rounds; ++i) {
    CUdeviceptr p = 0;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CHECK_CU(cuMemFree(p));
    if (program_syncs == 1) CHECK_CU(cuCtxSynchronize());
    if (program_syncs == 2) {
      CUcontext current = nullptr;
      CHECK_CU(cuCtxGetCurrent(&current));
      CHECK_CU(cuCtxSynchronize_v2(current));
    }
  }
  std::printf("rounds=%d\n", rounds);
  return 0;
}

// Allocates 1 MiB in the current context and checks a word written there reads back.
bool allocate_and_check(std::uint32_t pattern) {
  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc(&p, 1 << 20));
  std::uint32_t back = 0;
  CHECK_CU(cuMemcpyHtoD(p, &pattern, sizeof pattern));
  CHECK_CU(cuMemcpyDtoH(&back, p, sizeof back));
  return back == pattern;  // p is left to the context's end
}

// A created context gets its own arena; destroying it forgets the arena; a new context works.
// The second context may get the first one's handle back: its block must come from a fresh arena.
int context_lifecycle(CUdevice device) {
  CUcontext first = nullptr;
  bool same_handle = false;
  for (int round = 0; round < 2; ++round) {
    CUcontext context = nullptr;
    CHECK_CU(cuCtxCreate(&context, nullptr, 0, device));
    if (round == 0) first = context; else same_handle = context == first;
    if (!allocate_and_check(0xABCD0000u + static_cast<std::uint32_t>(round))) return 1;
    CHECK_CU(cuCtxDestroy(context));  // frees the block with the context
  }
  std::printf("contexts=2\nsame_handle=%d\n", same_handle ? 1 : 0);
  return 0;
}

int primary_reset(CUdevice device) {
  for (int round = 0; round < 2; ++round) {
    retain_primary(device);
    if (!allocate_and_check(0x5EED0000u + static_cast<std::uint32_t>(round))) return 1;
    CHECK_CU(cuDevicePrimaryCtxReset(device));
  }
  std::printf("resets=2\n");
  return 0;
}

// The last release destroys the primary context; the next retain may hand back the same handle,
// whose block must come from a fresh arena.
int primary_release(CUdevice device) {
  for (int round = 0; round < 2; ++round) {
    retain_primary(device);
    if (!allocate_and_check(0x0DD50000u + static_cast<std::uint32_t>(round))) return 1;
    CHECK_CU(cuCtxSetCurrent(nullptr));
    CHECK_CU(cuDevicePrimaryCtxRelease(device));
  }
  std::printf("releases=2\n");
  return 0;
}

void sleep_200ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// A block is freed while a copy queued behind a 200 ms host function on a non-blocking stream will
// still write it; the same size is then allocated and filled synchronously. Intact only if the freed
// block was not handed out again before the copy ended. With `from_other_context` the free is made
// while another context is current: it must wait for the block's own context, not the current one.
int deferred_free(CUcontext primary, CUdevice device, std::size_t bytes, bool from_other_context) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  mem_scenarios::ReuseBuffers data(bytes);
  CUdeviceptr first = 0;
  CHECK_CU(cuMemAlloc(&first, bytes));
  CHECK_CU(cuLaunchHostFunc(stream, sleep_200ms, nullptr));
  CHECK_CU(cuMemcpyHtoDAsync(first, data.late.data(), bytes, stream));
  CUcontext other = nullptr;
  if (from_other_context) CHECK_CU(cuCtxCreate(&other, nullptr, 0, device));  // now current
  CHECK_CU(cuMemFree(first));
  CHECK_CU(cuCtxSetCurrent(primary));
  CUdeviceptr second = 0;
  CHECK_CU(cuMemAlloc(&second, bytes));
  CHECK_CU(cuMemcpyHtoD(second, data.mine.data(), bytes));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemcpyDtoH(data.back.data(), second, bytes));
  int version = 0;
  CHECK_CU(cuDriverGetVersion(&version));
  std::printf("reused=%d\nintact=%d\ndriver_version=%d\n", second == first ? 1 : 0, data.intact() ? 1 : 0,
              version);
  CHECK_CU(cuMemFree(second));
  if (other != nullptr) CHECK_CU(cuCtxDestroy(other));
  CHECK_CU(cuStreamDestroy(stream));
  return 0;
}

// A context is torn down (cuCtxDestroy of a created one, or cuDevicePrimaryCtxReset of the primary)
// while a copy queued behind a 200 ms host function on a non-blocking stream still reads one of its
// blocks: the driver waits for the context's work before freeing its memory, so the copy reads what
// was written. teardown_copy_ok=1 when it did (a copy of freed memory reads other bytes, or faults).
int teardown_with_work_queued(CUdevice device, bool primary_reset, std::size_t bytes) {
  CUcontext context = nullptr;
  if (primary_reset) {
    context = retain_primary(device);
  } else {
    CHECK_CU(cuCtxCreate(&context, nullptr, 0, device));  // now current
  }
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  mem_scenarios::ReuseBuffers data(bytes);
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAlloc(&block, bytes));
  CHECK_CU(cuMemcpyHtoD(block, data.mine.data(), bytes));
  CHECK_CU(cuLaunchHostFunc(stream, sleep_200ms, nullptr));
  CHECK_CU(cuMemcpyDtoHAsync(data.back.data(), block, bytes, stream));
  if (primary_reset) {
    CHECK_CU(cuDevicePrimaryCtxReset(device));  // its references and the stream go with it
  } else {
    CHECK_CU(cuCtxDestroy(context));
  }
  std::printf("teardown_copy_ok=%d\n", data.intact() ? 1 : 0);
  // The device works afterwards: a new context's block holds what is written to it (an arena kept
  // from the torn-down context would hand out memory the teardown freed). after_teardown_ok=1 then.
  CUcontext next = nullptr;
  if (primary_reset) {
    next = retain_primary(device);
  } else {
    CHECK_CU(cuCtxCreate(&next, nullptr, 0, device));
  }
  CUdeviceptr fresh = 0;
  const std::uint32_t pattern = 0x7EA2D0u;
  std::uint32_t back = 0;
  const bool works = cuMemAlloc(&fresh, bytes) == CUDA_SUCCESS &&
                     cuMemcpyHtoD(fresh, &pattern, sizeof pattern) == CUDA_SUCCESS &&
                     cuMemcpyDtoH(&back, fresh, sizeof back) == CUDA_SUCCESS && back == pattern &&
                     cuMemFree(fresh) == CUDA_SUCCESS;
  std::printf("after_teardown_ok=%d\n", works ? 1 : 0);
  return 0;
}

// Frees the driver refuses (inside a block, twice, a host address) get its answer, and leave the
// memory manager sound.
int bad_frees() {
  CUdeviceptr p = 0;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CUdeviceptr q = 0;
  CHECK_CU(cuMemAlloc(&q, 4096));
  std::printf("interior=%s\n", cu_error_name(cuMemFree(q + 256)));
  CHECK_CU(cuMemFree(p));
  std::printf("double=%s\n", cu_error_name(cuMemFree(p)));
  int host_object = 0;
  std::printf("foreign=%s\n", cu_error_name(cuMemFree(reinterpret_cast<CUdeviceptr>(&host_object))));
  const std::uint32_t pattern = 0x12345678u;
  std::uint32_t back = 0;
  CHECK_CU(cuMemcpyHtoD(q, &pattern, sizeof pattern));
  CHECK_CU(cuMemcpyDtoH(&back, q, sizeof back));
  CHECK_CU(cuMemFree(q));
  CUdeviceptr r = 0;
  CHECK_CU(cuMemAlloc(&r, 8192));
  CHECK_CU(cuMemFree(r));
  std::printf("after_ok=%d\n", back == pattern ? 1 : 0);
  return 0;
}

// One thread keeps creating contexts (each gets a memory manager, and its creation is logged) while
// the main thread keeps forking: a fork must never find the shim's locks held in an order that
// deadlocks its prepare handlers. Each child exits at once.
int fork_while_creating(CUdevice device, int rounds) {
  std::atomic<bool> done{false};
  std::thread creator([&] {
    for (int i = 0; i < rounds; ++i) {
      CUcontext context = nullptr;
      CHECK_CU(cuCtxCreate(&context, nullptr, 0, device));
      CUdeviceptr p = 0;
      CHECK_CU(cuMemAlloc(&p, 4096));
      CHECK_CU(cuMemFree(p));
      CHECK_CU(cuCtxDestroy(context));
    }
    done = true;
  });
  int forks = 0;
  while (!done) {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 1;
    ++forks;
  }
  creator.join();
  std::printf("forked=%d\n", forks > 0 ? 1 : 0);
  return 0;
}

// The device's default pool is served like cuMemAllocAsync; a pool the program made is its own.
int pools(CUdevice device) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUmemoryPool default_pool = nullptr;
  CHECK_CU(cuDeviceGetDefaultMemPool(&default_pool, device));
  CUdeviceptr from_default = 0;
  CHECK_CU(cuMemAllocFromPoolAsync(&from_default, 1 << 20, default_pool, stream));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  CUmemoryPool own_pool = nullptr;
  CHECK_CU(cuMemPoolCreate(&own_pool, &props));
  CUdeviceptr from_own = 0;
  CHECK_CU(cuMemAllocFromPoolAsync(&from_own, 1 << 20, own_pool, stream));
  const std::uint32_t pattern = 0x600D600Du;
  std::uint32_t back = 0;
  CHECK_CU(cuMemcpyHtoDAsync(from_own, &pattern, sizeof pattern, stream));
  CHECK_CU(cuMemcpyDtoHAsync(&back, from_own, sizeof back, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemFreeAsync(from_default, stream));
  CHECK_CU(cuMemFreeAsync(from_own, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemPoolDestroy(own_pool));
  CHECK_CU(cuStreamDestroy(stream));
  std::printf("own_pool_data_ok=%d\n", back == pattern ? 1 : 0);
  return 0;
}

// Stream-ordered allocation (cuMemAllocAsync and cuMemAllocFromPoolAsync from the default pool)
// while a non-default stream is captured: graph memory nodes the driver must see. Prints what the
// program saw; the same with and without the shim.
int graph_capture(CUdevice device, std::size_t bytes) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUmemoryPool default_pool = nullptr;
  CHECK_CU(cuDeviceGetDefaultMemPool(&default_pool, device));
  CUdeviceptr ordinary = 0;  // the memory manager is set up and holds something
  CHECK_CU(cuMemAllocAsync(&ordinary, bytes, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CHECK_CU(cuStreamIsCapturing(stream, &status));
  std::printf("capturing=%d\n", status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? 1 : 0);
  CUdeviceptr freed_in_graph = 0, kept_by_graph = 0;
  CHECK_CU(cuMemAllocAsync(&freed_in_graph, bytes, stream));
  CHECK_CU(cuMemAllocFromPoolAsync(&kept_by_graph, bytes, default_pool, stream));
  CHECK_CU(cuMemsetD8Async(freed_in_graph, 0x5A, bytes, stream));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  CHECK_CU(cuMemGetAddressRange(&base, &size, kept_by_graph));
  std::printf("graph_range_ok=%d\n", base == kept_by_graph && size == bytes ? 1 : 0);
  std::printf("free_in_capture=%s\n", cu_error_name(cuMemFreeAsync(freed_in_graph, stream)));
  CUgraph graph = nullptr;
  std::printf("end_capture=%s\n", cu_error_name(cuStreamEndCapture(stream, &graph)));
  std::printf("graph=%d\n", graph != nullptr ? 1 : 0);
  if (graph != nullptr) CHECK_CU(cuGraphDestroy(graph));
  std::printf("graph_memory_released=%d\n",
              cuMemGetAddressRange(&base, &size, kept_by_graph) == CUDA_ERROR_NOT_FOUND ? 1 : 0);
  // Ordinary stream-ordered allocation goes on as before.
  CUdeviceptr after = 0;
  CHECK_CU(cuMemAllocAsync(&after, bytes, stream));
  const std::uint32_t pattern = 0xCAFEF00Du;
  std::uint32_t back = 0;
  CHECK_CU(cuMemcpyHtoDAsync(after, &pattern, sizeof pattern, stream));
  CHECK_CU(cuMemcpyDtoHAsync(&back, after, sizeof back, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemFreeAsync(after, stream));
  CHECK_CU(cuMemFreeAsync(ordinary, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  std::printf("after_data_ok=%d\n", back == pattern ? 1 : 0);
  CHECK_CU(cuStreamDestroy(stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const mem_scenarios::Arguments args{argc, argv};
  const std::string scenario = args.scenario();
  CHECK_CU(cuInit(0));
  CUdevice device = 0;
  CHECK_CU(cuDeviceGet(&device, 0));
  if (scenario == "context_lifecycle") return context_lifecycle(device);
  if (scenario == "primary_reset") return primary_reset(device);
  if (scenario == "primary_release") return primary_release(device);
  if (scenario == "fork_while_creating") return fork_while_creating(device, static_cast<int>(args.number(2, 200)));
  if (scenario == "destroy_with_work_queued" || scenario == "reset_with_work_queued") {
    return teardown_with_work_queued(device, scenario == "reset_with_work_queued",
                                     static_cast<std::size_t>(args.number(2, 1 << 20)));
  }
  const CUcontext primary = retain_primary(device);
  int rc = 2;
  if (scenario == "churn") {
    rc = churn(static_cast<int>(args.number(2, 10000)));
  } else if (scenario == "info_null") {
    rc = info_null_pointers();
  } else if (scenario == "zero") {
    rc = zero_bytes();
  } else if (scenario == "ipc") {
    rc = ipc();
  } else if (scenario == "driver_answers") {
    rc = driver_answers();
  } else if (scenario == "sync_rounds") {
    rc = sync_rounds(static_cast<int>(args.number(2, 50)), static_cast<int>(args.number(3, 0)));
  } else if (scenario == "deferred_free" || scenario == "foreign_context_free") {
    rc = deferred_free(primary, device, static_cast<std::size_t>(args.number(2, 1 << 20)),
                       scenario == "foreign_context_free");
  } else if (scenario == "bad_frees") {
    rc = bad_frees();
  } else if (scenario == "graph_capture") {
    rc = graph_capture(device, static_cast<std::size_t>(args.number(2, 1 << 20)));
  } else if (scenario == "pools") {
    rc = pools(device);
  } else {
    std::fprintf(stderr, "usage: %s SCENARIO [ARGS]\n", argv[0]);
  }
  (void)primary;
  CHECK_CU(cuDevicePrimaryCtxRelease(device));
  return rc;
}
