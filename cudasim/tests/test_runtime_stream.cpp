// Streams, events and host functions through the simulated runtime: ordering within a stream,
// cross-stream events, the legacy default stream, and frees that wait for the device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime_support.h"

using namespace runtime_test;

namespace {

// Appends its number to a shared log when run on a stream.
struct Step {
  std::mutex* mutex;
  std::vector<int>* log;
  int number;

  static void CUDART_CB run(void* self) {
    auto* step = static_cast<Step*>(self);
    std::lock_guard lock(*step->mutex);
    step->log->push_back(step->number);
  }
};

// A host function that takes a while, then takes a ticket from a shared counter.
struct SlowWork {
  std::atomic<int>* counter;
  std::atomic<int> ticket{0};

  static void CUDART_CB run(void* self) {
    auto* work = static_cast<SlowWork*>(self);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    work->ticket.store(++*work->counter);
  }
};

}  // namespace

TEST_CASE("runtime: stream creation flags and misuse", "[runtime][stream]") {
  cudaStream_t stream = nullptr;
  CHECK(name(cudaStreamCreate(nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaStreamCreateWithFlags(&stream, 0x40)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusActive;
  REQUIRE_CUDA(cudaStreamIsCapturing(stream, &capture));
  CHECK(capture == cudaStreamCaptureStatusNone);
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  CHECK(name(cudaLaunchHostFunc(nullptr, nullptr, nullptr)) == "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: work on one stream runs in order", "[runtime][stream]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  std::mutex mutex;
  std::vector<int> log;
  std::vector<Step> steps;
  for (int i = 0; i < 20; ++i) steps.push_back(Step{&mutex, &log, i});
  for (Step& step : steps) REQUIRE_CUDA(cudaLaunchHostFunc(stream, Step::run, &step));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  std::vector<int> expected(20);
  for (int i = 0; i < 20; ++i) expected[static_cast<size_t>(i)] = i;
  CHECK(log == expected);
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: events order work across streams", "[runtime][stream][event]") {
  constexpr size_t kSize = 4096;
  void* device = nullptr;
  void* copied = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, kSize));
  REQUIRE_CUDA(cudaMalloc(&copied, kSize));
  REQUIRE_CUDA(cudaMemset(device, 0, kSize));
  REQUIRE_CUDA(cudaMemset(copied, 0, kSize));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  cudaStream_t producer = nullptr;
  cudaStream_t consumer = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t written = nullptr;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));

  // Only device work waits behind the gate (a copy into pageable host memory may block the host
  // on a GPU); the result comes back to the host after the gate is open.
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(producer, Gate::wait, &gate));
  REQUIRE_CUDA(cudaMemsetAsync(device, 0x5A, kSize, producer));
  REQUIRE_CUDA(cudaEventRecord(written, producer));
  REQUIRE_CUDA(cudaStreamWaitEvent(consumer, written, 0));
  REQUIRE_CUDA(cudaMemcpyAsync(copied, device, kSize, cudaMemcpyDeviceToDevice, consumer));

  // The consumer cannot get past the event while the producer is held back.
  CHECK(name(cudaEventQuery(written)) == "cudaErrorNotReady");
  CHECK(name(cudaStreamQuery(consumer)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(consumer));
  REQUIRE_CUDA(cudaEventQuery(written));
  std::vector<unsigned char> back(kSize, 0);
  REQUIRE_CUDA(cudaMemcpy(back.data(), copied, kSize, cudaMemcpyDeviceToHost));
  CHECK(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0x5A; }));

  REQUIRE_CUDA(cudaEventDestroy(written));
  REQUIRE_CUDA(cudaStreamDestroy(producer));
  REQUIRE_CUDA(cudaStreamDestroy(consumer));
  REQUIRE_CUDA(cudaFree(device));
  REQUIRE_CUDA(cudaFree(copied));
}

TEST_CASE("runtime: event synchronisation and timing", "[runtime][event]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start = nullptr, stop = nullptr, untimed = nullptr;
  REQUIRE_CUDA(cudaEventCreate(&start));
  REQUIRE_CUDA(cudaEventCreate(&stop));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CHECK(name(cudaEventCreateWithFlags(&untimed, 0x80)) == "cudaErrorInvalidValue");
  CHECK(name(cudaEventCreate(nullptr)) == "cudaErrorInvalidValue");

  Gate gate;
  REQUIRE_CUDA(cudaEventRecord(start, stream));
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  REQUIRE_CUDA(cudaEventRecord(stop, stream));
  REQUIRE_CUDA(cudaEventRecord(untimed, stream));
  CHECK(name(cudaEventQuery(stop)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaEventSynchronize(stop));
  CHECK(gate.ran());
  REQUIRE_CUDA(cudaEventSynchronize(untimed));

  float ms = -1.0f;
  REQUIRE_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0.0f);
  CHECK(name(cudaEventElapsedTime(&ms, start, untimed)) == "cudaErrorInvalidResourceHandle");
  CHECK(name(cudaEventElapsedTime(nullptr, start, stop)) == "cudaErrorInvalidValue");
  cudaGetLastError();

  REQUIRE_CUDA(cudaEventDestroy(start));
  REQUIRE_CUDA(cudaEventDestroy(stop));
  REQUIRE_CUDA(cudaEventDestroy(untimed));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: the legacy default stream waits for blocking streams only", "[runtime][stream]") {
  cudaStream_t blocking = nullptr;
  cudaStream_t non_blocking = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&blocking));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking));
  std::mutex mutex;
  std::vector<int> log;
  Step on_blocking{&mutex, &log, 1};
  Step on_legacy{&mutex, &log, 2};

  SECTION("work on stream 0 waits for earlier work on a blocking stream") {
    Gate gate;
    REQUIRE_CUDA(cudaLaunchHostFunc(blocking, Gate::wait, &gate));
    REQUIRE_CUDA(cudaLaunchHostFunc(blocking, Step::run, &on_blocking));
    REQUIRE_CUDA(cudaLaunchHostFunc(nullptr, Step::run, &on_legacy));
    CHECK(name(cudaStreamQuery(nullptr)) == "cudaErrorNotReady");
    gate.open();
    REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
    CHECK(log == std::vector<int>{1, 2});
  }
  SECTION("work on stream 0 does not wait for a non-blocking stream") {
    Gate gate;
    REQUIRE_CUDA(cudaLaunchHostFunc(non_blocking, Gate::wait, &gate));
    REQUIRE_CUDA(cudaLaunchHostFunc(nullptr, Step::run, &on_legacy));
    const cudaError_t legacy_done = wait_for_stream(nullptr);
    gate.open();
    CHECK(name(legacy_done) == "cudaSuccess");
    REQUIRE_CUDA(cudaStreamSynchronize(non_blocking));
    CHECK(log == std::vector<int>{2});
  }
  REQUIRE_CUDA(cudaStreamDestroy(blocking));
  REQUIRE_CUDA(cudaStreamDestroy(non_blocking));
}

TEST_CASE("runtime: cudaFree waits for work still running on the device", "[runtime][stream][memory]") {
  const unsigned int flags = GENERATE(cudaStreamDefault, cudaStreamNonBlocking);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, flags));
  void* device = nullptr;
  REQUIRE_CUDA(cudaMalloc(&device, kMiB));

  std::atomic<int> counter{0};
  SlowWork work{&counter};
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, SlowWork::run, &work));
  REQUIRE_CUDA(cudaFree(device));
  const int free_returned = ++counter;
  CHECK(work.ticket != 0);
  CHECK(work.ticket < free_returned);

  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: cudaDeviceSynchronize waits for every stream", "[runtime][stream]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::atomic<int> counter{0};
  SlowWork work{&counter};
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, SlowWork::run, &work));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  const int synchronize_returned = ++counter;
  CHECK(work.ticket != 0);
  CHECK(work.ticket < synchronize_returned);
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: stream capture records work into a graph", "[runtime][stream][graph]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(name(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal)) == "cudaErrorStreamCaptureUnsupported");
  cudaGetLastError();
  REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE_CUDA(cudaStreamIsCapturing(stream, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  unsigned long long id = 0;
  cudaGraph_t during = nullptr;
  REQUIRE_CUDA(cudaStreamGetCaptureInfo(stream, &status, &id, &during));
  CHECK(id != 0);
  void* graph_memory = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&graph_memory, 4096, stream));  // a memory-allocation node
  CHECK(graph_memory != nullptr);
  REQUIRE_CUDA(cudaMemsetAsync(graph_memory, 1, 4096, stream));
  REQUIRE_CUDA(cudaFreeAsync(graph_memory, stream));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK(graph == during);
  REQUIRE_CUDA(cudaStreamIsCapturing(stream, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  CHECK(name(cudaStreamEndCapture(stream, &graph)) == "cudaErrorIllegalState");
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  cudaGetLastError();

  // A potentially unsafe call invalidates a global capture; ending it returns no graph.
  REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  void* p = nullptr;
  CHECK(name(cudaMalloc(&p, 4096)) == "cudaErrorStreamCaptureUnsupported");
  REQUIRE_CUDA(cudaStreamIsCapturing(stream, &status));
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  graph = reinterpret_cast<cudaGraph_t>(0x1);
  CHECK(name(cudaStreamEndCapture(stream, &graph)) == "cudaErrorStreamCaptureInvalidated");
  CHECK(graph == nullptr);
  // ... unless this thread relaxed its interaction mode.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  CHECK(mode == cudaStreamCaptureModeGlobal);
  REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  REQUIRE_CUDA(cudaMalloc(&p, 4096));
  REQUIRE_CUDA(cudaStreamEndCapture(stream, &graph));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  REQUIRE_CUDA(cudaFree(p));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  cudaGetLastError();
}

namespace {

// Appends its tag to a shared log when a stream reaches it (a stream callback or a host function).
struct Tagged {
  std::string* log;
  char tag;
  cudaError_t status = cudaErrorUnknown;
  static void CUDART_CB callback(cudaStream_t, cudaError_t status, void* self) {
    auto* t = static_cast<Tagged*>(self);
    t->status = status;
    t->log->push_back(t->tag);
  }
  static void CUDART_CB host(void* self) {
    auto* t = static_cast<Tagged*>(self);
    t->log->push_back(t->tag);
  }
};

}  // namespace

TEST_CASE("runtime: stream callbacks and host functions run on the stream, in order", "[runtime][stream]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Gate gate;
  std::string log;
  Tagged a{&log, 'a'}, b{&log, 'b'}, c{&log, 'c'};
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  REQUIRE_CUDA(cudaStreamAddCallback(stream, Tagged::callback, &a, 0));
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Tagged::host, &b));
  REQUIRE_CUDA(cudaStreamAddCallback(stream, Tagged::callback, &c, 0));
  CHECK(log.empty());  // the stream is held at the gate
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(log == "abc");
  CHECK(a.status == cudaSuccess);
  CHECK(name(cudaStreamAddCallback(stream, Tagged::callback, &a, 1)) == "cudaErrorInvalidValue");
  CHECK(name(cudaStreamAddCallback(stream, nullptr, &a, 0)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  // On the legacy default stream and the per-thread one too.
  log.clear();
  REQUIRE_CUDA(cudaStreamAddCallback(nullptr, Tagged::callback, &a, 0));
  REQUIRE_CUDA(cudaStreamAddCallback(cudaStreamPerThread, Tagged::callback, &b, 0));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  std::sort(log.begin(), log.end());
  CHECK(log == "ab");
}

TEST_CASE("runtime: stream priorities and flags", "[runtime][stream]") {
  int least = 0, greatest = 0;
  REQUIRE_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t high = nullptr, beyond = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest));
  REQUIRE_CUDA(cudaStreamCreateWithPriority(&beyond, cudaStreamDefault, least + 7));
  int priority = 1;
  unsigned flags = 7;
  REQUIRE_CUDA(cudaStreamGetPriority(high, &priority));
  CHECK(priority == greatest);
  REQUIRE_CUDA(cudaStreamGetPriority(beyond, &priority));
  CHECK(priority == least);  // clamped into the range
  REQUIRE_CUDA(cudaStreamGetFlags(high, &flags));
  CHECK(flags == cudaStreamNonBlocking);
  REQUIRE_CUDA(cudaStreamGetFlags(beyond, &flags));
  CHECK(flags == cudaStreamDefault);
  CHECK(name(cudaStreamCreateWithPriority(&high, 4, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaStreamGetPriority(beyond, nullptr)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaStreamDestroy(high));
  REQUIRE_CUDA(cudaStreamDestroy(beyond));
}

TEST_CASE("runtime: interprocess event handles are the driver's", "[runtime][event]") {
  cudaEvent_t shared = nullptr, plain = nullptr, opened = nullptr;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&shared, cudaEventInterprocess | cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
  cudaIpcEventHandle_t handle{};
  REQUIRE_CUDA(cudaIpcGetEventHandle(&handle, shared));
  CHECK(name(cudaIpcGetEventHandle(&handle, plain)) == "cudaErrorInvalidValue");  // not interprocess
  CHECK(name(cudaIpcGetEventHandle(nullptr, shared)) == "cudaErrorInvalidValue");
  // The driver's CUDA_ERROR_INVALID_CONTEXT for a process's own handle, translated.
  CHECK(name(cudaIpcOpenEventHandle(&opened, handle)) == "cudaErrorDeviceUninitialized");
  CHECK(name(cudaIpcOpenEventHandle(nullptr, handle)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaEventRecord(shared, nullptr));
  REQUIRE_CUDA(cudaEventSynchronize(shared));
  CHECK_CUDA(cudaEventQuery(shared));
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaEventDestroy(shared));
  REQUIRE_CUDA(cudaEventDestroy(plain));
}

TEST_CASE("runtime: a capture forks into another stream through an event and joins back", "[runtime][graph]") {
  cudaStream_t origin = nullptr, side = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&origin, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork = nullptr, join = nullptr;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, 256));
  REQUIRE_CUDA(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal));
  REQUIRE_CUDA(cudaEventRecord(fork, origin));
  REQUIRE_CUDA(cudaStreamWaitEvent(side, fork, 0));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE_CUDA(cudaStreamIsCapturing(side, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  REQUIRE_CUDA(cudaMemsetAsync(dev, 1, 256, side));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaEventRecord(join, side));
  REQUIRE_CUDA(cudaStreamWaitEvent(origin, join, 0));
  REQUIRE_CUDA(cudaStreamEndCapture(origin, &graph));
  REQUIRE_CUDA(cudaStreamIsCapturing(side, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  // Not joined back.
  REQUIRE_CUDA(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal));
  REQUIRE_CUDA(cudaEventRecord(fork, origin));
  REQUIRE_CUDA(cudaStreamWaitEvent(side, fork, 0));
  REQUIRE_CUDA(cudaMemsetAsync(dev, 2, 256, side));
  CHECK(name(cudaStreamEndCapture(origin, &graph)) == "cudaErrorStreamCaptureUnjoined");
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaFree(dev));
  REQUIRE_CUDA(cudaEventDestroy(fork));
  REQUIRE_CUDA(cudaEventDestroy(join));
  REQUIRE_CUDA(cudaStreamDestroy(origin));
  REQUIRE_CUDA(cudaStreamDestroy(side));
}
