// The memory manager of one CUDA context: the interface every mode implements.
//
// Public calls are non-virtual and do what all modes share (argument checks, counting), then
// forward to the private do_* hooks of the mode. Allocations are made with the manager's context
// current; frees and queries may come while another context is current (the driver allows freeing any
// context's memory). Every call is thread-safe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fence.h"
#include "policy.h"

namespace gpumem::shim {

// A stream as the program named it: `per_thread` is true for the _ptsz entry points (stream 0 is then
// the calling thread's default stream).
struct StreamArg {
  CUstream handle = nullptr;
  bool per_thread = false;
};

// Counters kept for every mode. Invariant: frees <= allocs; failed_allocs counts refusals only.
struct ManagerCounters {
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t failed_allocs = 0;
  std::uint64_t passed_through = 0;  // requests handed to the driver untouched (foreign, captured)
  std::uint64_t driver_allocs = 0;   // device allocations made through the driver (bfc: its regions too)
};

// A snapshot for gpumem_get_stats: the counters plus what the mode tracks of its memory (0 if not).
struct ManagerStats {
  ManagerCounters counters;
  std::size_t bytes_limit = 0;
  std::size_t bytes_in_use = 0;
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_reserved = 0;
  std::size_t peak_bytes_reserved = 0;
  std::size_t largest_free_block = 0;
  std::size_t bytes_fenced = 0;
  std::size_t regions = 0;
};

class MemoryManager {
 public:
  MemoryManager(CUcontext context, CUdevice device, const Policy& policy, std::size_t limit_bytes);
  virtual ~MemoryManager() = default;
  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;

  CUresult allocate(CUdeviceptr* out, std::size_t bytes);
  CUresult allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                          std::size_t height, unsigned int element_size_bytes);
  // Frees `ptr`; a pointer this manager does not own goes to the driver.
  CUresult free(CUdeviceptr ptr);
  CUresult allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream);
  CUresult free_async(CUdeviceptr ptr, StreamArg stream);
  CUresult allocate_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                    StreamArg stream);
  CUresult get_info(std::size_t* free_bytes, std::size_t* total_bytes);

  // True if `ptr` was handed out by this manager (any address inside one of its blocks or regions).
  bool owns(CUdeviceptr ptr) const { return do_owns(ptr); }
  // For cuIpcGetMemHandle: CUDA_SUCCESS if the driver can export `ptr` as the program expects,
  // else the error to return (a sub-allocation the driver would export as its whole region).
  CUresult check_ipc_export(CUdeviceptr ptr) const { return do_check_ipc_export(ptr); }

  // Context synchronisation: capture last_fence_id() before the real synchronisation, then report
  // that it completed; every free up to that id is then safe to reuse.
  FenceId last_fence_id() const noexcept { return fence_ids_.load(std::memory_order_acquire); }
  void context_synchronized(FenceId through) { do_context_synchronized(through); }

  ManagerCounters counters() const noexcept;
  ManagerStats stats() const;
  // One line for the log when the manager retires (its context goes, or the process exits): what it
  // served and what it took from the driver. With `never_wait`, nothing (an empty string) if
  // another thread holds the manager's figures right now.
  std::string summary(bool never_wait = false) const;
  CUcontext context() const noexcept { return context_; }
  CUdevice device() const noexcept { return device_; }
  std::size_t limit_bytes() const noexcept { return limit_bytes_; }
  const char* mode_name() const noexcept { return do_mode_name(); }

 protected:
  const Policy& policy() const noexcept { return policy_; }
  // Shared by every fence this context issues, so "all fences up to X" is one comparison.
  std::atomic<FenceId>& fence_ids() noexcept { return fence_ids_; }
  void count_pass_through() noexcept { passed_through_.fetch_add(1, std::memory_order_relaxed); }
  // Counts a successful device allocation made through the driver (the shim's own included, such as
  // a region or the cuda_async warm-up); returns `result` unchanged.
  CUresult count_driver_alloc(CUresult result) noexcept {
    if (result == CUDA_SUCCESS) driver_allocs_.fetch_add(1, std::memory_order_relaxed);
    return result;
  }
  // Synchronises this manager's context with the real driver.
  CUresult synchronize_context() const;

 private:
  virtual CUresult do_allocate(CUdeviceptr* out, std::size_t bytes) = 0;
  // Default: the driver's pitch rule, then do_allocate(pitch * height).
  virtual CUresult do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                                     std::size_t height, unsigned int element_size_bytes);
  virtual CUresult do_free(CUdeviceptr ptr) = 0;
  virtual CUresult do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) = 0;
  virtual CUresult do_free_async(CUdeviceptr ptr, StreamArg stream) = 0;
  // Default: the program's own pool, so the driver serves it.
  virtual CUresult do_allocate_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                               StreamArg stream);
  // Default: the driver's answer.
  virtual CUresult do_get_info(std::size_t* free_bytes, std::size_t* total_bytes);
  virtual bool do_owns(CUdeviceptr ptr) const = 0;
  virtual CUresult do_check_ipc_export(CUdeviceptr ptr) const;
  virtual void do_context_synchronized(FenceId through) = 0;
  // Default: nothing beyond the counters and the limit.
  virtual void do_fill_stats(ManagerStats& /*stats*/) const {}
  // do_fill_stats without waiting for a lock: false if it would have to. Default: the same.
  virtual bool do_try_fill_stats(ManagerStats& stats) const {
    do_fill_stats(stats);
    return true;
  }
  virtual const char* do_mode_name() const noexcept = 0;

  void count_alloc(CUresult result) noexcept;

  const CUcontext context_;
  const CUdevice device_;
  const Policy& policy_;
  const std::size_t limit_bytes_;
  std::atomic<FenceId> fence_ids_{0};
  std::atomic<std::uint64_t> allocs_{0};
  std::atomic<std::uint64_t> frees_{0};
  std::atomic<std::uint64_t> failed_allocs_{0};
  std::atomic<std::uint64_t> passed_through_{0};
  std::atomic<std::uint64_t> driver_allocs_{0};
};

// The driver's own answers, for requests a manager hands on untouched.
namespace driver_passthrough {
// cuMemGetInfo_v2 writing only the outputs asked for (either may be null).
CUresult mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes);
CUresult mem_alloc_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream);
CUresult mem_free_async(CUdeviceptr ptr, StreamArg stream);
CUresult mem_alloc_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                   StreamArg stream);
// True if `stream` is being captured into a graph (then allocations on it must reach the driver).
bool stream_is_capturing(StreamArg stream);
}  // namespace driver_passthrough

}  // namespace gpumem::shim
