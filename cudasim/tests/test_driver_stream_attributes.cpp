// Stream attributes, numbers, devices and contexts through the driver API: cuStreamGetAttribute,
// cuStreamSetAttribute, cuStreamCopyAttributes, cuStreamGetId, cuStreamGetDevice, cuStreamGetCtx_v2
// (and their _ptsz forms), with the documented error codes.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <set>
#include <thread>

using namespace driver_test;

// The per-thread forms, which cuda.h declares only under __CUDA_API_VERSION_INTERNAL or
// CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" CUresult cuStreamGetId_ptsz(CUstream, unsigned long long*);
extern "C" CUresult cuStreamGetAttribute_ptsz(CUstream, CUstreamAttrID, CUstreamAttrValue*);

namespace {

unsigned long long id_of(CUstream stream) {
  unsigned long long id = 0;
  REQUIRE(cuStreamGetId(stream, &id) == CUDA_SUCCESS);
  return id;
}

}  // namespace

TEST_CASE("stream attributes are stored, checked and answered back", "[driver][streams][attributes]") {
  primary_context();
  CUstream stream = non_blocking_stream();
  CUstreamAttrValue value{};
  SECTION("defaults") {
    REQUIRE(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value) == CUDA_SUCCESS);
    CHECK(value.syncPolicy == CU_SYNC_POLICY_AUTO);
    REQUIRE(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value) == CUDA_SUCCESS);
    CHECK(value.accessPolicyWindow.num_bytes == 0);
    REQUIRE(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, &value) == CUDA_SUCCESS);
    CHECK(value.memSyncDomainMap.default_ == 0);
    CHECK(value.memSyncDomainMap.remote == 1);
  }
  SECTION("set, read back, and the priority shared with cuStreamGetPriority") {
    int least = 0, greatest = 0;
    REQUIRE(cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS);
    value = CUstreamAttrValue{};
    value.priority = greatest - 100;  // clamped
    REQUIRE(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, &value) == CUDA_SUCCESS);
    int priority = 0;
    REQUIRE(cuStreamGetPriority(stream, &priority) == CUDA_SUCCESS);
    CHECK(priority == greatest);
    REQUIRE(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, &value) == CUDA_SUCCESS);
    CHECK(value.priority == greatest);

    value = CUstreamAttrValue{};
    value.accessPolicyWindow = CUaccessPolicyWindow{reinterpret_cast<void*>(0x1000), 4096, 0.5f,
                                                    CU_ACCESS_PROPERTY_PERSISTING, CU_ACCESS_PROPERTY_STREAMING};
    REQUIRE(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value) == CUDA_SUCCESS);
    value = CUstreamAttrValue{};
    value.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
    REQUIRE(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value) == CUDA_SUCCESS);
    CUstreamAttrValue read{};
    REQUIRE(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &read) == CUDA_SUCCESS);
    CHECK(read.accessPolicyWindow.num_bytes == 4096);
    CHECK(read.accessPolicyWindow.hitRatio == 0.5f);
    REQUIRE(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &read) == CUDA_SUCCESS);
    CHECK(read.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC);

    // Copied to another stream of the context, priority included.
    CUstream other = non_blocking_stream();
    REQUIRE(cuStreamCopyAttributes(other, stream) == CUDA_SUCCESS);
    REQUIRE(cuStreamGetAttribute(other, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &read) == CUDA_SUCCESS);
    CHECK(read.accessPolicyWindow.num_bytes == 4096);
    REQUIRE(cuStreamGetPriority(other, &priority) == CUDA_SUCCESS);
    CHECK(priority == greatest);
    cuStreamDestroy(other);
    // The default streams carry attributes too.
    REQUIRE(cuStreamSetAttribute(CU_STREAM_LEGACY, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value) == CUDA_SUCCESS);
    REQUIRE(cuStreamGetAttribute(nullptr, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &read) == CUDA_SUCCESS);
    CHECK(read.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC);
  }
  SECTION("errors") {
    CHECK(cuStreamGetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, nullptr) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_PRIORITY, nullptr) == CUDA_ERROR_INVALID_VALUE);
    // Launch-only and graph-only attributes are not stream attributes.
    CHECK(cuStreamGetAttribute(stream, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &value) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSetAttribute(stream, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &value) == CUDA_ERROR_INVALID_VALUE);
    value = CUstreamAttrValue{};
    value.syncPolicy = static_cast<CUsynchronizationPolicy>(9);
    CHECK(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value) == CUDA_ERROR_INVALID_VALUE);
    value = CUstreamAttrValue{};
    value.accessPolicyWindow.hitRatio = 1.5f;
    CHECK(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value) == CUDA_ERROR_INVALID_VALUE);
    value = CUstreamAttrValue{};
    value.memSyncDomain = static_cast<CUlaunchMemSyncDomain>(5);
    CHECK(cuStreamSetAttribute(stream, CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN, &value) == CUDA_ERROR_INVALID_VALUE);
    CUstream bogus = reinterpret_cast<CUstream>(&value);
    CHECK(cuStreamGetAttribute(bogus, CU_STREAM_ATTRIBUTE_PRIORITY, &value) == CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuStreamCopyAttributes(stream, bogus) == CUDA_ERROR_INVALID_HANDLE);
    // Streams of different contexts.
    CUcontext second = nullptr;
    REQUIRE(cuDevicePrimaryCtxRetain(&second, 1) == CUDA_SUCCESS);
    REQUIRE(cuCtxSetCurrent(second) == CUDA_SUCCESS);
    CUstream elsewhere = non_blocking_stream();
    CHECK(cuStreamCopyAttributes(stream, elsewhere) == CUDA_ERROR_INVALID_VALUE);
    cuStreamDestroy(elsewhere);
    primary_context();
    cuDevicePrimaryCtxRelease(1);
  }
  cuStreamDestroy(stream);
}

TEST_CASE("stream ids are unique and stable; devices and contexts of streams", "[driver][streams]") {
  CUcontext ctx = primary_context();
  CUstream a = non_blocking_stream(), b = non_blocking_stream();
  const unsigned long long id_a = id_of(a);
  CHECK(id_of(a) == id_a);
  std::set<unsigned long long> ids = {id_a, id_of(b), id_of(nullptr), id_of(CU_STREAM_PER_THREAD)};
  CHECK(ids.size() == 4);
  CHECK(id_of(CU_STREAM_LEGACY) == id_of(nullptr));
  unsigned long long per_thread = 0;
  REQUIRE(cuStreamGetId_ptsz(nullptr, &per_thread) == CUDA_SUCCESS);  // NULL is the per-thread stream here
  CHECK(per_thread == id_of(CU_STREAM_PER_THREAD));
  unsigned long long other_thread = 0;
  std::thread([&] {
    cuCtxSetCurrent(ctx);
    cuStreamGetId(CU_STREAM_PER_THREAD, &other_thread);
  }).join();
  CHECK(other_thread != 0);
  CHECK(other_thread != per_thread);
  // A destroyed stream's number is not handed out again.
  cuStreamDestroy(b);
  CUstream c = non_blocking_stream();
  CHECK(ids.count(id_of(c)) == 0);
  CHECK(cuStreamGetId(a, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamGetId(reinterpret_cast<CUstream>(&ids), &per_thread) == CUDA_ERROR_INVALID_HANDLE);

  CUdevice device = -1;
  REQUIRE(cuStreamGetDevice(a, &device) == CUDA_SUCCESS);
  CHECK(device == 0);
  CHECK(cuStreamGetDevice(a, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUcontext second = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&second, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(second) == CUDA_SUCCESS);
  CUstream on_second = non_blocking_stream();
  REQUIRE(cuStreamGetDevice(on_second, &device) == CUDA_SUCCESS);
  CHECK(device == 1);
  REQUIRE(cuStreamGetDevice(nullptr, &device) == CUDA_SUCCESS);  // the current context's
  CHECK(device == 1);
  CUcontext found = nullptr;
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(&found);
  REQUIRE(cuStreamGetCtx_v2(a, &found, &green) == CUDA_SUCCESS);
  CHECK(found == ctx);
  CHECK(green == nullptr);
  REQUIRE(cuStreamGetCtx_v2(CU_STREAM_LEGACY, &found, &green) == CUDA_SUCCESS);
  CHECK(found == second);
  CHECK(cuStreamGetCtx_v2(a, nullptr, &green) == CUDA_ERROR_INVALID_VALUE);
  cuStreamDestroy(on_second);
  primary_context();
  cuDevicePrimaryCtxRelease(1);
  // With no current context, a default stream names none.
  REQUIRE(cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
  CHECK(cuStreamGetCtx_v2(nullptr, &found, &green) == CUDA_ERROR_INVALID_CONTEXT);
  primary_context();
  cuStreamDestroy(a);
  cuStreamDestroy(c);
}

TEST_CASE("an older simulated driver has none of the newer stream and graph entry points", "[driver][streams][config]") {
  const int status = in_child([] {
    setenv("CUDASIM_DRIVER_VERSION", "12020", 1);
    CHILD_CHECK(start_primary_context());
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    CUgreenCtx green = nullptr;
    CHILD_CHECK(cuStreamGetDevice(nullptr, &device) == CUDA_ERROR_NOT_SUPPORTED);
    CHILD_CHECK(cuStreamGetCtx_v2(nullptr, &ctx, &green) == CUDA_ERROR_NOT_SUPPORTED);
    CUgraph graph = nullptr;
    CHILD_CHECK(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS);
    CUgraphConditionalHandle handle = 0;
    CHILD_CHECK(cuGraphConditionalHandleCreate(&handle, graph, ctx, 0, 0) == CUDA_ERROR_NOT_SUPPORTED);
    CUstream stream = non_blocking_stream();
    CHILD_CHECK(cuStreamBeginCaptureToGraph(stream, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
                CUDA_ERROR_NOT_SUPPORTED);
    unsigned long long id = 0;
    CHILD_CHECK(cuStreamGetId(stream, &id) == CUDA_SUCCESS);  // 12.0
    return 0;
  });
  CHECK(status == 0);
}
