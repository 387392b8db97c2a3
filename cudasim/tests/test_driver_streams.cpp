// The simulated driver's streams, events and host functions: work really runs later, in order,
// with the legacy-default-stream rules, and cuMemFree / cuCtxSynchronize wait for it.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

using namespace driver_test;

namespace {

// Polls a stream until it is idle or about 5 s passed, so a wrong answer fails instead of hanging.
CUresult wait_for(CUstream stream) {
  CUresult status = CUDA_ERROR_NOT_READY;
  for (int i = 0; i < 5000 && status == CUDA_ERROR_NOT_READY; ++i) {
    status = cuStreamQuery(stream);
    if (status == CUDA_ERROR_NOT_READY) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

// Gives a wrongly ordered stream time to misbehave before the test looks.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

}  // namespace

TEST_CASE("async copies and sets run later, in stream order", "[driver][streams]") {
  primary_context();
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0, 4096) == CUDA_SUCCESS);
  std::vector<unsigned> in(256, 7), out(768, 1);
  REQUIRE(cuMemcpyHtoD(dev, in.data(), 1024) == CUDA_SUCCESS);

  // Only device-side work waits behind the gate: a host copy there would block the host on a GPU
  // (pageable memory) before the gate could be opened.
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD32Async(dev + 1024, 9, 256, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoDAsync(dev + 2048, dev, 1024, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoDAsync(dev + 3072, dev + 1024, 1024, stream) == CUDA_SUCCESS);  // after the set
  settle();
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  // The legacy stream does not wait for a non-blocking one: this reads the memory as it is now.
  REQUIRE(cuMemcpyDtoH(out.data(), dev + 1024, 3072) == CUDA_SUCCESS);
  CHECK(out == std::vector<unsigned>(768, 0));  // nothing ran behind the closed gate
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_SUCCESS);
  std::vector<unsigned> all(1024, 0);
  REQUIRE(cuMemcpyDtoH(all.data(), dev, 4096) == CUDA_SUCCESS);
  CHECK(std::vector<unsigned>(all.begin(), all.begin() + 256) == in);
  CHECK(std::vector<unsigned>(all.begin() + 256, all.begin() + 512) == std::vector<unsigned>(256, 9));
  CHECK(std::vector<unsigned>(all.begin() + 512, all.begin() + 768) == in);
  CHECK(std::vector<unsigned>(all.begin() + 768, all.end()) == std::vector<unsigned>(256, 9));
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("synchronous sets and device-to-device copies do not block the host", "[driver][streams]") {
  // NVIDIA's "API synchronization behavior": memsets to device memory and device-to-device copies
  // are asynchronous with respect to the host; they are only ordered on the default stream.
  CUcontext ctx = primary_context();
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 16384) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0, 16384) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::wait, &gate) == CUDA_SUCCESS);
  std::atomic<bool> returned{false};
  std::atomic<bool> all_succeeded{false};
  std::thread caller([&] {
    cuCtxSetCurrent(ctx);
    bool ok = cuMemsetD8(dev, 0x11, 4096) == CUDA_SUCCESS;
    ok = cuMemsetD16(dev + 4096, 0x2222, 2048) == CUDA_SUCCESS && ok;
    ok = cuMemsetD32(dev + 8192, 0x33333333, 1024) == CUDA_SUCCESS && ok;
    ok = cuMemcpyDtoD(dev + 12288, dev, 2048) == CUDA_SUCCESS && ok;
    ok = cuMemcpy(dev + 14336, dev + 4096, 2048) == CUDA_SUCCESS && ok;  // unified, both on the device
    all_succeeded = ok;
    returned = true;
  });
  for (int i = 0; i < 5000 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(returned.load());  // while the legacy stream is still held
  CHECK_FALSE(gate.ran());
  CHECK(cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY);
  gate.open();
  caller.join();
  CHECK(all_succeeded.load());
  // A copy to the host waits for the queued work, so it sees every result.
  std::vector<unsigned char> back(16384, 0);
  REQUIRE(cuMemcpyDtoH(back.data(), dev, back.size()) == CUDA_SUCCESS);
  CHECK(gate.ran());
  auto all = [&](size_t from, size_t to, unsigned char value) {
    return std::all_of(back.begin() + static_cast<long>(from), back.begin() + static_cast<long>(to),
                       [value](unsigned char b) { return b == value; });
  };
  CHECK(all(0, 4096, 0x11));
  CHECK(all(4096, 8192, 0x22));
  CHECK(all(8192, 12288, 0x33));
  CHECK(all(12288, 14336, 0x11));
  CHECK(all(14336, 16384, 0x22));
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("a synchronous copy to the host waits for the work queued before it, and only that",
          "[driver][streams]") {
  // The caller of a synchronous copy may run the copy itself once the stream reaches it (streams.h):
  // it must still wait for the work before it and return only once the copy is done.
  CUcontext ctx = primary_context();
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0, 4096) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD32Async(dev, 5, 1024, CU_STREAM_LEGACY) == CUDA_SUCCESS);
  std::vector<unsigned> out(1024, 1);
  std::atomic<bool> returned{false};
  std::thread caller([&] {
    cuCtxSetCurrent(ctx);
    if (cuMemcpyDtoH(out.data(), dev, 4096) == CUDA_SUCCESS) returned = true;
  });
  settle();
  CHECK_FALSE(returned.load());  // behind the closed gate
  gate.open();
  caller.join();
  CHECK(returned.load());
  CHECK(out == std::vector<unsigned>(1024, 5));  // the set queued before it ran first
  // Work queued after it by the same thread still runs, on the stream's own worker.
  REQUIRE(cuMemsetD32Async(dev, 6, 1024, CU_STREAM_LEGACY) == CUDA_SUCCESS);
  CHECK(wait_for(CU_STREAM_LEGACY) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoH(out.data(), dev, 4096) == CUDA_SUCCESS);
  CHECK(out == std::vector<unsigned>(1024, 6));
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("threads mixing queued sets and synchronous copies on one stream see their own results",
          "[driver][streams]") {
  // Each thread sets its own slice on the legacy stream (queued) and reads it back synchronously:
  // the read must see that set, whether the stream's worker or a caller runs the copy.
  CUcontext ctx = primary_context();
  constexpr int kThreads = 6, kRounds = 400;
  constexpr std::size_t kSlice = 1024;
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, kThreads * kSlice) == CUDA_SUCCESS);
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(ctx);
      std::vector<unsigned> back(kSlice / sizeof(unsigned));
      const CUdeviceptr slice = dev + static_cast<CUdeviceptr>(t) * kSlice;
      for (unsigned round = 0; round < kRounds; ++round) {
        const unsigned value = static_cast<unsigned>(t) * 100000u + round;
        if (cuMemsetD32Async(slice, value, back.size(), CU_STREAM_LEGACY) != CUDA_SUCCESS ||
            cuMemcpyDtoH(back.data(), slice, kSlice) != CUDA_SUCCESS) {
          ++failures;
          return;
        }
        if (std::count(back.begin(), back.end(), value) != static_cast<long>(back.size())) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  CHECK(mismatches.load() == 0);
  CHECK(wait_for(CU_STREAM_LEGACY) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("async copies stage a host source at the call; host-to-host copies are synchronous",
          "[driver][streams]") {
  primary_context();
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 2048) == CUDA_SUCCESS);
  std::vector<unsigned> in(256, 7), back(512, 0);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyHtoDAsync(dev, in.data(), 1024, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyAsync(dev + 1024, reinterpret_cast<CUdeviceptr>(in.data()), 1024, stream) == CUDA_SUCCESS);
  std::fill(in.begin(), in.end(), 8u);  // pageable memory: the caller may reuse it at once
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoH(back.data(), dev, 2048) == CUDA_SUCCESS);
  CHECK(back == std::vector<unsigned>(512, 7));

  // Host to host: done, in stream order, before cuMemcpyAsync returns.
  Gate later;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &later) == CUDA_SUCCESS);
  std::thread opener([&] {
    settle();
    later.open();
  });
  std::vector<unsigned> copy(256, 0);
  REQUIRE(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(copy.data()), reinterpret_cast<CUdeviceptr>(in.data()),
                        1024, stream) == CUDA_SUCCESS);
  CHECK(later.ran());
  CHECK(copy == in);
  opener.join();
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("the legacy default stream waits for blocking streams and they wait for it", "[driver][streams]") {
  primary_context();
  CUstream blocking = nullptr, non_blocking = nullptr;
  REQUIRE(cuStreamCreate(&blocking, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  std::string log;
  Step legacy_step{&log, 'L'}, blocking_step{&log, 'B'}, free_step{&log, 'N'};

  SECTION("blocking stream work waits for earlier legacy work; non-blocking does not") {
    Gate gate;
    REQUIRE(cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::wait, &gate) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(blocking, Step::run, &blocking_step) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(non_blocking, Step::run, &free_step) == CUDA_SUCCESS);
    CHECK(wait_for(non_blocking) == CUDA_SUCCESS);  // runs while the legacy stream is held
    settle();
    CHECK(log == "N");
    CHECK(cuStreamQuery(blocking) == CUDA_ERROR_NOT_READY);
    gate.open();
    REQUIRE(cuStreamSynchronize(blocking) == CUDA_SUCCESS);
    CHECK(log == "NB");
  }
  SECTION("legacy work waits for earlier blocking-stream work (NULL means legacy)") {
    Gate gate;
    REQUIRE(cuLaunchHostFunc(blocking, Gate::wait, &gate) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(nullptr, Step::run, &legacy_step) == CUDA_SUCCESS);
    settle();
    CHECK(log.empty());
    CHECK(cuStreamQuery(nullptr) == CUDA_ERROR_NOT_READY);
    gate.open();
    REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
    CHECK(log == "L");
    CHECK(gate.ran());
  }
  SECTION("legacy work does not wait for non-blocking streams") {
    Gate gate;
    REQUIRE(cuLaunchHostFunc(non_blocking, Gate::wait, &gate) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(CU_STREAM_LEGACY, Step::run, &legacy_step) == CUDA_SUCCESS);
    CHECK(wait_for(CU_STREAM_LEGACY) == CUDA_SUCCESS);
    CHECK(log == "L");
    gate.open();
    REQUIRE(cuStreamSynchronize(non_blocking) == CUDA_SUCCESS);
  }
  REQUIRE(cuStreamDestroy(blocking) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(non_blocking) == CUDA_SUCCESS);
}

TEST_CASE("per-thread default streams are separate from the legacy stream's queue", "[driver][streams]") {
  primary_context();
  std::string log;
  Step step{&log, 'P'};
  REQUIRE(cuLaunchHostFunc(CU_STREAM_PER_THREAD, Step::run, &step) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  CHECK(log == "P");
  // A per-thread stream is blocking: it waits for earlier legacy work.
  Gate gate;
  REQUIRE(cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(CU_STREAM_PER_THREAD, Step::run, &step) == CUDA_SUCCESS);
  settle();
  CHECK(log == "P");
  gate.open();
  REQUIRE(cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  CHECK(log == "PP");
}

TEST_CASE("events order work across streams", "[driver][events]") {
  primary_context();
  CUstream a = nullptr, b = nullptr;
  REQUIRE(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUevent event = nullptr;
  REQUIRE(cuEventCreate(&event, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  CHECK(cuEventQuery(event) == CUDA_SUCCESS);  // never recorded

  Gate gate;
  std::string log;
  Step after{&log, 'b'};
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(event, a) == CUDA_SUCCESS);
  REQUIRE(cuStreamWaitEvent(b, event, 0) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(b, Step::run, &after) == CUDA_SUCCESS);
  settle();
  CHECK(cuEventQuery(event) == CUDA_ERROR_NOT_READY);
  CHECK(log.empty());
  gate.open();
  REQUIRE(cuEventSynchronize(event) == CUDA_SUCCESS);
  CHECK(cuEventQuery(event) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(b) == CUDA_SUCCESS);
  CHECK(log == "b");
  CHECK(cuStreamWaitEvent(b, event, 42) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuEventDestroy(event) == CUDA_SUCCESS);
  CHECK(cuEventDestroy(event) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuEventQuery(event) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamDestroy(a) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(b) == CUDA_SUCCESS);
}

TEST_CASE("event timing", "[driver][events]") {
  primary_context();
  CUevent start = nullptr, end = nullptr, untimed = nullptr, unrecorded = nullptr;
  REQUIRE(cuEventCreate(&start, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&end, CU_EVENT_BLOCKING_SYNC) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&unrecorded, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  CUevent bad = nullptr;
  CHECK(cuEventCreate(&bad, 0x100) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuEventCreate(&bad, CU_EVENT_INTERPROCESS) == CUDA_ERROR_INVALID_VALUE);

  Gate gate;
  REQUIRE(cuEventRecord(start, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(nullptr, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(end, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(untimed, nullptr) == CUDA_SUCCESS);
  float ms = -1;
  CHECK(cuEventElapsedTime(&ms, start, end) == CUDA_ERROR_NOT_READY);
  gate.open();
  REQUIRE(cuEventSynchronize(end) == CUDA_SUCCESS);
  CHECK(cuEventElapsedTime(&ms, start, end) == CUDA_SUCCESS);
  CHECK(ms >= 0.0f);
  CHECK(cuEventElapsedTime(&ms, start, untimed) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuEventElapsedTime(&ms, start, unrecorded) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuEventElapsedTime(nullptr, start, end) == CUDA_ERROR_INVALID_VALUE);
  for (CUevent e : {start, end, untimed, unrecorded}) CHECK(cuEventDestroy(e) == CUDA_SUCCESS);
}

TEST_CASE("cuMemFree waits for work still queued in the context", "[driver][streams]") {
  primary_context();
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, 4096) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(dev, 1, 4096, stream) == CUDA_SUCCESS);

  std::atomic<bool> returned{false};
  std::atomic<bool> gate_ran_before_return{false};
  CUcontext ctx = primary_context();
  std::thread freer([&] {
    cuCtxSetCurrent(ctx);
    CHECK(cuMemFree(dev) == CUDA_SUCCESS);
    gate_ran_before_return = gate.ran();
    returned = true;
  });
  settle();
  CHECK_FALSE(returned.load());
  gate.open();
  freer.join();
  CHECK(returned.load());
  CHECK(gate_ran_before_return.load());
  CHECK(cuStreamQuery(stream) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("cuCtxSynchronize waits for every stream of the context", "[driver][streams]") {
  primary_context();
  CUstream a = nullptr, b = nullptr;
  REQUIRE(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&b, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  Gate gate_a, gate_b;
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &gate_a) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(b, Gate::wait, &gate_b) == CUDA_SUCCESS);
  std::thread opener([&] {
    settle();
    gate_a.open();
    settle();
    gate_b.open();
  });
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(gate_a.ran());
  CHECK(gate_b.ran());
  opener.join();
  CHECK(cuStreamDestroy(a) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(b) == CUDA_SUCCESS);
}

TEST_CASE("a destroyed stream still finishes its queued work", "[driver][streams]") {
  primary_context();
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(stream) == CUDA_SUCCESS);  // returns at once
  CHECK_FALSE(gate.ran());
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_INVALID_HANDLE);
  gate.open();
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(gate.ran());
}

TEST_CASE("stream calls reject bad handles and arguments", "[driver][streams]") {
  primary_context();
  auto bogus = reinterpret_cast<CUstream>(0x1000);
  CHECK(cuStreamSynchronize(bogus) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamQuery(bogus) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamDestroy(bogus) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamDestroy(nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLaunchHostFunc(nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUstream stream = nullptr;
  CHECK(cuStreamCreate(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamCreate(&stream, 0x10) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  unsigned flags = 0;
  CHECK(cuStreamGetFlags(stream, &flags) == CUDA_SUCCESS);
  CHECK(flags == CU_STREAM_NON_BLOCKING);
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CHECK(cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS);
  CHECK(capture == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(cuStreamIsCapturing(stream, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD8Async(0x1234, 0, 4, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("a forked child can use the driver afresh", "[driver][fork]") {
  primary_context();
  CUdeviceptr parent_memory = 0;
  REQUIRE(cuMemAlloc(&parent_memory, 4096) == CUDA_SUCCESS);
  // Leave the parent with live worker threads.
  REQUIRE(cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS);
  int rc = in_child([parent_memory] {
    CUcontext ctx = nullptr;
    int count = 0;
    CHILD_CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(parent_memory) == CUDA_ERROR_INVALID_VALUE);  // not the child's
    CUdeviceptr ptr = 0;
    CHILD_CHECK(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemsetD8Async(ptr, 3, 4096, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
  CHECK(cuMemFree(parent_memory) == CUDA_SUCCESS);
}

TEST_CASE("a process exits cleanly with work still queued", "[driver][exit]") {
  int rc = in_child([] {
    CHILD_CHECK(start_primary_context());
    static Gate never_opened;
    CUstream stream = nullptr;
    CHILD_CHECK(cuStreamCreate(&stream, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuLaunchHostFunc(stream, Gate::wait, &never_opened) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemsetD8Async(0, 0, 0, stream) == CUDA_SUCCESS);
    std::exit(7);  // static destructors and exit handlers run with the worker still blocked
  });
  CHECK(rc == 7);
}
