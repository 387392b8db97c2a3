// Stream capture and graphs: captured work is recorded, not run; the rules on potentially unsafe
// calls (cuThreadExchangeStreamCaptureMode in cuda.h); graph memory nodes. Every test ends the
// captures it begins, since an ongoing global capture restricts the whole process.
#include "driver_support.h"
#include "report_support.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace driver_test;

// The per-thread forms, which cuda.h declares only with CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" CUresult cuStreamBeginCapture_v2_ptsz(CUstream, CUstreamCaptureMode);
extern "C" CUresult cuStreamEndCapture_ptsz(CUstream, CUgraph*);
extern "C" CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void*, size_t);

namespace {

CUstream new_stream(unsigned flags = CU_STREAM_NON_BLOCKING) {
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, flags) == CUDA_SUCCESS);
  return stream;
}

CUstreamCaptureStatus status_of(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  REQUIRE(cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS);
  return status;
}

void count_call(void* counter) { ++*static_cast<int*>(counter); }

}  // namespace

TEST_CASE("a capturing stream records its work instead of running it", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0x11, 4096) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_NONE);

  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_ILLEGAL_STATE);
  int calls = 0;
  std::vector<unsigned char> host(4096, 0x22);
  CHECK(cuMemsetD8Async(dev, 0x33, 4096, stream) == CUDA_SUCCESS);
  CHECK(cuMemcpyHtoDAsync(dev, host.data(), 4096, stream) == CUDA_SUCCESS);
  CHECK(cuLaunchHostFunc(stream, count_call, &calls) == CUDA_SUCCESS);
  cuuint64_t id = 0;
  CUgraph during = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t count = 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CHECK(cuStreamGetCaptureInfo(stream, &status, &id, &during, &deps, nullptr, &count) == CUDA_SUCCESS);
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(id != 0);
  CHECK(during != nullptr);
  CHECK(count == 1);  // the host node captured last
  CHECK(deps != nullptr);
  // The graph is not the caller's until the capture ends.
  CHECK(cuGraphDestroy(during) == CUDA_ERROR_INVALID_VALUE);

  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, nullptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CHECK(graph == during);
  CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_ILLEGAL_STATE);
  // Nothing captured ran: the memory still holds what the legacy stream wrote before.
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  std::vector<unsigned char> back(4096, 0);
  REQUIRE(cuMemcpyDtoH(back.data(), dev, 4096) == CUDA_SUCCESS);
  CHECK(back == std::vector<unsigned char>(4096, 0x11));
  CHECK(calls == 0);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_ERROR_INVALID_VALUE);
  // After the capture the stream runs its work again.
  CHECK(cuLaunchHostFunc(stream, count_call, &calls) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(calls == 1);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("capture is refused on the legacy stream and checked", "[driver][graphs]") {
  primary_context();
  CHECK(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED) ==
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstream stream = new_stream();
  CHECK(cuStreamBeginCapture(stream, static_cast<CUstreamCaptureMode>(7)) == CUDA_ERROR_INVALID_VALUE);
  CUstream bogus = reinterpret_cast<CUstream>(0x1234);
  CHECK(cuStreamBeginCapture(bogus, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_INVALID_HANDLE);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(bogus, &graph) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuGraphDestroy(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CHECK(cuStreamGetCaptureInfo(stream, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) ==
        CUDA_ERROR_INVALID_VALUE);
  const CUgraphEdgeData* edges = nullptr;
  CHECK(cuStreamGetCaptureInfo(stream, &status, nullptr, nullptr, nullptr, &edges, nullptr) ==
        CUDA_ERROR_INVALID_VALUE);
  // The per-thread default stream can be captured (NULL in the _ptsz forms).
  REQUIRE(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
  CHECK(status_of(CU_STREAM_PER_THREAD) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  REQUIRE(cuStreamEndCapture(CU_STREAM_PER_THREAD, &graph) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("potentially unsafe calls fail and invalidate a global or thread-local capture", "[driver][graphs]") {
  primary_context();
  CUdeviceptr existing = 0;
  REQUIRE(cuMemAlloc(&existing, 4096) == CUDA_SUCCESS);
  for (CUstreamCaptureMode mode : {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    for (int call = 0; call < 4; ++call) {
      INFO("mode " << mode << ", call " << call);
      CUstream stream = new_stream();
      REQUIRE(cuStreamBeginCapture(stream, mode) == CUDA_SUCCESS);
      CUdeviceptr p = 0;
      size_t pitch = 0;
      switch (call) {
        case 0: CHECK(cuMemAlloc(&p, 4096) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 1: CHECK(cuMemFree(existing) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 2: CHECK(cuCtxSynchronize() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 3: CHECK(cuMemAllocPitch(&p, &pitch, 512, 4, 4) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
      }
      CHECK(p == 0);
      CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
      // Work on an invalidated capture is refused until the capture ends.
      CHECK(cuMemsetD8Async(existing, 0, 16, stream) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
      CUgraph graph = reinterpret_cast<CUgraph>(0x1);
      CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
      CHECK(graph == nullptr);
      CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_NONE);
      CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
    }
  }
  CHECK(cuMemFree(existing) == CUDA_SUCCESS);  // allowed again once no capture is ongoing
}

TEST_CASE("a relaxed capture allows potentially unsafe calls", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, 4096) == CUDA_SUCCESS);
  CHECK(cuMemFree(p) == CUDA_SUCCESS);
  CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // A relaxed capture may be ended from another thread.
  CUgraph graph = nullptr;
  CUresult ended = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    primary_context();
    ended = cuStreamEndCapture(stream, &graph);
  }).join();
  CHECK(ended == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("other threads are restricted by global captures only, per their own mode", "[driver][graphs]") {
  primary_context();
  for (CUstreamCaptureMode mode : {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    INFO("capture mode " << mode);
    CUstream stream = new_stream();
    REQUIRE(cuStreamBeginCapture(stream, mode) == CUDA_SUCCESS);
    CUresult by_global_thread = CUDA_ERROR_UNKNOWN, by_relaxed_thread = CUDA_ERROR_UNKNOWN;
    std::thread([&] {
      primary_context();
      CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
      REQUIRE(cuThreadExchangeStreamCaptureMode(&relaxed) == CUDA_SUCCESS);
      CHECK(relaxed == CU_STREAM_CAPTURE_MODE_GLOBAL);  // every thread starts in global mode
      CUdeviceptr p = 0;
      by_relaxed_thread = cuMemAlloc(&p, 4096);
      if (p != 0) cuMemFree(p);
      REQUIRE(cuThreadExchangeStreamCaptureMode(&relaxed) == CUDA_SUCCESS);  // back to global
      CHECK(relaxed == CU_STREAM_CAPTURE_MODE_RELAXED);
      p = 0;
      by_global_thread = cuMemAlloc(&p, 4096);
      if (p != 0) cuMemFree(p);
    }).join();
    CHECK(by_relaxed_thread == CUDA_SUCCESS);
    const bool global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    CHECK(by_global_thread == (global ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS));
    CHECK(status_of(stream) == (global ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE));
    CUgraph graph = nullptr;
    CHECK(cuStreamEndCapture(stream, &graph) == (global ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS));
    if (graph != nullptr) CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
    CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  }
  CUstreamCaptureMode bad = static_cast<CUstreamCaptureMode>(9);
  CHECK(cuThreadExchangeStreamCaptureMode(&bad) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuThreadExchangeStreamCaptureMode(nullptr) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("a non-relaxed capture must end on the thread that began it", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
  CUresult elsewhere = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    primary_context();
    CUgraph graph = nullptr;
    elsewhere = cuStreamEndCapture(stream, &graph);
  }).join();
  CHECK(elsewhere == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("synchronising or querying what is being captured fails in every mode", "[driver][graphs]") {
  primary_context();
  for (CUstreamCaptureMode mode : {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED}) {
    for (int call = 0; call < 5; ++call) {
      INFO("mode " << mode << ", call " << call);
      CUstream stream = new_stream();
      CUevent event = nullptr;
      REQUIRE(cuEventCreate(&event, 0) == CUDA_SUCCESS);
      REQUIRE(cuStreamBeginCapture(stream, mode) == CUDA_SUCCESS);
      REQUIRE(cuEventRecord(event, stream) == CUDA_SUCCESS);
      switch (call) {
        case 0: CHECK(cuStreamSynchronize(stream) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 1: CHECK(cuStreamQuery(stream) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 2: CHECK(cuEventSynchronize(event) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 3: CHECK(cuEventQuery(event) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
        case 4: CHECK(cuCtxSynchronize() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); break;
      }
      CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
      CUgraph graph = nullptr;
      CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
      CHECK(graph == nullptr);
      // Once the capture ended the event is an ordinary one again (never recorded on a stream).
      CHECK(cuEventQuery(event) == CUDA_SUCCESS);
      CHECK(cuEventDestroy(event) == CUDA_SUCCESS);
      CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
    }
  }
}

TEST_CASE("other streams keep working during a capture; the legacy stream conflicts with blocking ones",
          "[driver][graphs]") {
  primary_context();
  CUstream capturing = new_stream(CU_STREAM_NON_BLOCKING);
  CUstream other = new_stream(CU_STREAM_NON_BLOCKING);
  REQUIRE(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  int calls = 0;
  CHECK(cuLaunchHostFunc(other, count_call, &calls) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(other) == CUDA_SUCCESS);
  CHECK(calls == 1);
  // A non-blocking capture does not involve the legacy stream.
  CHECK(cuLaunchHostFunc(nullptr, count_call, &calls) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(calls == 2);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(capturing, &graph) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);

  // A blocking stream under capture: the legacy stream would depend on it.
  CUstream blocking = new_stream(CU_STREAM_DEFAULT);
  REQUIRE(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CHECK(cuStreamIsCapturing(nullptr, &status) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(status_of(blocking) == CU_STREAM_CAPTURE_STATUS_ACTIVE);  // a query does not invalidate
  // Using the legacy stream does.
  CHECK(cuLaunchHostFunc(nullptr, count_call, &calls) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(cuStreamEndCapture(blocking, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(calls == 2);
  CHECK(cuStreamDestroy(blocking) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(capturing) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(other) == CUDA_SUCCESS);
}

TEST_CASE("event waits inside a capture", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  CUstream other = new_stream();
  CUevent outside = nullptr, inside = nullptr;
  REQUIRE(cuEventCreate(&outside, 0) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&inside, 0) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(outside, other) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(other) == CUDA_SUCCESS);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(inside, stream) == CUDA_SUCCESS);
  CHECK(cuStreamWaitEvent(stream, inside, 0) == CUDA_SUCCESS);                       // within the capture
  CHECK(cuStreamWaitEvent(stream, outside, CU_EVENT_WAIT_EXTERNAL) == CUDA_SUCCESS);  // an external wait
  CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // Another stream waiting for an event of the capture joins it.
  CHECK(cuStreamWaitEvent(other, inside, 0) == CUDA_SUCCESS);
  CHECK(status_of(other) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // A plain wait on work outside the capture would cross its boundary.
  CHECK(cuStreamWaitEvent(stream, outside, 0) == CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  CHECK(status_of(stream) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(status_of(other) == CU_STREAM_CAPTURE_STATUS_NONE);  // the capture ended for every stream in it
  CHECK(cuEventDestroy(outside) == CUDA_SUCCESS);
  CHECK(cuEventDestroy(inside) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(other) == CUDA_SUCCESS);
}

TEST_CASE("a synchronous copy on a capturing per-thread stream fails", "[driver][graphs]") {
  primary_context();
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 64) == CUDA_SUCCESS);
  REQUIRE(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  unsigned char host[64] = {};
  CHECK(cuMemcpyHtoD_v2_ptds(dev, host, sizeof host) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture_ptsz(nullptr, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("stream-ordered allocation under capture makes graph memory, not pool memory", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  CUmemoryPool pool = nullptr;
  REQUIRE(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  cuuint64_t used_before = 0;
  REQUIRE(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used_before) == CUDA_SUCCESS);
  CUdeviceptr before = 0;  // pool memory allocated before the capture, freed inside it
  REQUIRE(cuMemAllocAsync(&before, 4096, stream) == CUDA_SUCCESS);
  size_t free_before = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);

  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  REQUIRE(cuMemAllocAsync(&a, 3 * kMiB, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocFromPoolAsync(&b, 1000, pool, stream) == CUDA_SUCCESS);
  CHECK(a != 0);
  CHECK(b != 0);
  CHECK(a % kMiB == 0);  // 2 MiB aligned like any large allocation
  CHECK(b % 512 == 0);
  // Real addresses: the driver knows them, and captured work may use them.
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, b + 10) == CUDA_SUCCESS);
  CHECK(base == b);
  CHECK(size == 1000);
  CHECK(cuMemsetD8Async(a, 0, 3 * kMiB, stream) == CUDA_SUCCESS);
  // Not the pool's: its used memory is unchanged, and so is the device's free memory.
  cuuint64_t used = 0;
  REQUIRE(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS);
  CHECK(used == used_before + 4096);  // only `before`'s block
  size_t free_now = 0;
  REQUIRE(cuMemGetInfo(&free_now, &total) == CUDA_SUCCESS);
  CHECK(free_now == free_before);
  // Freed in the graph: the program no longer finds it (the graph keeps the memory for its
  // launches). A free node takes graph allocations only, so pool memory allocated before the
  // capture cannot be freed there.
  CHECK(cuMemFreeAsync(b, stream) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(b, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFreeAsync(before, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAddressRange(&base, &size, b) == CUDA_ERROR_NOT_FOUND);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  // The graph owns `a` until it is destroyed; the program cannot free it.
  CHECK(cuMemGetAddressRange(&base, &size, a) == CUDA_SUCCESS);
  CHECK(cuMemFree(a) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFreeAsync(a, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuMemGetAddressRange(&base, &size, a) == CUDA_ERROR_NOT_FOUND);
  // `before` is still the program's.
  CHECK(cuMemGetAddressRange(&base, &size, before) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(before, stream) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS);
  CHECK(used == used_before);
  // cuMemAlloc memory cannot be freed by a graph.
  CUdeviceptr sync_memory = 0;
  REQUIRE(cuMemAlloc(&sync_memory, 4096) == CUDA_SUCCESS);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(sync_memory, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocAsync(&a, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuMemFree(sync_memory) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("an invalidated capture discards its graph memory; destroying the stream ends its capture",
          "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  REQUIRE(cuMemAllocAsync(&a, 4096, stream) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cuMemAllocAsync(&b, 4096, stream) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUdeviceptr base = 0;
  CHECK(cuMemGetAddressRange(&base, nullptr, a) == CUDA_ERROR_NOT_FOUND);

  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocAsync(&a, 4096, stream) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemGetAddressRange(&base, nullptr, a) == CUDA_ERROR_NOT_FOUND);
  // No capture is left behind: unsafe calls work again.
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, 4096) == CUDA_SUCCESS);
  CHECK(cuMemFree(p) == CUDA_SUCCESS);
}

namespace {
// Instantiates the graph, launches it once on `stream`, waits for it and destroys the instantiation.
void launch_once(CUgraph graph, CUstream stream) {
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
}

CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(int device, size_t bytes) {
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
  params.bytesize = bytes;
  return params;
}
}  // namespace

TEST_CASE("the report counts graph memory apart from the pool", "[driver][graphs][report]") {
  const std::string path = "/tmp/cudasim-report-graphs-" + std::to_string(getpid()) + ".json";
  int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CHILD_CHECK(start_primary_context());
    CUstream stream = nullptr;
    CHILD_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0;
    CHILD_CHECK(cuMemAllocAsync(&a, 3 * kMiB, stream) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAllocAsync(&b, 4096, stream) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFreeAsync(b, stream) == CUDA_SUCCESS);
    CUgraph graph = nullptr;
    CHILD_CHECK(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
    CHILD_CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
    // Memory nodes built by hand, on the device their parameters name.
    CHILD_CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
    CUDA_MEM_ALLOC_NODE_PARAMS params = alloc_params(1, 3 * kMiB);
    CUgraphNode alloc = nullptr, release = nullptr;
    CHILD_CHECK(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params) == CUDA_SUCCESS);
    CHILD_CHECK(cuGraphAddMemFreeNode(&release, graph, &alloc, 1, params.dptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
    std::exit(0);
  });
  REQUIRE(rc == 0);
  const nlohmann::json report = take_report(path);
  const nlohmann::json& dev = report["devices"][0];
  CHECK(dev["graph"]["allocs"] == 2);
  CHECK(dev["graph"]["frees"] == 1);
  CHECK(dev["graph"]["bytes"] == 0);  // all released with the graph (the freed one too)
  CHECK(dev["graph"]["peak_bytes"] == 4 * kMiB + 4096);  // mappings: 4 MiB (2 MiB units) + a page
  CHECK(dev["pool"]["async_allocs"] == 0);
  CHECK(dev["pool"]["peak_bytes_reserved"] == 0);
  CHECK(dev["driver_allocs"] == 0);
  CHECK(dev["bytes_reserved"] == 0);
  const nlohmann::json& second = report["devices"][1];
  CHECK(second["graph"]["allocs"] == 1);
  CHECK(second["graph"]["frees"] == 1);
  CHECK(second["graph"]["bytes"] == 0);
  CHECK(second["graph"]["peak_bytes"] == 4 * kMiB);
}

TEST_CASE("a multi-stream capture: streams fork from and join back into the capturing stream", "[driver][graphs]") {
  primary_context();
  CUstream origin = new_stream(), side = new_stream(), third = new_stream();
  CUevent fork = nullptr, join = nullptr;
  REQUIRE(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0x11, 4096) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  int calls = 0;

  REQUIRE(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(dev, 0x22, 1024, origin) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(fork, origin) == CUDA_SUCCESS);
  CHECK(cuStreamWaitEvent(side, fork, 0) == CUDA_SUCCESS);  // side joins the capture
  cuuint64_t origin_id = 0, side_id = 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUgraphNode* deps = nullptr;
  size_t count = 0;
  CHECK(cuStreamGetCaptureInfo(origin, &status, &origin_id, nullptr, nullptr, nullptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuStreamGetCaptureInfo(side, &status, &side_id, nullptr, &deps, nullptr, &count) == CUDA_SUCCESS);
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(side_id == origin_id);
  CHECK(count == 1);  // it follows the set the fork was recorded after
  const CUgraphNode forked_after = deps[0];
  CHECK(cuMemsetD8Async(dev + 1024, 0x33, 1024, side) == CUDA_SUCCESS);  // captured, not run
  CHECK(cuLaunchHostFunc(side, count_call, &calls) == CUDA_SUCCESS);
  CHECK(cuMemsetD8Async(dev + 2048, 0x44, 1024, origin) == CUDA_SUCCESS);  // in parallel on the origin
  // Only the origin ends the capture, and only once the side is joined back.
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(side, &graph) == CUDA_ERROR_ILLEGAL_STATE);
  REQUIRE(cuEventRecord(join, side) == CUDA_SUCCESS);
  CHECK(cuStreamWaitEvent(origin, join, 0) == CUDA_SUCCESS);
  CHECK(cuStreamGetCaptureInfo(origin, &status, nullptr, nullptr, &deps, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);  // its own memset and the side's host node
  CHECK(deps[0] != forked_after);
  // A third stream in another capture cannot merge into this one.
  REQUIRE(cuStreamBeginCapture(third, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(cuStreamWaitEvent(third, fork, 0) == CUDA_ERROR_STREAM_CAPTURE_MERGE);
  REQUIRE(cuStreamEndCapture(third, &graph) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(cuStreamEndCapture(origin, &graph) == CUDA_SUCCESS);
  CHECK(graph != nullptr);
  CHECK(status_of(side) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(status_of(origin) == CU_STREAM_CAPTURE_STATUS_NONE);
  // Nothing captured ran; the streams work normally again.
  std::vector<unsigned char> host(4096);
  REQUIRE(cuMemcpyDtoH(host.data(), dev, 4096) == CUDA_SUCCESS);
  CHECK(host[0] == 0x11);
  CHECK(host[1500] == 0x11);
  CHECK(host[3000] == 0x11);
  CHECK(calls == 0);
  CHECK(cuLaunchHostFunc(side, count_call, &calls) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(side) == CUDA_SUCCESS);
  CHECK(calls == 1);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);

  // A fork never joined back: CUDA_ERROR_STREAM_CAPTURE_UNJOINED, no graph, and every stream leaves.
  REQUIRE(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(fork, origin) == CUDA_SUCCESS);
  REQUIRE(cuStreamWaitEvent(side, fork, 0) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(dev, 0x55, 16, side) == CUDA_SUCCESS);
  CHECK(cuStreamEndCapture(origin, &graph) == CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  CHECK(graph == nullptr);
  CHECK(status_of(side) == CU_STREAM_CAPTURE_STATUS_NONE);
  // A fork that captured nothing needs no join.
  REQUIRE(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(dev, 0x66, 16, origin) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(fork, origin) == CUDA_SUCCESS);
  REQUIRE(cuStreamWaitEvent(side, fork, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamEndCapture(origin, &graph) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  // The legacy stream cannot join: it synchronises with every blocking stream.
  REQUIRE(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(fork, origin) == CUDA_SUCCESS);
  CHECK(cuStreamWaitEvent(nullptr, fork, 0) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(cuStreamEndCapture(origin, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // Destroying a stream that joined invalidates the capture it was part of.
  CUstream doomed = new_stream();
  REQUIRE(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(fork, origin) == CUDA_SUCCESS);
  REQUIRE(cuStreamWaitEvent(doomed, fork, 0) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(doomed) == CUDA_SUCCESS);
  CHECK(cuStreamEndCapture(origin, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
  CHECK(cuEventDestroy(fork) == CUDA_SUCCESS);
  CHECK(cuEventDestroy(join) == CUDA_SUCCESS);
  for (CUstream s : {origin, side, third}) CHECK(cuStreamDestroy(s) == CUDA_SUCCESS);
}

namespace {

const char kGraphPtx[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry step()\n{\n\tret;\n}\n";

}  // namespace

TEST_CASE("a captured graph runs its work at every launch of its instantiation, in stream order",
          "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0, 4096) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  std::vector<unsigned char> source(1024, 0x41);
  std::string log;
  Step host{&log, 'h'};
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(dev, 0x11, 4096, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyHtoDAsync(dev, source.data(), 1024, stream) == CUDA_SUCCESS);  // read at each launch
  REQUIRE(cuLaunchHostFunc(stream, Step::run, &host) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  size_t count = 0;
  CHECK(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 3);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  std::vector<unsigned char> back(4096);
  REQUIRE(cuMemcpyDtoH(back.data(), dev, 4096) == CUDA_SUCCESS);
  CHECK(back[0] == 0);  // instantiating runs nothing
  CHECK(log.empty());

  // Launched behind a gate: nothing runs until the stream gets there.
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  source.assign(1024, 0x42);  // before the launch runs: the copy reads this
  Step after{&log, 'a'};
  REQUIRE(cuLaunchHostFunc(stream, Step::run, &after) == CUDA_SUCCESS);
  CHECK(log.empty());
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == "ha");
  REQUIRE(cuMemcpyDtoH(back.data(), dev, 4096) == CUDA_SUCCESS);
  CHECK(back[0] == 0x42);
  CHECK(back[1023] == 0x42);
  CHECK(back[1024] == 0x11);
  // Again, with the host buffer changed.
  source.assign(1024, 0x43);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoH(back.data(), dev, 16) == CUDA_SUCCESS);
  CHECK(back[0] == 0x43);
  CHECK(log == "hah");
  CHECK(cuGraphUpload(exec, stream) == CUDA_SUCCESS);

  // The instantiation is independent of the graph.
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == "hahh");
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphLaunch(exec, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecDestroy(exec) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphInstantiate(&exec, graph, 0) == CUDA_ERROR_INVALID_VALUE);  // destroyed
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("graphs built node by node: dependencies, queries, launches", "[driver][graphs]") {
  primary_context();
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 64 * 1024) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CHECK(cuGraphCreate(&graph, 1) == CUDA_ERROR_INVALID_VALUE);
  // A 2D memset: 16 rows of 100 four-byte elements, 512 bytes apart.
  CUDA_MEMSET_NODE_PARAMS set{};
  set.dst = dev;
  set.pitch = 512;
  set.value = 0x01020304u;
  set.elementSize = 4;
  set.width = 100;
  set.height = 16;
  CUgraphNode memset_node = nullptr, copy_node = nullptr, host_node = nullptr, empty = nullptr, kernel_node = nullptr;
  REQUIRE(cuGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &set, ctx) == CUDA_SUCCESS);
  // Then a copy of 8 bytes from the host over the start of the second row.
  const unsigned char bytes[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  CUDA_MEMCPY3D copy = copy_1d(dev + 512, bytes, sizeof bytes);
  REQUIRE(cuGraphAddMemcpyNode(&copy_node, graph, &memset_node, 1, &copy, ctx) == CUDA_SUCCESS);
  std::string log;
  Step mark{&log, 'm'};
  CUDA_HOST_NODE_PARAMS host{Step::run, &mark};
  REQUIRE(cuGraphAddHostNode(&host_node, graph, &copy_node, 1, &host) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddEmptyNode(&empty, graph, nullptr, 0) == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  REQUIRE(cuLibraryLoadData(&library, kGraphPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  REQUIRE(cuLibraryGetKernel(&kernel, library, "step") == CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS launch{};
  launch.kern = kernel;
  launch.gridDimX = launch.gridDimY = launch.gridDimZ = 1;
  launch.blockDimX = 128;
  launch.blockDimY = launch.blockDimZ = 1;
  const CUgraphNode after_both[] = {host_node, empty};
  REQUIRE(cuGraphAddKernelNode(&kernel_node, graph, after_both, 2, &launch) == CUDA_SUCCESS);

  size_t count = 0;
  CHECK(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 5);
  std::vector<CUgraphNode> roots(4);
  count = roots.size();
  CHECK(cuGraphGetRootNodes(graph, roots.data(), &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CHECK(roots[0] == memset_node);
  CHECK(roots[1] == empty);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(copy_node, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_MEMCPY);
  CHECK(cuGraphNodeGetType(kernel_node, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
  CHECK(cuGraphNodeGetType(host_node, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_HOST);
  CUgraphNode deps[4] = {};
  count = 4;
  CHECK(cuGraphNodeGetDependencies(kernel_node, deps, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CHECK((deps[0] == host_node && deps[1] == empty));

  // Misuse.
  CUgraph other = nullptr;
  REQUIRE(cuGraphCreate(&other, 0) == CUDA_SUCCESS);
  CUgraphNode bad = nullptr;
  CHECK(cuGraphAddEmptyNode(&bad, other, &memset_node, 1) == CUDA_ERROR_INVALID_VALUE);  // another graph's node
  CHECK(cuGraphAddEmptyNode(&bad, graph, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  const CUgraphNode twice[] = {empty, empty};
  CHECK(cuGraphAddEmptyNode(&bad, graph, twice, 2) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMSET_NODE_PARAMS odd = set;
  odd.elementSize = 3;
  CHECK(cuGraphAddMemsetNode(&bad, other, nullptr, 0, &odd, ctx) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMSET_NODE_PARAMS beyond = set;
  beyond.height = 1000;  // past the allocation
  CHECK(cuGraphAddMemsetNode(&bad, other, nullptr, 0, &beyond, ctx) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D to_array = copy;
  to_array.dstMemoryType = CU_MEMORYTYPE_ARRAY;  // and no array named
  CHECK(cuGraphAddMemcpyNode(&bad, other, nullptr, 0, &to_array, ctx) == CUDA_ERROR_INVALID_VALUE);
  CUDA_HOST_NODE_PARAMS no_function{nullptr, nullptr};
  CHECK(cuGraphAddHostNode(&bad, other, nullptr, 0, &no_function) == CUDA_ERROR_INVALID_VALUE);
  CUDA_KERNEL_NODE_PARAMS too_big = launch;
  too_big.blockDimX = 2048;
  CHECK(cuGraphAddKernelNode(&bad, other, nullptr, 0, &too_big) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeGetType(nullptr, &type) == CUDA_ERROR_INVALID_VALUE);
  CUgraphExec exec = nullptr;
  CHECK(cuGraphInstantiate(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphDestroy(other) == CUDA_SUCCESS);

  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  CUstream stream = new_stream();
  params.hUploadStream = stream;
  REQUIRE(cuGraphInstantiateWithParams(&exec, graph, &params) == CUDA_SUCCESS);
  CHECK(params.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == "m");
  std::vector<unsigned char> back(16 * 512);
  REQUIRE(cuMemcpyDtoH(back.data(), dev, back.size()) == CUDA_SUCCESS);
  CHECK(back[0] == 0x04);
  CHECK(back[3] == 0x01);
  CHECK(back[399] == 0x01);
  CHECK(back[400] == 0);  // past the row's 100 elements
  CHECK(back[512] == 9);  // the copy followed the memset
  CHECK(back[519] == 9);
  CHECK(back[520] == 0x04);
  CHECK(back[15 * 512 + 396] == 0x04);
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("graph memory lives while its graph or an instantiation of it does", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  CUdeviceptr inside = 0;
  std::vector<unsigned char> out(256, 0);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocAsync(&inside, 256, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(inside, 0x7e, 256, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoHAsync(out.data(), inside, 256, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, inside) == CUDA_SUCCESS);  // kept for the instantiation
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(out[0] == 0x7e);
  CHECK(out[255] == 0x7e);
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuMemGetAddressRange(&base, &size, inside) == CUDA_ERROR_NOT_FOUND);  // gone with the last holder
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("a graph that allocates and frees its own memory can be launched again and again", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  std::vector<unsigned char> in(4096), out(4096, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 13);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr scratch = 0;
  REQUIRE(cuMemAllocAsync(&scratch, in.size(), stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyHtoDAsync(scratch, in.data(), in.size(), stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoHAsync(out.data(), scratch, out.size(), stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(scratch, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  CHECK(cuMemGetAddressRange(&base, nullptr, scratch) == CUDA_ERROR_NOT_FOUND);  // freed, for the program
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  for (int launch = 0; launch < 3; ++launch) {
    std::fill(out.begin(), out.end(), 0);
    in[0] = static_cast<unsigned char>(launch + 1);  // copied at each launch: the new value arrives
    REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(out == in);
  }
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("an instantiated graph launched into a capture becomes one node of the new graph", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  std::string log;
  Step inner_mark{&log, 'i'};
  CUgraph inner = nullptr;
  REQUIRE(cuGraphCreate(&inner, 0) == CUDA_SUCCESS);
  CUgraphNode node = nullptr;
  CUDA_HOST_NODE_PARAMS host{Step::run, &inner_mark};
  REQUIRE(cuGraphAddHostNode(&node, inner, nullptr, 0, &host) == CUDA_SUCCESS);
  CUgraphExec inner_exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&inner_exec, inner, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(inner_exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(inner_exec, stream) == CUDA_SUCCESS);
  CUgraph outer = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &outer) == CUDA_SUCCESS);
  CHECK(log.empty());
  CUgraphNode nodes[2] = {};
  size_t count = 2;
  REQUIRE(cuGraphGetNodes(outer, nodes, &count) == CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(nodes[1], &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_GRAPH);
  CUgraphExec outer_exec = nullptr;
  REQUIRE(cuGraphInstantiate(&outer_exec, outer, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(outer_exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == "ii");
  for (CUgraphExec e : {inner_exec, outer_exec}) CHECK(cuGraphExecDestroy(e) == CUDA_SUCCESS);
  for (CUgraph g : {inner, outer}) CHECK(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

namespace {
cuuint64_t graph_memory(CUdevice device, CUgraphMem_attribute attr) {
  cuuint64_t value = ~cuuint64_t{0};
  REQUIRE(cuDeviceGetGraphMemAttribute(device, attr, &value) == CUDA_SUCCESS);
  return value;
}
}  // namespace

TEST_CASE("graph memory attributes: what graphs use and reserve, high watermarks reset to zero, trim",
          "[driver][graphs]") {
  primary_context();
  const CUdevice device = 0;
  CUstream stream = new_stream();
  const cuuint64_t used_before = graph_memory(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr first = 0, second = 0;
  REQUIRE(cuMemAllocAsync(&first, 1 << 20, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocAsync(&second, 3 << 20, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  const cuuint64_t used = graph_memory(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
  CHECK(used >= used_before + (4 << 20));
  // Nothing is cached for later graphs: what is reserved is what is used.
  CHECK(graph_memory(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == used);
  CHECK(graph_memory(device, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= used);
  CHECK(graph_memory(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) >= used);

  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(graph_memory(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == used_before);
  CHECK(graph_memory(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == used_before);
  CHECK(graph_memory(device, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= used);  // a high watermark stays
  CHECK(cuDeviceGraphMemTrim(device) == CUDA_SUCCESS);

  // The high watermarks can only be reset, to zero, after which they read the current use.
  cuuint64_t zero = 0, other = 1;
  for (const CUgraphMem_attribute high : {CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH}) {
    CHECK(cuDeviceSetGraphMemAttribute(device, high, &other) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuDeviceSetGraphMemAttribute(device, high, &zero) == CUDA_SUCCESS);
    CHECK(graph_memory(device, high) == used_before);
  }
  // The current figures cannot be set; bad devices, attributes and pointers are refused.
  CHECK(cuDeviceSetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero) == CUDA_ERROR_INVALID_VALUE);
  cuuint64_t value = 0;
  CHECK(cuDeviceGetGraphMemAttribute(device, static_cast<CUgraphMem_attribute>(99), &value) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetGraphMemAttribute(99, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &value) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGraphMemTrim(99) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}


TEST_CASE("memory nodes built by hand: graph-owned memory, used between its allocation and free nodes",
          "[driver][graphs]") {
  primary_context();
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS);
  CUstream stream = new_stream();
  const cuuint64_t used_before = graph_memory(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS params = alloc_params(0, 4096);
  const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  params.accessDescs = &access;
  params.accessDescCount = 1;
  CUgraphNode alloc = nullptr, set = nullptr, copy = nullptr, release = nullptr;
  REQUIRE(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params) == CUDA_SUCCESS);
  REQUIRE(params.dptr != 0);
  // The graph's memory from the moment the node exists: known to address queries, not charged.
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, params.dptr + 100) == CUDA_SUCCESS);
  CHECK(base == params.dptr);
  CHECK(size == 4096);
  CHECK(graph_memory(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) >= used_before + 4096);
  CHECK(cuMemFree(params.dptr) == CUDA_ERROR_INVALID_VALUE);  // only a free node of its graph frees it

  const CUDA_MEMSET_NODE_PARAMS fill{params.dptr, 0, 0x5a, 1, 4096, 1};  // dst, pitch, value, size, width, height
  REQUIRE(cuGraphAddMemsetNode(&set, graph, &alloc, 1, &fill, ctx) == CUDA_SUCCESS);
  std::vector<unsigned char> out(4096, 0);
  CUDA_MEMCPY3D back = copy_1d(0, nullptr, 4096);
  back.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  back.srcDevice = params.dptr;
  back.srcHost = nullptr;
  back.dstMemoryType = CU_MEMORYTYPE_HOST;
  back.dstHost = out.data();
  back.dstDevice = 0;
  REQUIRE(cuGraphAddMemcpyNode(&copy, graph, &set, 1, &back, ctx) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddMemFreeNode(&release, graph, &copy, 1, params.dptr) == CUDA_SUCCESS);
  CHECK(cuMemGetAddressRange(&base, &size, params.dptr) == CUDA_ERROR_NOT_FOUND);  // freed, for the program

  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(alloc, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  CHECK(cuGraphNodeGetType(release, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  REQUIRE(cuGraphMemAllocNodeGetParams(alloc, &got) == CUDA_SUCCESS);
  CHECK(got.dptr == params.dptr);
  CHECK(got.bytesize == 4096);
  CHECK(got.poolProps.location.id == 0);
  REQUIRE(got.accessDescCount == 1);
  CHECK(got.accessDescs != &access);  // the node's own copy
  CHECK(got.accessDescs[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUdeviceptr freed = 0;
  REQUIRE(cuGraphMemFreeNodeGetParams(release, &freed) == CUDA_SUCCESS);
  CHECK(freed == params.dptr);
  // The getters take their own kind of node only.
  CHECK(cuGraphMemAllocNodeGetParams(release, &got) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemFreeNodeGetParams(alloc, &freed) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemAllocNodeGetParams(alloc, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemFreeNodeGetParams(nullptr, &freed) == CUDA_ERROR_INVALID_VALUE);

  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  for (int launch = 0; launch < 2; ++launch) {
    std::fill(out.begin(), out.end(), 0);
    REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(out[0] == 0x5a);
    CHECK(out[4095] == 0x5a);
  }
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(graph_memory(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == used_before);  // back with the graph
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("memory nodes built by hand: the documented refusals", "[driver][graphs]") {
  primary_context();
  CUgraph graph = nullptr, other = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphCreate(&other, 0) == CUDA_SUCCESS);
  CUgraphNode node = nullptr;
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS empty = alloc_params(0, 0);
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &empty) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS nowhere = alloc_params(7, 4096);  // no such device
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &nowhere) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS host = alloc_params(0, 4096);
  host.poolProps.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &host) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS ipc = alloc_params(0, 4096);  // "IPC is not supported"
  ipc.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &ipc) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS read_only = alloc_params(0, 4096);
  const CUmemAccessDesc owner_read{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ};
  read_only.accessDescs = &owner_read;
  read_only.accessDescCount = 1;
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &read_only) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS too_many = alloc_params(0, 4096);
  const CUmemAccessDesc three[3] = {};
  too_many.accessDescs = three;
  too_many.accessDescCount = 3;  // more than the two devices
  CHECK(cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &too_many) == CUDA_ERROR_INVALID_VALUE);
  size_t count = 1;
  REQUIRE(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 0);  // nothing was added
  CHECK(cuGraphAddMemAllocNode(&node, nullptr, nullptr, 0, &host) == CUDA_ERROR_INVALID_VALUE);

  CUDA_MEM_ALLOC_NODE_PARAMS params = alloc_params(1, 8192);  // the second device's memory
  CUgraphNode alloc = nullptr;
  REQUIRE(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params) == CUDA_SUCCESS);
  CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
  int ordinal = -1;
  CHECK(cuPointerGetAttribute(&ordinal, attr, params.dptr) == CUDA_SUCCESS);
  CHECK(ordinal == 1);
  // Free nodes: an address no allocation node returned, another graph's allocation, twice.
  CUdeviceptr plain = 0;
  REQUIRE(cuMemAlloc(&plain, 4096) == CUDA_SUCCESS);
  CHECK(cuGraphAddMemFreeNode(&node, graph, nullptr, 0, plain) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddMemFreeNode(&node, graph, nullptr, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddMemFreeNode(&node, other, nullptr, 0, params.dptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuGraphAddMemFreeNode(&node, graph, &alloc, 1, params.dptr) == CUDA_SUCCESS);
  CHECK(cuGraphAddMemFreeNode(&node, graph, &alloc, 1, params.dptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(plain) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(other) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
}

TEST_CASE("a captured allocation node answers its parameters", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr scratch = 0;
  REQUIRE(cuMemAllocAsync(&scratch, 1000, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(scratch, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CUgraphNode nodes[2] = {};
  size_t count = 2;
  REQUIRE(cuGraphGetNodes(graph, nodes, &count) == CUDA_SUCCESS);
  REQUIRE(count == 2);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  REQUIRE(cuGraphMemAllocNodeGetParams(nodes[0], &got) == CUDA_SUCCESS);
  CHECK(got.dptr == scratch);
  CHECK(got.bytesize == 1000);
  CHECK(got.poolProps.allocType == CU_MEM_ALLOCATION_TYPE_PINNED);
  CHECK(got.accessDescCount == 0);
  CUdeviceptr freed = 0;
  REQUIRE(cuGraphMemFreeNodeGetParams(nodes[1], &freed) == CUDA_SUCCESS);
  CHECK(freed == scratch);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("edges added and removed by hand order a launch; edges are listed; a cycle does not instantiate",
          "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  std::string log;
  Step a{&log, 'a'}, b{&log, 'b'}, c{&log, 'c'};
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode na = nullptr, nb = nullptr, nc = nullptr;
  CUDA_HOST_NODE_PARAMS pa{Step::run, &a}, pb{Step::run, &b}, pc{Step::run, &c};
  REQUIRE(cuGraphAddHostNode(&na, graph, nullptr, 0, &pa) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&nb, graph, nullptr, 0, &pb) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&nc, graph, nullptr, 0, &pc) == CUDA_SUCCESS);
  // c before b before a: the reverse of the order they were added.
  const CUgraphNode from[] = {nc, nb};
  const CUgraphNode to[] = {nb, na};
  REQUIRE(cuGraphAddDependencies(graph, from, to, nullptr, 2) == CUDA_SUCCESS);
  size_t count = 0;
  REQUIRE(cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CUgraphNode edge_from[3] = {}, edge_to[3] = {};
  CUgraphEdgeData data[3];
  std::memset(data, 0xff, sizeof data);
  count = 3;
  REQUIRE(cuGraphGetEdges(graph, edge_from, edge_to, data, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CHECK(((edge_from[0] == nb && edge_to[0] == na) && (edge_from[1] == nc && edge_to[1] == nb)));
  CHECK((edge_from[2] == nullptr && edge_to[2] == nullptr));  // past the edges there are
  CHECK(data[0].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT);
  CHECK(data[1].from_port == 0);
  CHECK(cuGraphGetEdges(graph, edge_from, nullptr, nullptr, &count) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphGetEdges(graph, nullptr, nullptr, data, &count) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphGetEdges(graph, nullptr, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);

  launch_once(graph, stream);
  CHECK(log == "cba");

  // Misuse: an edge that exists, one named twice, a self edge, another graph's node, edge data the
  // simulator does not model, removing an edge that is not there. Nothing changes.
  CUgraph other = nullptr;
  REQUIRE(cuGraphCreate(&other, 0) == CUDA_SUCCESS);
  CUgraphNode foreign = nullptr;
  REQUIRE(cuGraphAddEmptyNode(&foreign, other, nullptr, 0) == CUDA_SUCCESS);
  CHECK(cuGraphAddDependencies(graph, &nc, &nb, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  const CUgraphNode twice_from[] = {na, na}, twice_to[] = {nc, nc};
  CHECK(cuGraphAddDependencies(graph, twice_from, twice_to, nullptr, 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddDependencies(graph, &na, &na, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddDependencies(graph, &foreign, &na, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddDependencies(graph, nullptr, &na, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddDependencies(graph, nullptr, nullptr, nullptr, 0) == CUDA_SUCCESS);  // nothing to add
  CUgraphEdgeData programmatic{};
  programmatic.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  CHECK(cuGraphAddDependencies(graph, &na, &nc, &programmatic, 1) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuGraphRemoveDependencies(graph, &na, &nc, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphRemoveDependencies(graph, &nb, &na, &programmatic, 1) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);

  // a -> c closes a cycle: accepted, but the graph no longer instantiates.
  REQUIRE(cuGraphAddDependencies(graph, &na, &nc, nullptr, 1) == CUDA_SUCCESS);
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  CUgraphExec exec = nullptr;
  CHECK(cuGraphInstantiateWithParams(&exec, graph, &params) == CUDA_ERROR_INVALID_VALUE);
  CHECK(params.result_out == CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE);
  // Removing b -> a opens it again: a, then c, then b.
  REQUIRE(cuGraphRemoveDependencies(graph, &nb, &na, nullptr, 1) == CUDA_SUCCESS);
  CUgraphNode deps[2] = {};
  count = 2;
  REQUIRE(cuGraphNodeGetDependencies(na, deps, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 0);
  log.clear();
  launch_once(graph, stream);
  CHECK(log == "acb");
  CHECK(cuGraphDestroy(other) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("destroying a node severs its edges; clones are independent; graphs with memory nodes refuse both",
          "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  std::string log;
  Step a{&log, 'a'}, b{&log, 'b'};
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode na = nullptr, middle = nullptr, nb = nullptr;
  CUDA_HOST_NODE_PARAMS pa{Step::run, &a}, pb{Step::run, &b};
  REQUIRE(cuGraphAddHostNode(&na, graph, nullptr, 0, &pa) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddEmptyNode(&middle, graph, &na, 1) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&nb, graph, &middle, 1, &pb) == CUDA_SUCCESS);

  CUgraph clone = nullptr;
  REQUIRE(cuGraphClone(&clone, graph) == CUDA_SUCCESS);
  CHECK(clone != graph);
  CHECK(cuGraphClone(nullptr, graph) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphClone(&clone, nullptr) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuGraphDestroyNode(middle) == CUDA_SUCCESS);
  CHECK(cuGraphDestroyNode(middle) == CUDA_ERROR_INVALID_VALUE);  // gone
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_HOST;
  CHECK(cuGraphNodeGetType(middle, &type) == CUDA_ERROR_INVALID_VALUE);
  size_t count = 0;
  REQUIRE(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  REQUIRE(cuGraphGetRootNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);  // b lost its only dependency
  REQUIRE(cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 0);

  // The clone kept all three nodes, both edges and the host nodes' work.
  REQUIRE(cuGraphGetNodes(clone, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 3);
  CUgraphNode from[2] = {}, to[2] = {};
  count = 2;
  REQUIRE(cuGraphGetEdges(clone, from, to, nullptr, &count) == CUDA_SUCCESS);
  REQUIRE(count == 2);
  CHECK(from[0] != na);  // the clone's own nodes
  CHECK(to[0] == from[1]);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiate(&exec, clone, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(clone) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == "ab");
  REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);

  // With an allocation node: no clone, no node destroyed, no edge removed.
  CUDA_MEM_ALLOC_NODE_PARAMS params = alloc_params(0, 4096);
  CUgraphNode alloc = nullptr;
  REQUIRE(cuGraphAddMemAllocNode(&alloc, graph, &na, 1, &params) == CUDA_SUCCESS);
  CHECK(cuGraphClone(&clone, graph) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuGraphDestroyNode(nb) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphRemoveDependencies(graph, &na, &alloc, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddDependencies(graph, &alloc, &nb, nullptr, 1) == CUDA_SUCCESS);  // adding is allowed
  REQUIRE(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 3);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("child graph nodes embed a copy of a graph, which the node owns and launches run in place",
          "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  std::string log;
  Step before{&log, 'b'}, inner{&log, 'i'}, added{&log, 'x'}, after{&log, 'a'};
  CUgraph child = nullptr, parent = nullptr;
  REQUIRE(cuGraphCreate(&child, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphCreate(&parent, 0) == CUDA_SUCCESS);
  CUgraphNode node = nullptr, first = nullptr, embed = nullptr, last = nullptr;
  CUDA_HOST_NODE_PARAMS inner_params{Step::run, &inner}, before_params{Step::run, &before};
  CUDA_HOST_NODE_PARAMS after_params{Step::run, &after}, added_params{Step::run, &added};
  REQUIRE(cuGraphAddHostNode(&node, child, nullptr, 0, &inner_params) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&first, parent, nullptr, 0, &before_params) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddChildGraphNode(&embed, parent, &first, 1, child) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&last, parent, &embed, 1, &after_params) == CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(embed, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_GRAPH);

  // The node holds a copy: the original can change or go without affecting it.
  REQUIRE(cuGraphAddEmptyNode(&node, child, nullptr, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(child) == CUDA_SUCCESS);
  CUgraph embedded = nullptr;
  REQUIRE(cuGraphChildGraphNodeGetGraph(embed, &embedded) == CUDA_SUCCESS);
  CHECK(embedded != child);
  size_t count = 0;
  REQUIRE(cuGraphGetNodes(embedded, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 1);
  // The embedded graph itself: work added to it is the node's; the node owns it.
  CUgraphNode extra = nullptr;
  CUgraphNode embedded_nodes[1] = {};
  count = 1;
  REQUIRE(cuGraphGetNodes(embedded, embedded_nodes, &count) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&extra, embedded, embedded_nodes, 1, &added_params) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(embedded) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEM_ALLOC_NODE_PARAMS alloc = alloc_params(0, 256);
  CHECK(cuGraphAddMemAllocNode(&node, embedded, nullptr, 0, &alloc) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphChildGraphNodeGetGraph(first, &embedded) == CUDA_ERROR_INVALID_VALUE);  // not a child-graph node
  CHECK(cuGraphChildGraphNodeGetGraph(embed, nullptr) == CUDA_ERROR_INVALID_VALUE);

  launch_once(parent, stream);
  CHECK(log == "bixa");

  // A clone of the parent embeds its own copy; destroying the node destroys its graph.
  CUgraph clone = nullptr;
  REQUIRE(cuGraphClone(&clone, parent) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroyNode(embed) == CUDA_SUCCESS);
  CHECK(cuGraphGetNodes(embedded, nullptr, &count) == CUDA_ERROR_INVALID_VALUE);
  log.clear();
  launch_once(clone, stream);
  CHECK(log == "bixa");

  // A graph with memory nodes cannot be embedded, nor a null graph.
  CUgraph with_memory = nullptr;
  REQUIRE(cuGraphCreate(&with_memory, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddMemAllocNode(&node, with_memory, nullptr, 0, &alloc) == CUDA_SUCCESS);
  CHECK(cuGraphAddChildGraphNode(&node, parent, nullptr, 0, with_memory) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddChildGraphNode(&node, parent, nullptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  for (CUgraph g : {with_memory, clone, parent}) CHECK(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("host node parameters read back and replaced; instantiations keep what they took", "[driver][graphs]") {
  primary_context();
  CUstream stream = new_stream();
  std::string log;
  Step one{&log, '1'}, two{&log, '2'};
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode host = nullptr, empty = nullptr;
  CUDA_HOST_NODE_PARAMS first{Step::run, &one}, second{Step::run, &two};
  REQUIRE(cuGraphAddHostNode(&host, graph, nullptr, 0, &first) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddEmptyNode(&empty, graph, nullptr, 0) == CUDA_SUCCESS);
  CUDA_HOST_NODE_PARAMS got{};
  REQUIRE(cuGraphHostNodeGetParams(host, &got) == CUDA_SUCCESS);
  CHECK((got.fn == first.fn && got.userData == &one));
  CUgraphExec before = nullptr;
  REQUIRE(cuGraphInstantiate(&before, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphHostNodeSetParams(host, &second) == CUDA_SUCCESS);
  REQUIRE(cuGraphHostNodeGetParams(host, &got) == CUDA_SUCCESS);
  CHECK(got.userData == &two);
  REQUIRE(cuGraphLaunch(before, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == "1");
  launch_once(graph, stream);
  CHECK(log == "12");
  REQUIRE(cuGraphExecDestroy(before) == CUDA_SUCCESS);
  const CUDA_HOST_NODE_PARAMS no_function{nullptr, &two};
  CHECK(cuGraphHostNodeSetParams(host, &no_function) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphHostNodeSetParams(host, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphHostNodeGetParams(empty, &got) == CUDA_ERROR_INVALID_VALUE);  // not a host node
  CHECK(cuGraphHostNodeGetParams(host, nullptr) == CUDA_ERROR_INVALID_VALUE);

  // A captured cuLaunchHostFunc is a host node with the function and data.
  CUgraph captured = nullptr;
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(stream, Step::run, &one) == CUDA_SUCCESS);
  REQUIRE(cuStreamEndCapture(stream, &captured) == CUDA_SUCCESS);
  CUgraphNode node = nullptr;
  size_t count = 1;
  REQUIRE(cuGraphGetNodes(captured, &node, &count) == CUDA_SUCCESS);
  REQUIRE(cuGraphHostNodeGetParams(node, &got) == CUDA_SUCCESS);
  CHECK((got.fn == first.fn && got.userData == &one));
  for (CUgraph g : {captured, graph}) CHECK(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}
