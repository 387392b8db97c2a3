// platform mode: the driver's cuMemAlloc/cuMemFree per request, charged to the budget.
#include "managers/platform_manager.h"

#include <algorithm>

#include "budget/budgets.h"
#include "budget/pool_reserve.h"
#include "driver/real_driver.h"

namespace gpumem::shim {

CUresult PlatformManager::do_allocate(CUdeviceptr* out, std::size_t bytes) {
  const CUresult result = budget::charged(
      device(), BudgetPath::driver, bytes, "cuMemAlloc",
      [&] { return count_path(count_driver_alloc(real_driver().cuMemAlloc_v2(out, bytes)), AllocationPath::driver, bytes); },
      [&] { real_driver().cuMemFree_v2(*out); });
  return result == CUDA_SUCCESS ? track_alloc(result, *out, bytes) : result;  // *out read after the call
}

CUresult PlatformManager::do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                                            std::size_t height, unsigned int element_size_bytes) {
  const CUresult result =
      count_driver_alloc(real_driver().cuMemAllocPitch_v2(out, pitch, width_bytes, height, element_size_bytes));
  if (result != CUDA_SUCCESS) return result;
  // The pitch is known only now: over the budget, the block goes straight back.
  if (!budget::charge(device(), BudgetPath::driver, *pitch * height, "cuMemAllocPitch")) {
    real_driver().cuMemFree_v2(*out);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  budget::answered(device(), *pitch * height);  // on the device already
  count_path(result, AllocationPath::driver, *pitch * height);
  return track_alloc(result, *out, *pitch * height);
}

CUresult PlatformManager::do_free(CUdeviceptr ptr) {
  const std::size_t bytes = untrack(ptr);  // before the driver may hand the address out again
  const CUmemoryPool pool = bytes != 0 ? budget::pool_of(ptr) : nullptr;  // a cuMemAllocAsync block's
  const CUresult result = bytes != 0 ? real_driver().cuMemFree_v2(ptr) : free_passed_through(ptr, [&] {
    return real_driver().cuMemFree_v2(ptr);
  });
  if (result != CUDA_SUCCESS && bytes != 0) track_alloc(CUDA_SUCCESS, ptr, bytes);
  if (result == CUDA_SUCCESS && bytes != 0) budget::pool_block_freed(device(), pool, BudgetPath::driver, bytes);
  return result;
}

CUresult PlatformManager::do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  // A captured allocation belongs to the graph, which the driver frees without us: not tracked.
  const bool captured = driver_passthrough::stream_is_capturing(stream);
  const auto allocate = [&] {
    return count_path(count_driver_alloc(driver_passthrough::mem_alloc_async(out, bytes, stream)),
                      captured ? AllocationPath::graph : AllocationPath::driver, bytes);
  };
  if (captured) return allocate();
  // The pool keeps a freed block's memory: charged as budget/pool_reserve.h says.
  const CUmemoryPool pool = budget::current_pool(device());
  const std::optional<std::size_t> charged =
      budget::charge_pool_block(device(), pool, BudgetPath::driver, bytes, "cuMemAllocAsync");
  if (!charged) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = allocate();
  budget::pool_block_allocated(device(), pool, BudgetPath::driver, bytes, *charged, result == CUDA_SUCCESS);
  return result == CUDA_SUCCESS ? track_alloc(result, *out, bytes) : result;
}

CUresult PlatformManager::do_free_async(CUdeviceptr ptr, StreamArg stream) {
  // A captured free happens only if the graph is launched: the block stays counted until then.
  if (driver_passthrough::stream_is_capturing(stream)) return driver_passthrough::mem_free_async(ptr, stream);
  const std::size_t bytes = untrack(ptr);
  const CUmemoryPool pool = bytes != 0 ? budget::pool_of(ptr) : nullptr;  // before the driver takes it back
  const CUresult result = bytes != 0 ? driver_passthrough::mem_free_async(ptr, stream) : free_passed_through(ptr, [&] {
    return driver_passthrough::mem_free_async(ptr, stream);
  });
  if (result != CUDA_SUCCESS && bytes != 0) track_alloc(CUDA_SUCCESS, ptr, bytes);
  if (result == CUDA_SUCCESS && bytes != 0) budget::pool_block_freed(device(), pool, BudgetPath::driver, bytes);
  return result;
}

CUresult PlatformManager::track_alloc(CUresult result, CUdeviceptr ptr, std::size_t bytes) {
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard lock(mutex_);
  try {
    const auto [entry, inserted] = live_.emplace(ptr, bytes);
    if (!inserted) {
      // The address was freed where we could not see it (a captured free, performed by a graph):
      // the driver has handed it out again, so the new block replaces the stale record.
      bytes_in_use_ -= entry->second;
      entry->second = bytes;
    }
  } catch (...) {  // no host memory for the record: the figures lose this block, the program does not
    return result;
  }
  bytes_in_use_ += bytes;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  bytes_in_use_now_.store(bytes_in_use_, std::memory_order_relaxed);
  return result;
}

std::size_t PlatformManager::untrack(CUdeviceptr ptr) {
  std::lock_guard lock(mutex_);
  const auto found = live_.find(ptr);
  if (found == live_.end()) return 0;
  const std::size_t bytes = found->second;
  bytes_in_use_ -= bytes;
  bytes_in_use_now_.store(bytes_in_use_, std::memory_order_relaxed);
  live_.erase(found);
  return bytes;
}

void PlatformManager::do_retire() noexcept {
  std::lock_guard lock(mutex_);
  budget::refund(device(), BudgetPath::driver, bytes_in_use_);
  bytes_in_use_ = 0;
  bytes_in_use_now_.store(0, std::memory_order_relaxed);
  live_.clear();
}

bool PlatformManager::do_owns(CUdeviceptr ptr) const {
  std::lock_guard lock(mutex_);
  return live_.count(ptr) != 0;
}

void PlatformManager::do_fill_stats(ManagerStats& stats) const {
  std::lock_guard lock(mutex_);
  stats.bytes_in_use = stats.bytes_reserved = bytes_in_use_;
  stats.peak_bytes_in_use = stats.peak_bytes_reserved = peak_bytes_in_use_;
}

bool PlatformManager::do_try_fill_stats(ManagerStats& stats) const {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  stats.bytes_in_use = stats.bytes_reserved = bytes_in_use_;
  stats.peak_bytes_in_use = stats.peak_bytes_reserved = peak_bytes_in_use_;
  return true;
}

}  // namespace gpumem::shim
