// Per-context settings that change no simulated behaviour but that programs set and read back:
// limits (cuCtxSetLimit), the cache preference (cuCtxSetCacheConfig), the context flags
// (cuCtxSetFlags), the shared memory bank size, the stream priority range, the persisting L2 lines
// and the profiler switches (no profiler runs here, so starting and stopping it do nothing); the
// execution-affinity query, which no simulated context supports.
#include "contexts.h"
#include "device_limits.h"
#include "state.h"

#include <algorithm>

using namespace cudasim;

namespace {

// The stream priority range of the simulated devices, as current GPUs report it: lower is higher.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

// The value cuCtxSetLimit accepts for `limit`, clamped or rounded as the driver documents, or
// CUDA_ERROR_INVALID_VALUE. Bounds are those of the simulated device.
CUresult accepted_limit(CUlimit limit, std::size_t value, std::size_t* out) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
    case CU_LIMIT_SHMEM_SIZE:
    case CU_LIMIT_CIG_ENABLED:
    case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED:
      *out = value;
      return CUDA_SUCCESS;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:  // device-side synchronisation is gone from compute capability 9.0
      return CUDA_ERROR_UNSUPPORTED_LIMIT;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:  // a hint: 0 to 128 bytes, a power of two from 32
      if (value > 128) return CUDA_ERROR_INVALID_VALUE;
      *out = value < 32 ? 0 : value < 64 ? 32 : value < 128 ? 64 : 128;
      return CUDA_SUCCESS;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:  // at most CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE
      *out = std::min<std::size_t>(value, kMaxPersistingL2Bytes);
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// What cuCtxSetFlags may change: the scheduling policy (one of them), CU_CTX_SYNC_MEMOPS and the
// deprecated CU_CTX_MAP_HOST (every context behaves as if it were set). The other flags are fixed
// when the context is made: they may be passed as they are, not changed.
constexpr unsigned kSettableContextFlags = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_SYNC_MEMOPS;

bool valid_schedule(unsigned flags) {
  const unsigned schedule = flags & CU_CTX_SCHED_MASK;
  return schedule == CU_CTX_SCHED_AUTO || schedule == CU_CTX_SCHED_SPIN || schedule == CU_CTX_SCHED_YIELD ||
         schedule == CU_CTX_SCHED_BLOCKING_SYNC;
}

CUresult current(Locked& l, CUctx_st** ctx) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return current_context(l.st, ctx);
}

// A query of the current context: *out = read(context); a NULL output is CUDA_ERROR_INVALID_VALUE.
template <typename T, typename Read>
CUresult query_current(T* out, Read read) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  *out = read(*ctx);
  return CUDA_SUCCESS;
}

}  // namespace

namespace cudasim {

void reset_context_settings(CUctx_st* ctx) {
  ctx->limits = {};
  ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
  ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1u << 20;
  ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8u << 20;
  ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
  ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
  ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  std::size_t accepted = 0;
  if (CUresult rc = accepted_limit(limit, value, &accepted); rc != CUDA_SUCCESS) return rc;
  ctx->limits[static_cast<std::size_t>(limit)] = accepted;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  std::size_t ignored = 0;
  if (CUresult rc = accepted_limit(limit, 0, &ignored); rc != CUDA_SUCCESS) return rc;
  *pvalue = ctx->limits[static_cast<std::size_t>(limit)];
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  ctx->cache_config = config;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  return query_current(pconfig, [](const CUctx_st& ctx) { return ctx.cache_config; });
}

CUDASIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (leastPriority != nullptr) *leastPriority = kLeastPriority;  // either may be NULL, as documented
  if (greatestPriority != nullptr) *greatestPriority = kGreatestPriority;
  return CUDA_SUCCESS;
}

namespace cudasim {

int clamp_stream_priority(int priority) {
  return std::clamp(priority, kGreatestPriority, kLeastPriority);
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuProfilerStart() {
  Locked l;
  CUctx_st* ctx = nullptr;
  return current(l, &ctx);  // nothing to start: success wherever the driver would start one
}

CUDASIM_EXPORT CUresult cuProfilerStop() {
  Locked l;
  CUctx_st* ctx = nullptr;
  return current(l, &ctx);
}

// Starting with CUDA 12.0 this always fails, as cudaProfiler.h documents: there is nothing to set up.
CUDASIM_EXPORT CUresult cuProfilerInitialize(const char*, const char*, CUoutput_mode) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUDASIM_EXPORT CUresult cuCtxSetFlags(unsigned int flags) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0 || !valid_schedule(flags) ||
      (flags & ~kSettableContextFlags) != (ctx->flags & ~kSettableContextFlags))
    return CUDA_ERROR_INVALID_VALUE;
  ctx->flags = flags;  // cuCtxGetFlags reads it back
  if (ctx->primary) l.st.device(ctx->device).primary_flags = flags;  // and cuDevicePrimaryCtxGetState
  return CUDA_SUCCESS;
}

// Shared memory banks are four bytes wide on every simulated device and cannot be changed: as
// documented for such devices, a valid setting is accepted and does nothing, and the query answers
// the fixed size (the runtime's cudaDeviceGetSharedMemConfig answers the same).
CUDASIM_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig* pConfig) {
  return query_current(pConfig, [](const CUctx_st&) { return CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE; });
}

CUDASIM_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (config != CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE && config != CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE &&
      config != CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// No device code runs, so no cache line is ever persisting: resetting them is a valid no-op in a
// current context.
CUDASIM_EXPORT CUresult cuCtxResetPersistingL2Cache() {
  Locked l;
  CUctx_st* ctx = nullptr;
  return current(l, &ctx);
}

// No simulated device supports execution affinity (cuDeviceGetExecAffinitySupport reports 0 for
// every type, and cuCtxCreate_v3/_v4 ignore affinity parameters), so no context has an affinity to
// report: a valid query is CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY.
CUDASIM_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam* pExecAffinity, CUexecAffinityType type) {
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  if (pExecAffinity == nullptr || type < 0 || type >= CU_EXEC_AFFINITY_TYPE_MAX) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
}
