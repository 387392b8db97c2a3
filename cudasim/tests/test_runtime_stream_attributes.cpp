// Stream attributes, numbers and devices, and events recorded with flags, through the simulated
// runtime (cudaStreamGetAttribute, cudaStreamSetAttribute, cudaStreamCopyAttributes,
// cudaStreamGetId, cudaStreamGetDevice, cudaEventRecordWithFlags).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "runtime_support.h"

using namespace runtime_test;

TEST_CASE("runtime: stream attributes are set, read back and copied", "[runtime][stream]") {
  cudaStream_t stream = nullptr, other = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaStreamAttrValue value{};
  REQUIRE_CUDA(cudaStreamGetAttribute(stream, cudaStreamAttributeSynchronizationPolicy, &value));
  CHECK(value.syncPolicy == cudaSyncPolicyAuto);
  value.syncPolicy = cudaSyncPolicyYield;
  REQUIRE_CUDA(cudaStreamSetAttribute(stream, cudaStreamAttributeSynchronizationPolicy, &value));
  int least = 0, greatest = 0;
  REQUIRE_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  value = cudaStreamAttrValue{};
  value.priority = greatest;
  REQUIRE_CUDA(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, &value));
  int priority = 0;
  REQUIRE_CUDA(cudaStreamGetPriority(stream, &priority));
  CHECK(priority == greatest);
  REQUIRE_CUDA(cudaStreamCopyAttributes(other, stream));
  cudaStreamAttrValue read{};
  REQUIRE_CUDA(cudaStreamGetAttribute(other, cudaStreamAttributeSynchronizationPolicy, &read));
  CHECK(read.syncPolicy == cudaSyncPolicyYield);
  REQUIRE_CUDA(cudaStreamGetAttribute(other, cudaStreamAttributePriority, &read));
  CHECK(read.priority == greatest);
  CHECK(name(cudaStreamGetAttribute(stream, cudaLaunchAttributeCooperative, &read)) == "cudaErrorInvalidValue");
  CHECK(name(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");  // recorded as the thread's last error
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaStreamDestroy(other));
}

TEST_CASE("runtime: stream ids and devices", "[runtime][stream]") {
  cudaStream_t a = nullptr, b = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&a));
  REQUIRE_CUDA(cudaStreamCreate(&b));
  unsigned long long id_a = 0, id_b = 0, id_legacy = 0, id_per_thread = 0, again = 0;
  REQUIRE_CUDA(cudaStreamGetId(a, &id_a));
  REQUIRE_CUDA(cudaStreamGetId(b, &id_b));
  REQUIRE_CUDA(cudaStreamGetId(nullptr, &id_legacy));
  REQUIRE_CUDA(cudaStreamGetId(cudaStreamPerThread, &id_per_thread));
  REQUIRE_CUDA(cudaStreamGetId(a, &again));
  CHECK(again == id_a);
  CHECK(id_a != id_b);
  CHECK(id_legacy != id_a);
  CHECK(id_legacy != id_per_thread);
  REQUIRE_CUDA(cudaStreamGetId(cudaStreamLegacy, &again));
  CHECK(again == id_legacy);
  CHECK(name(cudaStreamGetId(a, nullptr)) == "cudaErrorInvalidValue");
  int device = -1;
  REQUIRE_CUDA(cudaSetDevice(1));
  cudaStream_t on_one = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&on_one));
  REQUIRE_CUDA(cudaStreamGetDevice(on_one, &device));
  CHECK(device == 1);
  REQUIRE_CUDA(cudaStreamGetDevice(a, &device));
  CHECK(device == 0);
  REQUIRE_CUDA(cudaStreamDestroy(on_one));
  REQUIRE_CUDA(cudaSetDevice(0));
  CHECK(name(cudaStreamGetDevice(a, nullptr)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  REQUIRE_CUDA(cudaStreamDestroy(a));
  REQUIRE_CUDA(cudaStreamDestroy(b));
}

TEST_CASE("runtime: events recorded with flags complete with their stream", "[runtime][event]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t event = nullptr;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  REQUIRE_CUDA(cudaEventRecordWithFlags(event, stream, cudaEventRecordDefault));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(name(cudaEventQuery(event)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaEventSynchronize(event));
  CHECK(gate.ran());
  CHECK(name(cudaEventRecordWithFlags(event, stream, 0x8)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  // An external record outside a capture is an ordinary record.
  REQUIRE_CUDA(cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal));
  REQUIRE_CUDA(cudaEventSynchronize(event));
  REQUIRE_CUDA(cudaEventDestroy(event));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}
