// The simulated driver's context calls beyond creation: flags set and read back, the fixed shared
// memory bank size, the deprecated usage count (cuCtxAttach / cuCtxDetach, the context destroyed at
// the last detach only), the persisting L2 reset and the deprecated profiler initialisation, with the
// documented error codes.
#include "driver_support.h"

#include <catch2/catch.hpp>
#include <cudaProfiler.h>

using namespace driver_test;

// Several of these calls are deprecated, and still exported: tested as such.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

// Runs `body` with no context current on the calling thread, then makes the primary context current.
template <typename Body>
void with_no_context(Body body) {
  CUcontext popped = nullptr;
  while (cuCtxPopCurrent(&popped) == CUDA_SUCCESS) {
  }
  body();
  primary_context();
}

// A new context on device 0, current on the calling thread.
CUcontext created_context(unsigned flags = 0) {
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxCreate(&ctx, nullptr, flags, 0) == CUDA_SUCCESS);
  return ctx;
}

unsigned current_flags() {
  unsigned flags = 0;
  REQUIRE(cuCtxGetFlags(&flags) == CUDA_SUCCESS);
  return flags;
}

}  // namespace

TEST_CASE("cuCtxSetFlags changes the current context's flags, as cuCtxGetFlags reads them", "[driver][contexts]") {
  primary_context();
  CUcontext ctx = created_context(CU_CTX_LMEM_RESIZE_TO_MAX);
  CHECK(current_flags() == CU_CTX_LMEM_RESIZE_TO_MAX);
  REQUIRE(cuCtxSetFlags(CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_SYNC_MEMOPS) == CUDA_SUCCESS);
  CHECK(current_flags() == (CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_SYNC_MEMOPS));
  REQUIRE(cuCtxSetFlags(CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SCHED_SPIN) == CUDA_SUCCESS);  // overwrites
  CHECK(current_flags() == (CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SCHED_SPIN));
  // Two scheduling policies, unknown bits, or a flag fixed at creation changed: refused, nothing changes.
  CHECK(cuCtxSetFlags(CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxSetFlags(CU_CTX_LMEM_RESIZE_TO_MAX | 0x1000) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxSetFlags(CU_CTX_SCHED_SPIN) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxSetFlags(CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE) == CUDA_ERROR_INVALID_VALUE);
  CHECK(current_flags() == (CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SCHED_SPIN));
  REQUIRE(cuCtxDestroy(ctx) == CUDA_SUCCESS);

  // On a primary context, cuDevicePrimaryCtxGetState reports the new flags too.
  primary_context();
  const unsigned before = current_flags();
  REQUIRE(cuCtxSetFlags(CU_CTX_SCHED_YIELD) == CUDA_SUCCESS);
  unsigned state_flags = 0;
  int active = 0;
  REQUIRE(cuDevicePrimaryCtxGetState(0, &state_flags, &active) == CUDA_SUCCESS);
  CHECK(state_flags == CU_CTX_SCHED_YIELD);
  REQUIRE(cuCtxSetFlags(before) == CUDA_SUCCESS);

  with_no_context([] { CHECK(cuCtxSetFlags(0) == CUDA_ERROR_INVALID_CONTEXT); });
}

TEST_CASE("shared memory banks are four bytes, fixed; valid settings are accepted", "[driver][contexts]") {
  primary_context();
  CUsharedconfig config = CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE;
  REQUIRE(cuCtxGetSharedMemConfig(&config) == CUDA_SUCCESS);
  CHECK(config == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
  CHECK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) == CUDA_SUCCESS);
  CHECK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE) == CUDA_SUCCESS);
  REQUIRE(cuCtxGetSharedMemConfig(&config) == CUDA_SUCCESS);
  CHECK(config == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);  // the hardware's, whatever was set
  CHECK(cuCtxSetSharedMemConfig(static_cast<CUsharedconfig>(3)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxGetSharedMemConfig(nullptr) == CUDA_ERROR_INVALID_VALUE);
  with_no_context([&config] {
    CHECK(cuCtxGetSharedMemConfig(&config) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE) == CUDA_ERROR_INVALID_CONTEXT);
  });
}

TEST_CASE("cuCtxAttach counts uses; the context is destroyed at the last cuCtxDetach", "[driver][contexts]") {
  primary_context();
  CUcontext ctx = created_context();
  CUcontext attached = nullptr;
  REQUIRE(cuCtxAttach(&attached, 0) == CUDA_SUCCESS);
  CHECK(attached == ctx);
  REQUIRE(cuCtxAttach(&attached, 0) == CUDA_SUCCESS);  // usage count 3
  CUdeviceptr memory = 0;
  REQUIRE(cuMemAlloc(&memory, 4096) == CUDA_SUCCESS);
  CHECK(cuCtxAttach(&attached, 1) == CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  CHECK(cuCtxAttach(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuCtxDetach(ctx) == CUDA_SUCCESS);
  REQUIRE(cuCtxDetach(ctx) == CUDA_SUCCESS);
  unsigned long long id = 0;
  CHECK(cuCtxGetId(ctx, &id) == CUDA_SUCCESS);  // still alive, with its memory
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, memory) == CUDA_SUCCESS);
  CUcontext current = nullptr;
  REQUIRE(cuCtxGetCurrent(&current) == CUDA_SUCCESS);
  CHECK(current == ctx);

  // Detaching needs the context current to the calling thread.
  CUcontext primary = primary_context();
  CHECK(cuCtxDetach(ctx) == CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  REQUIRE(cuCtxDetach(ctx) == CUDA_SUCCESS);  // the last use: destroyed, and no longer current
  CHECK(cuCtxGetId(ctx, &id) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(cuCtxDetach(ctx) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(cuCtxDetach(nullptr) == CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cuCtxGetCurrent(&current) == CUDA_SUCCESS);
  CHECK(current != ctx);

  // cuCtxDestroy ends a context whatever its usage count.
  CUcontext other = created_context();
  REQUIRE(cuCtxAttach(&attached, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxDestroy(other) == CUDA_SUCCESS);
  CHECK(cuCtxGetId(other, &id) == CUDA_ERROR_CONTEXT_IS_DESTROYED);

  with_no_context([&attached] { CHECK(cuCtxAttach(&attached, 0) == CUDA_ERROR_INVALID_CONTEXT); });
  CHECK(primary_context() == primary);
}

TEST_CASE("attaching to a primary context retains it; detaching releases it", "[driver][contexts]") {
  CUcontext primary = primary_context();
  CUcontext attached = nullptr;
  REQUIRE(cuCtxAttach(&attached, 0) == CUDA_SUCCESS);
  CHECK(attached == primary);
  REQUIRE(cuCtxDetach(primary) == CUDA_SUCCESS);  // back to the retain primary_context() holds
  unsigned flags = 0;
  int active = 0;
  REQUIRE(cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS);
  CHECK(active == 1);
}

TEST_CASE("resetting persisting L2 lines needs a current context and changes nothing", "[driver][contexts]") {
  primary_context();
  REQUIRE(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 1 << 20) == CUDA_SUCCESS);
  CHECK(cuCtxResetPersistingL2Cache() == CUDA_SUCCESS);
  size_t limit = 0;
  REQUIRE(cuCtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == CUDA_SUCCESS);
  CHECK(limit == (1 << 20));  // the set-aside size is a limit, not a persisting line
  with_no_context([] { CHECK(cuCtxResetPersistingL2Cache() == CUDA_ERROR_INVALID_CONTEXT); });
}

TEST_CASE("no context has an execution affinity: the documented error", "[driver][contexts]") {
  primary_context();
  int supported = 1;
  REQUIRE(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0) == CUDA_SUCCESS);
  REQUIRE(supported == 0);
  CUexecAffinityParam param{};
  param.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  param.param.smCount.val = 77;
  CHECK(cuCtxGetExecAffinity(&param, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  CHECK(param.param.smCount.val == 77);  // untouched
  CHECK(cuCtxGetExecAffinity(nullptr, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxGetExecAffinity(&param, CU_EXEC_AFFINITY_TYPE_MAX) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxGetExecAffinity(&param, static_cast<CUexecAffinityType>(-1)) == CUDA_ERROR_INVALID_VALUE);
  // A context created with an affinity has none either: context creation ignores it.
  CUctxCreateParams create{};
  create.execAffinityParams = &param;
  create.numExecAffinityParams = 1;
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxCreate(&ctx, &create, 0, 0) == CUDA_SUCCESS);
  CHECK(cuCtxGetExecAffinity(&param, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  REQUIRE(cuCtxDestroy(ctx) == CUDA_SUCCESS);
  primary_context();
  with_no_context([&param] {
    CHECK(cuCtxGetExecAffinity(&param, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_ERROR_INVALID_CONTEXT);
  });
}

TEST_CASE("cuProfilerInitialize is not supported, as documented since CUDA 12.0", "[driver][profiler]") {
  primary_context();
  CHECK(cuProfilerInitialize("config", "output", CU_OUT_CSV) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuProfilerInitialize(nullptr, nullptr, CU_OUT_KEY_VALUE_PAIR) == CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("cuGetProcAddress answers the context calls", "[driver][contexts]") {
  primary_context();
  for (const char* name : {"cuCtxSetFlags", "cuCtxAttach", "cuCtxDetach", "cuCtxGetSharedMemConfig",
                           "cuCtxSetSharedMemConfig", "cuCtxResetPersistingL2Cache", "cuProfilerInitialize",
                           "cuCtxGetExecAffinity"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    CHECK(cuGetProcAddress_v2(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
    CHECK(fn != nullptr);
  }
}
