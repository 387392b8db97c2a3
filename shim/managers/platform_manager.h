// platform mode: every request goes to the driver as is and freed memory goes back; only counted.
#pragma once

#include <cstddef>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "managers/memory_manager.h"

namespace gpumem::shim {

// Invariants: `live_` maps every block this manager obtained from the driver and has not seen freed
// to its size as asked for (the driver may round it up a little); bytes_in_use_ is their sum and peak_bytes_in_use_ its maximum so far. What the
// program holds is what the driver holds for it, so these are also the reserved figures.
class PlatformManager final : public MemoryManager {
 public:
  using MemoryManager::MemoryManager;

 private:
  CUresult do_allocate(CUdeviceptr* out, std::size_t bytes) override;
  CUresult do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                             std::size_t height, unsigned int element_size_bytes) override;
  CUresult do_free(CUdeviceptr ptr) override;
  CUresult do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) override;
  CUresult do_free_async(CUdeviceptr ptr, StreamArg stream) override;
  bool do_owns(CUdeviceptr ptr) const override;  // a block it obtained and has not seen freed
  void do_context_synchronized(FenceId /*through*/) override {}
  void do_fill_stats(ManagerStats& stats) const override;
  bool do_try_fill_stats(ManagerStats& stats) const override;
  const char* do_mode_name() const noexcept override { return "platform"; }
  std::string do_serving() const override { return "platform, every request to the driver"; }
  void do_retire() noexcept override;
  // What it holds from the driver is what the program holds.
  std::size_t do_reserved_bytes_now() const noexcept override {
    return bytes_in_use_now_.load(std::memory_order_relaxed);
  }

  // Records a block the driver handed out (when `result` is success); returns `result` unchanged.
  CUresult track_alloc(CUresult result, CUdeviceptr ptr, std::size_t bytes);
  // Forgets a block before it is freed (a failed free records it again); returns its size, or 0.
  std::size_t untrack(CUdeviceptr ptr);

  mutable std::mutex mutex_;
  std::unordered_map<CUdeviceptr, std::size_t> live_;
  std::size_t bytes_in_use_ = 0;
  std::size_t peak_bytes_in_use_ = 0;
  std::atomic<std::size_t> bytes_in_use_now_{0};  // bytes_in_use_, readable without the lock
};

}  // namespace gpumem::shim
