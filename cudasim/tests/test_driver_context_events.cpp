// Events recorded for, and waited for by, a whole context: cuCtxRecordEvent completes once every
// stream of the context has run the work queued before it; after cuCtxWaitEvent every stream of the
// context (and one made later) waits for the event; the documented error codes.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

using namespace driver_test;

namespace {

constexpr auto kPause = std::chrono::milliseconds(50);

CUevent new_event() {
  CUevent event = nullptr;
  REQUIRE(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  return event;
}

void raise_flag(void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }

}  // namespace

TEST_CASE("a context record completes when every stream ran what was queued before it", "[driver][events]") {
  CUcontext ctx = primary_context();
  CUstream a = non_blocking_stream(), b = non_blocking_stream();
  Gate gate_a, gate_b, later;
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &gate_a) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(b, Gate::wait, &gate_b) == CUDA_SUCCESS);
  CUevent event = new_event();
  REQUIRE(cuCtxRecordEvent(ctx, event) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &later) == CUDA_SUCCESS);  // queued after: not waited for
  std::this_thread::sleep_for(kPause);
  CHECK(cuEventQuery(event) == CUDA_ERROR_NOT_READY);
  gate_a.open();
  std::this_thread::sleep_for(kPause);
  CHECK(cuEventQuery(event) == CUDA_ERROR_NOT_READY);
  gate_b.open();
  REQUIRE(cuEventSynchronize(event) == CUDA_SUCCESS);
  CHECK_FALSE(later.ran());
  later.open();
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  cuEventDestroy(event);
  cuStreamDestroy(a);
  cuStreamDestroy(b);
}

TEST_CASE("after a context wait every stream of the context waits for the event", "[driver][events]") {
  CUcontext ctx = primary_context();
  CUstream recorder = non_blocking_stream(), existing = non_blocking_stream();
  Gate gate;
  REQUIRE(cuLaunchHostFunc(recorder, Gate::wait, &gate) == CUDA_SUCCESS);
  CUevent event = new_event();
  REQUIRE(cuEventRecord(event, recorder) == CUDA_SUCCESS);
  REQUIRE(cuCtxWaitEvent(ctx, event) == CUDA_SUCCESS);
  CUstream made_later = non_blocking_stream();
  std::atomic<bool> on_existing{false}, on_later{false};
  REQUIRE(cuLaunchHostFunc(existing, raise_flag, &on_existing) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(made_later, raise_flag, &on_later) == CUDA_SUCCESS);
  std::this_thread::sleep_for(kPause);
  CHECK_FALSE(on_existing.load());
  CHECK_FALSE(on_later.load());
  gate.open();
  REQUIRE(cuStreamSynchronize(existing) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(made_later) == CUDA_SUCCESS);
  CHECK(on_existing.load());
  CHECK(on_later.load());
  cuEventDestroy(event);
  cuStreamDestroy(recorder);
  cuStreamDestroy(existing);
  cuStreamDestroy(made_later);
}

TEST_CASE("context records and waits refuse what the documentation refuses", "[driver][events]") {
  CUcontext ctx = primary_context();
  CUevent event = new_event();
  CHECK(cuCtxRecordEvent(nullptr, event) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuCtxWaitEvent(nullptr, event) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuCtxRecordEvent(ctx, reinterpret_cast<CUevent>(&ctx)) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuCtxWaitEvent(ctx, reinterpret_cast<CUevent>(&ctx)) == CUDA_ERROR_INVALID_HANDLE);
  // An event of another context cannot record this one (it may be waited for).
  CUcontext other = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&other, 1) == CUDA_SUCCESS);
  CHECK(cuCtxRecordEvent(other, event) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuCtxWaitEvent(other, event) == CUDA_SUCCESS);
  cuDevicePrimaryCtxRelease(1);
  // A context with a capturing stream: the capture is invalidated.
  CUstream stream = non_blocking_stream();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(cuCtxRecordEvent(ctx, event) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(cuCtxWaitEvent(ctx, event) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  cuStreamDestroy(stream);
  cuEventDestroy(event);
}
