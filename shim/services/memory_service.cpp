// The memory service: routes each hooked driver call to the manager of the right context, or to the
// real driver when the shim is inert or the call is not the shim's business.
#include "services/memory_service.h"

#include <algorithm>
#include <optional>

#include "exports/export_table.h"
#include "budget/reclaim_thread.h"
#include "context/capture_state.h"
#include "context/context_sync.h"
#include "managers/context_registry.h"
#include "managers/memory_manager.h"
#include "context/peer_access.h"
#include "policy/process_policy.h"
#include "driver/real_driver.h"

namespace gpumem::shim {
namespace {

ContextRegistry& registry() { return ContextRegistry::instance(); }

// The manager responsible for freeing `ptr`: its owner in any context, else the current context's
// manager (which hands foreign pointers to the driver and counts them), else none.
MemoryManager* manager_for_free(CUdeviceptr ptr) {
  MemoryManager* current = registry().current(false);
  if (current != nullptr && current->owns(ptr)) return current;
  if (MemoryManager* owner = registry().owner_of(ptr)) return owner;
  return current;
}

// A live block a manager handed out, where pointer queries must describe the block rather than what
// the driver knows under it (memory_manager.h: block_range).
struct OwnedBlock {
  const MemoryManager* manager = nullptr;
  BlockRange range;
};

std::optional<OwnedBlock> owned_block(CUdeviceptr ptr) {
  const MemoryManager* owner = registry().owner_of(ptr);
  if (owner == nullptr) {
    // Inside a block of a manager that knows its blocks by their bases (cuda_async mode's pool blocks):
    // the driver's range starts at the base.
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const RealDriver& driver = real_driver();
    if (driver.cuMemGetAddressRange_v2 != nullptr && driver.cuMemGetAddressRange_v2(&base, &size, ptr) == CUDA_SUCCESS &&
        base != ptr) {
      owner = registry().owner_of(base);
    }
  }
  if (owner == nullptr) return std::nullopt;
  const std::optional<BlockRange> range = owner->block_range(ptr);
  if (!range) return std::nullopt;
  return OwnedBlock{owner, *range};
}

// The pointer attributes that describe the allocation as a whole, and so the block.
bool describes_allocation(CUpointer_attribute attribute) {
  return attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
         attribute == CU_POINTER_ATTRIBUTE_CONTEXT || attribute == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE;
}

// What a cuMemAlloc allocation answers for such an attribute: its range, and the context it was made in.
void describe_block(const OwnedBlock& block, CUpointer_attribute attribute, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = static_cast<CUdeviceptr>(block.range.base);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = block.range.size; break;
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = block.manager->context(); break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:  // a boolean, written as an int as the driver does
      *static_cast<int*>(data) = block.range.legacy_ipc_capable ? 1 : 0;
      break;
    default: break;
  }
}

}  // namespace

CUresult mem_alloc(CUdeviceptr* dptr, size_t bytes) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  if (MemoryManager* manager = registry().current(true)) return manager->allocate(dptr, bytes);
  return driver.cuMemAlloc_v2(dptr, bytes);
}

CUresult mem_alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                         unsigned int element_size_bytes) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  if (MemoryManager* manager = registry().current(true)) {
    return manager->allocate_pitch(dptr, pitch, width_bytes, height, element_size_bytes);
  }
  return driver.cuMemAllocPitch_v2(dptr, pitch, width_bytes, height, element_size_bytes);
}

CUresult mem_free(CUdeviceptr dptr) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr != 0) {
    ipc::withdraw(static_cast<std::uintptr_t>(dptr));  // its IPC handles stop opening
    if (MemoryManager* manager = manager_for_free(dptr)) return manager->free(dptr);
  }
  // No manager (managed memory made before any other allocation, say): its charge still goes.
  return MemoryManager::free_passed_through(dptr, [&] { return driver.cuMemFree_v2(dptr); });
}

CUresult mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  // A null output gets the driver's own answer (CUDA_ERROR_INVALID_VALUE, after its context checks),
  // in every mode.
  if (free_bytes == nullptr || total_bytes == nullptr) {
    const CUresult result = driver.cuMemGetInfo_v2(free_bytes, total_bytes);
    if (result != CUDA_SUCCESS) return result;
  }
  const CUdevice device = policy_is_active() ? budget::current_device() : -1;
  // A shared GPU: the allowance as the ledger has it now (others came or went since the last visit).
  if (device >= 0) budget::refresh_share(device);
  // A query makes no manager: the arena decides whether to preallocate at the first allocation,
  // knowing what other paths hold by then.
  if (MemoryManager* manager = registry().current(false)) return manager->get_info(free_bytes, total_bytes);
  const DeviceBudget* budget = device >= 0 ? budget::of_device(device) : nullptr;
  if (budget == nullptr) return driver_passthrough::mem_get_info(free_bytes, total_bytes);
  std::size_t device_free = 0;
  const CUresult result = driver_passthrough::mem_get_info(&device_free, nullptr);
  if (result != CUDA_SUCCESS) return result;
  if (free_bytes != nullptr) *free_bytes = std::min(budget->available(), device_free);
  if (total_bytes != nullptr) *total_bytes = budget->limit();
  return CUDA_SUCCESS;
}

CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool per_thread) {
  if (!real_driver().available) return CUDA_ERROR_NOT_INITIALIZED;
  const StreamArg stream_arg{stream, per_thread};
  if (MemoryManager* manager = registry().current(true)) {
    return manager->allocate_async(dptr, bytes, stream_arg);
  }
  return driver_passthrough::mem_alloc_async(dptr, bytes, stream_arg);
}

CUresult mem_free_async(CUdeviceptr dptr, CUstream stream, bool per_thread) {
  if (!real_driver().available) return CUDA_ERROR_NOT_INITIALIZED;
  const StreamArg stream_arg{stream, per_thread};
  if (dptr != 0) {
    ipc::withdraw(static_cast<std::uintptr_t>(dptr));
    if (MemoryManager* manager = manager_for_free(dptr)) return manager->free_async(dptr, stream_arg);
  }
  return MemoryManager::free_passed_through(dptr, [&] { return driver_passthrough::mem_free_async(dptr, stream_arg); });
}

CUresult mem_alloc_from_pool_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream,
                                   bool per_thread) {
  if (!real_driver().available) return CUDA_ERROR_NOT_INITIALIZED;
  const StreamArg stream_arg{stream, per_thread};
  if (MemoryManager* manager = registry().current(true)) {
    return manager->allocate_from_pool_async(dptr, bytes, pool, stream_arg);
  }
  return driver_passthrough::mem_alloc_from_pool_async(dptr, bytes, pool, stream_arg);
}

CUresult ctx_synchronize(CUcontext context) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext target = context;
  if (target == nullptr && driver.cuCtxGetCurrent(&target) != CUDA_SUCCESS) target = nullptr;
  MemoryManager* manager = registry().find(target);
  // Only frees made before the synchronisation starts are covered by it.
  const FenceId through = manager != nullptr ? manager->last_fence_id() : 0;
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  if (context == nullptr) {
    result = driver.cuCtxSynchronize();
  } else if (driver.cuCtxSynchronize_v2 != nullptr) {
    result = driver.cuCtxSynchronize_v2(context);
  }
  if (result == CUDA_SUCCESS && manager != nullptr) manager->context_synchronized(through);
  return result;
}

CUresult ctx_destroy(CUcontext context) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  const budget::ReclaimHold hold;  // no reclaim thread uses the context meanwhile
  registry().forget(context);  // before the handle can be reused by a new context
  return driver.cuCtxDestroy_v2(context);
}

CUresult primary_ctx_reset(CUdevice device) {
  const RealDriver& driver = real_driver();
  if (!driver.available) return CUDA_ERROR_NOT_INITIALIZED;
  const budget::ReclaimHold hold;  // no reclaim thread uses the context meanwhile
  registry().forget_primary_context(device);
  return driver.cuDevicePrimaryCtxReset_v2(device);
}

CUresult primary_ctx_release(CUdevice device) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuDevicePrimaryCtxRelease_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const bool can_name = driver.cuDevicePrimaryCtxRetain != nullptr && driver.cuDevicePrimaryCtxGetState != nullptr;
  // Named before the release: once the last reference is gone the context can no longer be named.
  const CUcontext primary = can_name ? active_primary_context(device) : nullptr;
  const budget::ReclaimHold hold;  // the last release destroys the context: no reclaim thread uses it meanwhile
  const CUresult result = driver.cuDevicePrimaryCtxRelease_v2(device);
  if (result != CUDA_SUCCESS || primary == nullptr) return result;
  unsigned int flags = 0;
  int active = 0;
  // The last release destroyed the context and freed its memory; a later retain may hand back the
  // same handle, which must not find the old arena.
  if (driver.cuDevicePrimaryCtxGetState(device, &flags, &active) == CUDA_SUCCESS && active == 0) {
    registry().forget(primary);
  }
  return result;
}

CUresult stream_begin_capture(CUstream stream, CUstreamCaptureMode mode, bool per_thread) {
  const RealDriver& driver = real_driver();
  const auto begin = per_thread ? driver.cuStreamBeginCapture_v2_ptsz : driver.cuStreamBeginCapture_v2;
  if (begin == nullptr) return driver.available ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  // A reclaim thread's driver calls (an event over the context) would end the capture: none is under
  // way as it begins, and none starts once it is counted.
  const budget::ReclaimHold hold;
  const CUresult result = begin(stream, mode);
  if (result == CUDA_SUCCESS) capture_state::began();
  return result;
}

CUresult stream_end_capture(CUstream stream, CUgraph* graph, bool per_thread) {
  const RealDriver& driver = real_driver();
  const auto end = per_thread ? driver.cuStreamEndCapture_ptsz : driver.cuStreamEndCapture;
  if (end == nullptr) return driver.available ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = end(stream, graph);
  // Ended, whether or not it produced a graph; other errors (wrong thread, not capturing) end nothing.
  if (result == CUDA_SUCCESS || result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) capture_state::ended();
  return result;
}

CUresult mem_get_address_range(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuMemGetAddressRange_v2 == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  // The block, not the mapping holding `ptr`: a program may rely on [base, base + size) holding the
  // whole allocation, and exports base with an offset beside it (docs/ipc.md).
  if (const std::optional<OwnedBlock> block = owned_block(ptr)) {
    if (base != nullptr) *base = static_cast<CUdeviceptr>(block->range.base);
    if (size != nullptr) *size = block->range.size;
    return CUDA_SUCCESS;
  }
  return driver.cuMemGetAddressRange_v2(base, size, ptr);
}

CUresult pointer_get_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuPointerGetAttribute == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (data != nullptr && describes_allocation(attribute)) {
    if (const std::optional<OwnedBlock> block = owned_block(ptr)) {
      describe_block(*block, attribute, data);
      return CUDA_SUCCESS;
    }
  }
  return driver.cuPointerGetAttribute(data, attribute, ptr);
}

CUresult pointer_get_attributes(unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  const RealDriver& driver = real_driver();
  if (driver.cuPointerGetAttributes == nullptr) {
    return driver.available ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  }
  // The driver checks the arrays and answers every attribute; those describing the allocation are then
  // the block's.
  const CUresult result = driver.cuPointerGetAttributes(count, attributes, data, ptr);
  if (result != CUDA_SUCCESS || count == 0) return result;
  std::optional<OwnedBlock> block;
  for (unsigned int i = 0; i < count; ++i) {
    if (!describes_allocation(attributes[i]) || data[i] == nullptr) continue;
    if (!block && !(block = owned_block(ptr))) return result;
    describe_block(*block, attributes[i], data[i]);
  }
  return result;
}

namespace {

// After the driver changed peer access from the current context to `peer`: the table follows, and
// the peer's arena with it.
void note_peer_access(const RealDriver& driver, CUcontext peer, bool enabled) {
  CUcontext current = nullptr;
  CUdevice device = -1;
  if (driver.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr ||
      driver.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    return;
  }
  if (enabled) {
    peer_access::enabled(current, device, peer);
  } else {
    peer_access::disabled(current, peer);
  }
  if (MemoryManager* manager = registry().find(peer)) manager->refresh_peer_access();
}

}  // namespace

CUresult ctx_enable_peer_access(CUcontext peer, unsigned int flags) {
  const RealDriver& driver = real_driver();
  if (driver.cuCtxEnablePeerAccess == nullptr) {
    return driver.available ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  }
  const CUresult result = driver.cuCtxEnablePeerAccess(peer, flags);
  if (result == CUDA_SUCCESS) note_peer_access(driver, peer, true);
  return result;
}

CUresult ctx_disable_peer_access(CUcontext peer) {
  const RealDriver& driver = real_driver();
  if (driver.cuCtxDisablePeerAccess == nullptr) {
    return driver.available ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  }
  const CUresult result = driver.cuCtxDisablePeerAccess(peer);
  if (result == CUDA_SUCCESS) note_peer_access(driver, peer, false);
  return result;
}

}  // namespace gpumem::shim
