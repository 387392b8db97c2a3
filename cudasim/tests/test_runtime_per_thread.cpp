// Programs built with --default-stream per-thread: with CUDA_API_PER_THREAD_DEFAULT_STREAM the
// toolkit header turns these calls into their `_ptsz` / `_ptds` entry points, where stream 0 is
// the calling thread's own default stream rather than the legacy one.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1

#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>
#include <vector>

#include "runtime_support.h"

using namespace runtime_test;

TEST_CASE("runtime: per-thread default streams round-trip memory", "[runtime][per-thread]") {
  constexpr size_t kSize = 8192;
  void* device = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, kSize));
  std::vector<unsigned char> source(kSize), back(kSize, 0);
  for (size_t i = 0; i < kSize; ++i) source[i] = static_cast<unsigned char>(i * 7);

  REQUIRE_CUDA(cudaMemcpy(device, source.data(), kSize, cudaMemcpyHostToDevice));          // _ptds
  REQUIRE_CUDA(cudaMemcpy(back.data(), device, kSize, cudaMemcpyDeviceToHost));            // _ptds
  CHECK(back == source);
  REQUIRE_CUDA(cudaMemset(device, 0x31, kSize));                                            // _ptds
  REQUIRE_CUDA(cudaMemcpyAsync(back.data(), device, kSize, cudaMemcpyDeviceToHost, 0));    // _ptsz
  REQUIRE_CUDA(cudaStreamSynchronize(0));                                                   // _ptsz
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0x31; }));

  void* pooled = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&pooled, kSize, 0));                                         // _ptsz
  REQUIRE_CUDA(cudaMemsetAsync(pooled, 0x42, kSize, 0));                                    // _ptsz
  REQUIRE_CUDA(cudaMemcpyAsync(back.data(), pooled, kSize, cudaMemcpyDeviceToHost, 0));
  REQUIRE_CUDA(cudaFreeAsync(pooled, 0));                                                   // _ptsz
  REQUIRE_CUDA(cudaStreamSynchronize(0));
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0x42; }));
  REQUIRE_CUDA(cudaFree(device));
}

TEST_CASE("runtime: each thread's default stream is its own", "[runtime][per-thread]") {
  void* device = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, 4096));  // freed only after the gate opens: cudaFree waits for it
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(0, Gate::wait, &gate));  // holds this thread's default stream
  cudaEvent_t held = nullptr;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&held, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventRecord(held, 0));                    // _ptsz
  CHECK(name(cudaStreamQuery(0)) == "cudaErrorNotReady");    // _ptsz

  // Another thread's default stream runs while this one is held.
  cudaError_t other_done = cudaErrorUnknown;
  std::thread([&] {
    if (cudaMemsetAsync(device, 1, 4096, 0) == cudaSuccess) other_done = wait_for_stream(0);
  }).join();
  CHECK(name(other_done) == "cudaSuccess");

  // Waiting on this thread's stream from another stream sees the held work.
  cudaStream_t waiter = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamWaitEvent(waiter, held, 0));        // _ptsz
  CHECK(name(cudaStreamQuery(waiter)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(0));
  REQUIRE_CUDA(cudaStreamSynchronize(waiter));
  CHECK(gate.ran());
  REQUIRE_CUDA(cudaStreamDestroy(waiter));
  REQUIRE_CUDA(cudaEventDestroy(held));
  REQUIRE_CUDA(cudaFree(device));
}

TEST_CASE("runtime: the per-thread default stream can be captured", "[runtime][per-thread][graph]") {
  REQUIRE_CUDA(cudaStreamBeginCapture(0, cudaStreamCaptureModeThreadLocal));  // _ptsz: this thread's stream
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE_CUDA(cudaStreamIsCapturing(0, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  REQUIRE_CUDA(cudaStreamGetCaptureInfo(0, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  void* graph_memory = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&graph_memory, 4096, 0));
  REQUIRE_CUDA(cudaFreeAsync(graph_memory, 0));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(0, &graph));
  CHECK(graph != nullptr);
  REQUIRE_CUDA(cudaGraphDestroy(graph));
}

TEST_CASE("runtime: stream 0 names the thread's default stream in stream queries", "[runtime][per-thread]") {
  unsigned long long zero = 0, per_thread = 0, legacy = 0;
  REQUIRE_CUDA(cudaStreamGetId(0, &zero));                      // _ptsz
  REQUIRE_CUDA(cudaStreamGetId(cudaStreamPerThread, &per_thread));
  REQUIRE_CUDA(cudaStreamGetId(cudaStreamLegacy, &legacy));
  CHECK(zero == per_thread);
  CHECK(zero != legacy);
  cudaStreamAttrValue value{};
  value.syncPolicy = cudaSyncPolicySpin;
  REQUIRE_CUDA(cudaStreamSetAttribute(0, cudaStreamAttributeSynchronizationPolicy, &value));  // _ptsz
  cudaStreamAttrValue read{};
  REQUIRE_CUDA(cudaStreamGetAttribute(cudaStreamPerThread, cudaStreamAttributeSynchronizationPolicy, &read));
  CHECK(read.syncPolicy == cudaSyncPolicySpin);
  REQUIRE_CUDA(cudaStreamGetAttribute(cudaStreamLegacy, cudaStreamAttributeSynchronizationPolicy, &read));
  CHECK(read.syncPolicy == cudaSyncPolicyAuto);
  int device = -1;
  REQUIRE_CUDA(cudaStreamGetDevice(0, &device));
  CHECK(device == 0);
  cudaEvent_t event = nullptr;
  REQUIRE_CUDA(cudaEventCreate(&event));
  REQUIRE_CUDA(cudaEventRecordWithFlags(event, 0, cudaEventRecordDefault));  // _ptsz
  REQUIRE_CUDA(cudaEventSynchronize(event));
  REQUIRE_CUDA(cudaEventDestroy(event));
}
