// cuGetProcAddress / cuGetProcAddress_v2 of the simulated driver: versioned names, per-thread
// variants, and the documented failures.
#include "driver_support.h"

#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstring>
#include <string>

using namespace driver_test;

namespace {

// The exported function of that exact name (e.g. a _ptsz form cuda.h does not declare here).
void* exported(const char* name) {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  void* symbol = dlsym(handle, name);
  REQUIRE(symbol != nullptr);
  return symbol;
}

struct Answer {
  CUresult rc;
  void* fn;
  CUdriverProcAddressQueryResult status;
};

Answer ask(const char* name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  Answer a{CUDA_ERROR_UNKNOWN, reinterpret_cast<void*>(1), CU_GET_PROC_ADDRESS_SUCCESS};
  a.rc = cuGetProcAddress(name, &a.fn, version, flags, &a.status);
  return a;
}

void* answer(const char* name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  Answer a = ask(name, version, flags);
  INFO(name << " @ " << version);
  REQUIRE(a.rc == CUDA_SUCCESS);
  REQUIRE(a.status == CU_GET_PROC_ADDRESS_SUCCESS);
  return a.fn;
}

}  // namespace

TEST_CASE("base names resolve to the versioned entry point for the version asked", "[driver][proc]") {
  CHECK(answer("cuMemAlloc", 13000) == exported("cuMemAlloc_v2"));
  CHECK(answer("cuMemFree", 12000) == exported("cuMemFree_v2"));
  CHECK(answer("cuMemGetInfo", 3020) == exported("cuMemGetInfo_v2"));
  CHECK(answer("cuCtxCreate", 3020) == exported("cuCtxCreate_v2"));
  CHECK(answer("cuCtxCreate", 11040) == exported("cuCtxCreate_v3"));
  CHECK(answer("cuCtxCreate", 13000) == exported("cuCtxCreate_v4"));
  CHECK(answer("cuCtxSynchronize", 12090) == exported("cuCtxSynchronize"));
  CHECK(answer("cuCtxSynchronize", 13000) == exported("cuCtxSynchronize_v2"));
  CHECK(answer("cuCtxDestroy", 4000) == exported("cuCtxDestroy_v2"));
  CHECK(answer("cuDevicePrimaryCtxRelease", 10020) == exported("cuDevicePrimaryCtxRelease"));
  CHECK(answer("cuDevicePrimaryCtxRelease", 11000) == exported("cuDevicePrimaryCtxRelease_v2"));
  CHECK(answer("cuEventElapsedTime", 12000) == exported("cuEventElapsedTime"));
  CHECK(answer("cuEventElapsedTime", 12080) == exported("cuEventElapsedTime_v2"));
  CHECK(answer("cuMemAllocAsync", 11020) == exported("cuMemAllocAsync"));
  CHECK(answer("cuInit", 2000) == exported("cuInit"));
  CHECK(answer("cuStreamWaitValue32", 11000) == exported("cuStreamWaitValue32"));
  CHECK(answer("cuStreamWaitValue32", 12000) == exported("cuStreamWaitValue32_v2"));
  CHECK(answer("cuStreamBatchMemOp", 11070) == exported("cuStreamBatchMemOp_v2"));
  CHECK(answer("cuGraphAddBatchMemOpNode", 12000) == exported("cuGraphAddBatchMemOpNode"));
}

TEST_CASE("cuGetProcAddress answers for itself", "[driver][proc]") {
  CHECK(answer("cuGetProcAddress", 11030) == exported("cuGetProcAddress"));
  CHECK(answer("cuGetProcAddress", 12000) == exported("cuGetProcAddress_v2"));
  // The old four-argument form is exported too and answers the same way.
  using OldForm = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto old_form = reinterpret_cast<OldForm>(exported("cuGetProcAddress"));
  void* fn = nullptr;
  CHECK(old_form("cuMemAlloc", &fn, 12000, 0) == CUDA_SUCCESS);
  CHECK(fn == exported("cuMemAlloc_v2"));
  CHECK(old_form("cuNoSuchEntryPoint", &fn, 12000, 0) == CUDA_ERROR_NOT_FOUND);
  CHECK(fn == nullptr);
}

TEST_CASE("per-thread default stream flags select the _ptsz/_ptds forms", "[driver][proc]") {
  const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  CHECK(answer("cuStreamSynchronize", 12000, per_thread) == exported("cuStreamSynchronize_ptsz"));
  CHECK(answer("cuStreamSynchronize", 12000, legacy) == exported("cuStreamSynchronize"));
  CHECK(answer("cuStreamSynchronize", 12000) == exported("cuStreamSynchronize"));
  CHECK(answer("cuMemcpyHtoD", 12000, per_thread) == exported("cuMemcpyHtoD_v2_ptds"));
  CHECK(answer("cuMemcpyHtoDAsync", 12000, per_thread) == exported("cuMemcpyHtoDAsync_v2_ptsz"));
  CHECK(answer("cuMemsetD8", 12000, per_thread) == exported("cuMemsetD8_v2_ptds"));
  CHECK(answer("cuMemAllocAsync", 12000, per_thread) == exported("cuMemAllocAsync_ptsz"));
  CHECK(answer("cuMemFreeAsync", 12000, per_thread) == exported("cuMemFreeAsync_ptsz"));
  CHECK(answer("cuMemAllocFromPoolAsync", 12000, per_thread) == exported("cuMemAllocFromPoolAsync_ptsz"));
  CHECK(answer("cuLaunchHostFunc", 12000, per_thread) == exported("cuLaunchHostFunc_ptsz"));
  CHECK(answer("cuEventRecord", 12000, per_thread) == exported("cuEventRecord_ptsz"));
  // Functions without a per-thread form answer with the ordinary one.
  CHECK(answer("cuMemAlloc", 12000, per_thread) == exported("cuMemAlloc_v2"));
  // Per-thread forms exist from CUDA 7.0 on.
  CHECK(answer("cuStreamSynchronize", 6050, per_thread) == exported("cuStreamSynchronize"));
}

TEST_CASE("unknown names and too-old versions fail as documented", "[driver][proc]") {
  Answer unknown = ask("cuNoSuchEntryPoint", 13000);
  CHECK(unknown.rc == CUDA_ERROR_NOT_FOUND);
  CHECK(unknown.status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(unknown.fn == nullptr);
  Answer versioned = ask("cuMemAlloc_v2", 13000);  // the driver answers base names only
  CHECK(versioned.rc == CUDA_ERROR_NOT_FOUND);
  Answer too_old = ask("cuMemAllocAsync", 11010);
  CHECK(too_old.rc == CUDA_ERROR_NOT_FOUND);
  CHECK(too_old.status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(too_old.fn == nullptr);
  // The 32-bit v1 ABI is not simulated: reported as not found rather than a wrong signature.
  Answer v1 = ask("cuMemAlloc", 3010);
  CHECK(v1.rc == CUDA_ERROR_NOT_FOUND);
  CHECK(v1.status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  void* fn = nullptr;
  CHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 4, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetProcAddress(nullptr, &fn, 12000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetProcAddress("cuMemAlloc", nullptr, 12000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, nullptr) == CUDA_SUCCESS);  // status optional
}

TEST_CASE("answers work before cuInit and are callable", "[driver][proc]") {
  int rc = in_child([] {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    CHILD_CHECK(cuGetProcAddress("cuInit", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(reinterpret_cast<CUresult (*)(unsigned)>(fn)(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuDevicePrimaryCtxRetain", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    CHILD_CHECK(reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(fn)(&ctx, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CUdeviceptr ptr = 0;
    CHILD_CHECK(reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(fn)(&ptr, 4096) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(reinterpret_cast<CUresult (*)(CUcontext)>(fn)(nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuMemFree", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(reinterpret_cast<CUresult (*)(CUdeviceptr)>(fn)(ptr) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("stream capture and graph entry points", "[driver][proc][graphs]") {
  const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  CHECK(answer("cuStreamBeginCapture", 10010) == exported("cuStreamBeginCapture_v2"));
  CHECK(answer("cuStreamBeginCapture", 13000, per_thread) == exported("cuStreamBeginCapture_v2_ptsz"));
  // The one-argument form of CUDA 10.0.
  CHECK(answer("cuStreamBeginCapture", 10000) == exported("cuStreamBeginCapture"));
  CHECK(answer("cuStreamBeginCaptureToGraph", 12030) == exported("cuStreamBeginCaptureToGraph"));
  CHECK(answer("cuStreamUpdateCaptureDependencies", 12030, per_thread) ==
        exported("cuStreamUpdateCaptureDependencies_v2_ptsz"));
  CHECK(answer("cuGraphNodeGetDependentNodes", 12030) == exported("cuGraphNodeGetDependentNodes_v2"));
  CHECK(answer("cuUserObjectCreate", 11030) == exported("cuUserObjectCreate"));
  CHECK(answer("cuStreamEndCapture", 10000) == exported("cuStreamEndCapture"));
  CHECK(answer("cuStreamEndCapture", 13000, per_thread) == exported("cuStreamEndCapture_ptsz"));
  CHECK(answer("cuStreamIsCapturing", 13000, per_thread) == exported("cuStreamIsCapturing_ptsz"));
  CHECK(answer("cuStreamGetCaptureInfo", 10010) == exported("cuStreamGetCaptureInfo"));
  CHECK(answer("cuStreamGetCaptureInfo", 11030) == exported("cuStreamGetCaptureInfo_v2"));
  CHECK(answer("cuStreamGetCaptureInfo", 12030) == exported("cuStreamGetCaptureInfo_v3"));
  CHECK(answer("cuStreamGetCaptureInfo", 13000, per_thread) == exported("cuStreamGetCaptureInfo_v3_ptsz"));
  CHECK(answer("cuThreadExchangeStreamCaptureMode", 10010) == exported("cuThreadExchangeStreamCaptureMode"));
  CHECK(answer("cuGraphDestroy", 10000) == exported("cuGraphDestroy"));
  CHECK(ask("cuGraphDestroy", 9020).status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // Graph memory nodes appeared in 11.4.
  for (const char* name : {"cuGraphAddMemAllocNode", "cuGraphAddMemFreeNode", "cuGraphMemAllocNodeGetParams",
                           "cuGraphMemFreeNodeGetParams"}) {
    INFO(name);
    CHECK(answer(name, 11040) == exported(name));
    CHECK(ask(name, 11030).status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  }
  CHECK(answer("cuGraphClone", 10000) == exported("cuGraphClone"));
  CHECK(answer("cuGraphDestroyNode", 10000) == exported("cuGraphDestroyNode"));
  CHECK(answer("cuGraphAddChildGraphNode", 10000) == exported("cuGraphAddChildGraphNode"));
  CHECK(answer("cuGraphChildGraphNodeGetGraph", 10000) == exported("cuGraphChildGraphNodeGetGraph"));
  CHECK(answer("cuGraphHostNodeGetParams", 10000) == exported("cuGraphHostNodeGetParams"));
  CHECK(answer("cuGraphHostNodeSetParams", 10000) == exported("cuGraphHostNodeSetParams"));
  // The edge calls take edge data from 12.3.
  for (const std::string name : {"cuGraphAddDependencies", "cuGraphRemoveDependencies", "cuGraphGetEdges"}) {
    INFO(name);
    CHECK(answer(name.c_str(), 12020) == exported(name.c_str()));
    CHECK(answer(name.c_str(), 12030) == exported((name + "_v2").c_str()));
  }
}

TEST_CASE("CUDASIM_DRIVER_VERSION makes an older driver", "[driver][proc][config]") {
  int rc = in_child([] {
    setenv("CUDASIM_DRIVER_VERSION", "12080", 1);
    int version = 0;
    CHILD_CHECK(cuDriverGetVersion(&version) == CUDA_SUCCESS && version == 12080);  // before cuInit too
    // No answer is newer than the driver, whatever version is asked for.
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    CHILD_CHECK(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuCtxSynchronize"));
    CHILD_CHECK(cuGetProcAddress("cuCtxGetDevice", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuCtxGetDevice"));
    CHILD_CHECK(cuGetProcAddress("cuEventElapsedTime", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuEventElapsedTime_v2"));  // 12.8 has it
    CHILD_CHECK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuCtxCreate_v4"));
    CHILD_CHECK(start_primary_context());
    CHILD_CHECK(cuDriverGetVersion(&version) == CUDA_SUCCESS && version == 12080);
    // The 13.0 entry points are exported (the simulator is one library) but not supported.
    CHILD_CHECK(cuCtxSynchronize_v2(nullptr) == CUDA_ERROR_NOT_SUPPORTED);
    CUdevice device = -1;
    CHILD_CHECK(cuCtxGetDevice_v2(&device, nullptr) == CUDA_ERROR_NOT_SUPPORTED);
    CHILD_CHECK(reinterpret_cast<CUresult (*)()>(exported("cuCtxSynchronize"))() == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
  rc = in_child([] {
    setenv("CUDASIM_DRIVER_VERSION", "12000", 1);
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    CHILD_CHECK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuCtxCreate_v3"));
    CHILD_CHECK(cuGetProcAddress("cuEventElapsedTime", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuEventElapsedTime"));
    CHILD_CHECK(cuGetProcAddress("cuStreamGetCaptureInfo", &fn, 13000, 0, &status) == CUDA_SUCCESS);
    CHILD_CHECK(fn == exported("cuStreamGetCaptureInfo_v2"));
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    CHILD_CHECK(cuCtxCreate_v4(&ctx, nullptr, 0, 0) == CUDA_ERROR_NOT_SUPPORTED);  // new in 12.5
    return 0;
  });
  REQUIRE(rc == 0);
  rc = in_child([] {
    unsetenv("CUDASIM_DRIVER_VERSION");
    int version = 0;
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDriverGetVersion(&version) == CUDA_SUCCESS && version == 13000);  // the default
    return 0;
  });
  REQUIRE(rc == 0);
  // Out of range or not a release number: refused like any malformed variable.
  for (const char* value : {"11080", "13010", "12085", "12.8", ""}) {
    INFO(value);
    rc = in_child([value] {
      setenv("CUDASIM_DRIVER_VERSION", value, 1);
      freopen("/dev/null", "w", stderr);
      CHILD_CHECK(cuInit(0) == CUDA_ERROR_INVALID_VALUE);
      return 0;
    });
    CHECK(rc == 0);
  }
}
