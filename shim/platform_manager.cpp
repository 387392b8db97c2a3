#include "platform_manager.h"

#include <algorithm>

#include "real_driver.h"

namespace gpumem::shim {

CUresult PlatformManager::do_allocate(CUdeviceptr* out, std::size_t bytes) {
  const CUresult result = count_driver_alloc(real_driver().cuMemAlloc_v2(out, bytes));
  return result == CUDA_SUCCESS ? track_alloc(result, *out, bytes) : result;  // *out read after the call
}

CUresult PlatformManager::do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                                            std::size_t height, unsigned int element_size_bytes) {
  const CUresult result =
      count_driver_alloc(real_driver().cuMemAllocPitch_v2(out, pitch, width_bytes, height, element_size_bytes));
  return result == CUDA_SUCCESS ? track_alloc(result, *out, *pitch * height) : result;
}

CUresult PlatformManager::do_free(CUdeviceptr ptr) { return track_free(real_driver().cuMemFree_v2(ptr), ptr); }

CUresult PlatformManager::do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  // A captured allocation belongs to the graph, which the driver frees without us: not tracked.
  const bool captured = driver_passthrough::stream_is_capturing(stream);
  const CUresult result = count_driver_alloc(driver_passthrough::mem_alloc_async(out, bytes, stream));
  return result == CUDA_SUCCESS && !captured ? track_alloc(result, *out, bytes) : result;
}

CUresult PlatformManager::do_free_async(CUdeviceptr ptr, StreamArg stream) {
  // A captured free happens only if the graph is launched: the block stays counted until then.
  const bool captured = driver_passthrough::stream_is_capturing(stream);
  const CUresult result = driver_passthrough::mem_free_async(ptr, stream);
  return captured ? result : track_free(result, ptr);
}

CUresult PlatformManager::track_alloc(CUresult result, CUdeviceptr ptr, std::size_t bytes) {
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard lock(mutex_);
  try {
    if (!live_.emplace(ptr, bytes).second) return result;  // the driver gave out a live address twice
  } catch (...) {  // no host memory for the record: the figures lose this block, the program does not
    return result;
  }
  bytes_in_use_ += bytes;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  return result;
}

CUresult PlatformManager::track_free(CUresult result, CUdeviceptr ptr) {
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard lock(mutex_);
  if (const auto found = live_.find(ptr); found != live_.end()) {
    bytes_in_use_ -= found->second;
    live_.erase(found);
  }
  return result;
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

}  // namespace gpumem::shim
