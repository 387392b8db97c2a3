// Per-context settings that change no simulated behaviour but that programs set and read back:
// limits (cuCtxSetLimit), the cache preference (cuCtxSetCacheConfig), the stream priority range and
// the profiler switches (no profiler runs here, so starting and stopping it do nothing).
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

CUresult current(Locked& l, CUctx_st** ctx) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return current_context(l.st, ctx);
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
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current(l, &ctx); rc != CUDA_SUCCESS) return rc;
  *pconfig = ctx->cache_config;
  return CUDA_SUCCESS;
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
