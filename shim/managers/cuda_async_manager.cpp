#include "managers/cuda_async_manager.h"

#include <cstdint>

#include "managers/capture_state.h"
#include "log.h"
#include "intercept/real_driver.h"

namespace gpumem::shim {
namespace {

const char* error_name(CUresult result) {
  const RealDriver& driver = real_driver();
  const char* name = nullptr;
  if (driver.cuGetErrorName == nullptr || driver.cuGetErrorName(result, &name) != CUDA_SUCCESS ||
      name == nullptr) {
    return "unknown error";
  }
  return name;
}

}  // namespace

std::unique_ptr<CudaAsyncManager> CudaAsyncManager::create(CUcontext context, CUdevice device,
                                                           const Policy& policy, std::size_t limit_bytes,
                                                           log::Pending& messages) {
  const RealDriver& driver = real_driver();
  if (driver.cuDeviceGetDefaultMemPool == nullptr || driver.cuMemPoolSetAttribute == nullptr ||
      driver.cuMemAllocAsync == nullptr || driver.cuMemFreeAsync == nullptr ||
      driver.cuStreamCreate == nullptr || driver.cuStreamSynchronize == nullptr) {
    messages.add(LogLevel::error, "device {}: the driver has no stream-ordered allocator; cuda_async "
                 "mode is unavailable and requests go to the driver", device);
    return nullptr;
  }
  CUmemoryPool pool = nullptr;
  CUresult result = driver.cuDeviceGetDefaultMemPool(&pool, device);
  if (result != CUDA_SUCCESS) {
    messages.add(LogLevel::error, "device {}: cuDeviceGetDefaultMemPool failed ({}); cuda_async mode "
                 "is unavailable and requests go to the driver", device, error_name(result));
    return nullptr;
  }
  // Memory the pool holds above the threshold goes back to the driver at synchronisation points.
  std::uint64_t threshold = policy.preallocate ? limit_bytes : 0;
  result = driver.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  if (result != CUDA_SUCCESS) {
    messages.add(LogLevel::warn, "device {}: setting the pool's release threshold to {} failed ({})",
                 device, threshold, error_name(result));
  }
  CUstream stream = nullptr;
  result = driver.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (result != CUDA_SUCCESS) {
    messages.add(LogLevel::error, "device {}: creating the allocation stream failed ({}); cuda_async "
                 "mode is unavailable and requests go to the driver", device, error_name(result));
    return nullptr;
  }
  return std::make_unique<CudaAsyncManager>(context, device, policy, limit_bytes, pool, stream);
}

CudaAsyncManager::CudaAsyncManager(CUcontext context, CUdevice device, const Policy& policy,
                                   std::size_t limit_bytes, CUmemoryPool pool, CUstream private_stream)
    : MemoryManager(context, device, policy, limit_bytes), pool_(pool), private_stream_(private_stream) {}

void CudaAsyncManager::warm_up() {
  if (!policy().async_prealloc || *policy().async_prealloc == 0) return;
  const std::int64_t asked = *policy().async_prealloc;
  const std::size_t bytes = asked < 0 ? (policy().preallocate ? limit_bytes() : 0)
                                      : static_cast<std::size_t>(asked);
  if (bytes == 0) return;
  const RealDriver& driver = real_driver();
  CUdeviceptr block = 0;
  const CUresult result = allocate_from_pool(&block, bytes);
  if (result == CUDA_SUCCESS) {
    driver.cuMemFreeAsync(block, private_stream_);
    driver.cuStreamSynchronize(private_stream_);
    log::at(LogLevel::debug, "device {}: warmed the pool with {} bytes", device(), bytes);
  } else {
    log::at(LogLevel::warn, "device {}: warming the pool with {} bytes failed ({})", device(), bytes,
                 error_name(result));
  }
}

CUresult CudaAsyncManager::allocate_on_private_stream(CUdeviceptr* out, std::size_t bytes) {
  CUresult result = allocate_from_pool(out, bytes);
  if (result == CUDA_ERROR_OUT_OF_MEMORY && !capture_state::active()) {
    // As TensorFlow does: let pending frees land (ours included), then try once more. (Not while
    // the program captures a graph: the driver would refuse the synchronisation and end the capture.)
    const FenceId through = last_fence_id();
    count_fence_sync();
    const CUresult synced = synchronize_context();
    if (synced == CUDA_SUCCESS) do_context_synchronized(through);
    result = allocate_from_pool(out, bytes);
    if (result != CUDA_SUCCESS && synced == CUDA_SUCCESS) {
      log::at(LogLevel::warn, "device {}: the stream-ordered pool refused {} bytes ({}), also after "
              "synchronising the context and returning every block freed before", device(), bytes,
              error_name(result));
    } else if (result != CUDA_SUCCESS) {
      log::at(LogLevel::warn, "device {}: the stream-ordered pool refused {} bytes ({}); synchronising "
              "the context to return freed blocks failed ({})", device(), bytes, error_name(result),
              error_name(synced));
    }
  } else if (result != CUDA_SUCCESS) {
    log::at(LogLevel::warn, "device {}: the stream-ordered pool refused {} bytes ({})", device(), bytes,
            error_name(result));
  }
  if (result != CUDA_SUCCESS) return result;
  result = real_driver().cuStreamSynchronize(private_stream_);  // a synchronous allocation is complete on return
  if (result != CUDA_SUCCESS) {
    return_to_pool(*out);
    log::at(LogLevel::warn, "device {}: completing a {}-byte allocation failed ({})", device(), bytes,
            error_name(result));
  }
  return result;
}

CUresult CudaAsyncManager::allocate_from_pool(CUdeviceptr* out, std::size_t bytes) {
  // From the default pool by name: the program may have made another pool the device's current one.
  const RealDriver& driver = real_driver();
  if (driver.cuMemAllocFromPoolAsync != nullptr) {
    return count_driver_alloc(driver.cuMemAllocFromPoolAsync(out, bytes, pool_, private_stream_));
  }
  return count_driver_alloc(driver.cuMemAllocAsync(out, bytes, private_stream_));
}

CUresult CudaAsyncManager::return_to_pool(CUdeviceptr ptr) {
  return real_driver().cuMemFreeAsync(ptr, private_stream_);
}

CUresult CudaAsyncManager::do_allocate(CUdeviceptr* out, std::size_t bytes) {
  std::call_once(warmed_up_, [this] { warm_up(); });
  const CUresult result = allocate_charged(out, bytes, BudgetPath::async_pool, "cuMemAlloc",
                                           [&] { return allocate_on_private_stream(out, bytes); });  // logs why it failed
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard lock(mutex_);
  if (!blocks_.reserve_one()) {
    budget::forget_block(static_cast<std::uintptr_t>(*out));
    return_to_pool(*out);
    log::at(LogLevel::warn, "device {}: no host memory to track a {}-byte block", device(), bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const detail::ChunkHandle entry = served_entry(bytes);
  blocks_.insert(*out, entry);
  served_bytes_ += entry_bytes(entry);
  return count_path(CUDA_SUCCESS, AllocationPath::async_pool, bytes);
}

CUresult CudaAsyncManager::do_free(CUdeviceptr ptr) {
  // sync would synchronise the context, which a graph capture forbids: then it defers instead.
  const bool defer = policy().free_sync == FreeSync::defer ||
                     (policy().free_sync == FreeSync::sync && capture_state::active());
  {
    std::lock_guard lock(mutex_);
    const detail::ChunkHandle entry = blocks_.find(ptr);
    if (entry != detail::kNoChunk && entry_deferred(entry)) return CUDA_ERROR_INVALID_VALUE;  // freed twice
    if (entry == detail::kNoChunk) {
      count_pass_through();
      return free_passed_through(ptr, [&] { return real_driver().cuMemFree_v2(ptr); });
    }
    budget::forget_block(static_cast<std::uintptr_t>(ptr));  // the program gave it up
    if (defer) {
      const FenceId fence = fence_ids().fetch_add(1, std::memory_order_acq_rel) + 1;
      deferred_.emplace_back(fence, ptr);  // may throw: before the state changes
      blocks_.erase(ptr);  // the erase frees the slot the insert needs: no allocation
      blocks_.insert(ptr, entry | kDeferredBit);
      served_bytes_ -= entry_bytes(entry);
      deferred_bytes_ += entry_bytes(entry);
    } else {
      blocks_.erase(ptr);
      served_bytes_ -= entry_bytes(entry);
    }
  }
  if (defer) {
    bound_deferred_bytes();
    return CUDA_SUCCESS;
  }
  if (policy().free_sync == FreeSync::sync && !defer) {
    const FenceId through = last_fence_id();
    count_fence_sync();
    const CUresult synced = synchronize_context();
    if (synced != CUDA_SUCCESS) return synced;
    do_context_synchronized(through);
  }
  return return_to_pool(ptr);
}

CUresult CudaAsyncManager::do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  if (driver_passthrough::stream_is_capturing(stream)) {  // the graph owns it: not charged
    return count_path(count_driver_alloc(driver_passthrough::mem_alloc_async(out, bytes, stream)),
                      AllocationPath::graph, bytes);
  }
  const CUresult result = allocate_charged(out, bytes, BudgetPath::async_pool, "cuMemAllocAsync", [&] {
    CUresult allocated = driver_passthrough::mem_alloc_async(out, bytes, stream);
    if (allocated == CUDA_ERROR_OUT_OF_MEMORY && !capture_state::active()) {
      // Blocks the program freed synchronously may still wait for a context synchronisation:
      // return them, as a synchronous allocation would, then try once more.
      const FenceId through = last_fence_id();
      count_fence_sync();
      if (synchronize_context() == CUDA_SUCCESS) {
        do_context_synchronized(through);
        allocated = driver_passthrough::mem_alloc_async(out, bytes, stream);
      }
    }
    return allocated;
  });
  return count_path(count_driver_alloc(result), AllocationPath::async_pool, bytes);
}

CUresult CudaAsyncManager::do_free_async(CUdeviceptr ptr, StreamArg stream) {
  {
    std::lock_guard lock(mutex_);
    // Blocks of synchronous allocations (the pool serves them here, cuMemAlloc would not): the
    // driver frees in stream order only what was allocated so, and the block stays allocated.
    if (blocks_.find(ptr) != detail::kNoChunk) {
      const driver_passthrough::StreamStatus on = driver_passthrough::stream_status(stream);
      return on.error != CUDA_SUCCESS ? on.error : CUDA_ERROR_INVALID_VALUE;
    }
  }
  return free_passed_through(ptr, [&] { return driver_passthrough::mem_free_async(ptr, stream); });
}

bool CudaAsyncManager::do_owns(CUdeviceptr ptr) const {
  std::lock_guard lock(mutex_);
  return blocks_.find(ptr) != detail::kNoChunk;
}

void CudaAsyncManager::do_context_synchronized(FenceId through) {
  // Returned under the lock: a thread that synchronised too and found nothing left to resolve must
  // find these blocks already back in the pool when it retries, or it fails spuriously.
  std::lock_guard lock(mutex_);
  while (!deferred_.empty() && deferred_.front().first <= through) {
    const CUdeviceptr ptr = deferred_.front().second;
    deferred_.pop_front();
    deferred_bytes_ -= entry_bytes(blocks_.erase(ptr));
    return_to_pool(ptr);
  }
}

// The context is being reset or destroyed, which frees what cuMemAlloc gave the program: the pool
// blocks that served it go back to the pool, and the pool gives their memory back, while the
// context still lives (after a last primary-context release it is already gone: the calls fail
// and change nothing).
void CudaAsyncManager::do_retire() noexcept {
  const RealDriver& driver = real_driver();
  std::lock_guard lock(mutex_);
  blocks_.drain([this](std::uintptr_t ptr, detail::ChunkHandle) { return_to_pool(static_cast<CUdeviceptr>(ptr)); });
  deferred_.clear();
  served_bytes_ = deferred_bytes_ = 0;
  if (driver.cuStreamSynchronize != nullptr) driver.cuStreamSynchronize(private_stream_);
  if (driver.cuMemPoolTrimTo != nullptr) driver.cuMemPoolTrimTo(pool_, 0);
}

void CudaAsyncManager::bound_deferred_bytes() {
  {
    std::lock_guard lock(mutex_);
    if (deferred_bytes_ <= std::max(served_bytes_, kDeferredFloor)) return;
  }
  if (capture_state::active()) return;  // the driver would refuse the synchronisation and end the capture
  const FenceId through = last_fence_id();
  count_fence_sync();
  if (synchronize_context() == CUDA_SUCCESS) do_context_synchronized(through);
}

void CudaAsyncManager::do_fill_stats(ManagerStats& stats) const {
  if (const DeviceBudget* budget = budget::existing(device())) {  // lock-free: safe at exit too
    stats.bytes_in_use = budget->charged(BudgetPath::async_pool);
    stats.peak_bytes_in_use = budget->peak_charged(BudgetPath::async_pool);
  }
}

}  // namespace gpumem::shim
