// Managed memory (cuMemAllocManaged). Host memory here, as managed memory is valid on the host and
// on every device; it belongs to the current context (freed with it, or by cuMemFree) and is a live
// AllocKind::Managed allocation for copies, sets and pointer queries.
//
// It is charged to no device: the devices report CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
// for which cuda.h documents that managed memory "may not be populated when this API returns and
// instead may be populated on access", and device memory may be oversubscribed by it (evicted to
// host memory at any time). Nothing runs on a simulated device, so no page ever migrates there:
// cuMemGetInfo does not change and CUDASIM_FAIL_ALLOC_AFTER does not count it.
#include "contexts.h"
#include "state.h"

#include <algorithm>

using namespace cudasim;

CUDASIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_unsafe_call(st); rc != CUDA_SUCCESS) return rc;  // like cuMemAlloc during capture
  Mapping mapping = map_device_memory(bytesize);
  if (mapping.addr == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<std::uintptr_t>(mapping.addr);
  st.allocations[base] =
      Allocation{base, bytesize, 0, ctx->device, ctx, AllocKind::Managed, nullptr, ++st.last_buffer_id};
  st.mappings[base] = mapping;
  DeviceStats& stats = st.device(ctx->device).stats;
  stats.managed_allocs++;
  stats.managed_bytes += bytesize;
  stats.managed_peak_bytes = std::max(stats.managed_peak_bytes, stats.managed_bytes);
  *dptr = base;
  return CUDA_SUCCESS;
}
