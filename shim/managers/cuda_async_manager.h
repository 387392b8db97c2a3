// cuda_async mode (TensorFlow's cuda_malloc_async): the device's default stream-ordered pool serves
// every request; synchronous cuMemAlloc_v2 is served from it on a private stream and completed before
// returning. Stream-ordered calls of the program reach the same pool untouched.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "log.h"
#include "managers/memory_manager.h"
#include "pointer_map.h"

namespace gpumem::shim {

// Invariants: `blocks_` maps every block handed out by synchronous allocation and not yet back in
// the pool to kServed or kDeferred; `deferred_` lists the kDeferred ones in fence order: blocks the
// program freed synchronously that go back to the pool (with cuMemFreeAsync on the private stream)
// once a context synchronisation that began after their free completed. A block leaves both under
// `mutex_` in the same step as it is returned to the pool, so no thread sees it in neither place
// while it is not yet reusable.
class CudaAsyncManager final : public MemoryManager {
 public:
  // Sets the pool's release threshold (the limit when preallocating, else 0) and creates the private
  // stream; null (and the reason in `messages`) if the device has no usable default pool.
  static std::unique_ptr<CudaAsyncManager> create(CUcontext context, CUdevice device, const Policy& policy,
                                                  std::size_t limit_bytes, log::Pending& messages);

  CudaAsyncManager(CUcontext context, CUdevice device, const Policy& policy, std::size_t limit_bytes,
                   CUmemoryPool pool, CUstream private_stream);

 private:
  CUresult do_allocate(CUdeviceptr* out, std::size_t bytes) override;
  CUresult do_free(CUdeviceptr ptr) override;
  CUresult do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) override;
  CUresult do_free_async(CUdeviceptr ptr, StreamArg stream) override;
  bool do_owns(CUdeviceptr ptr) const override;
  void do_context_synchronized(FenceId through) override;
  void do_retire() noexcept override;
  const char* do_mode_name() const noexcept override { return "cuda_async"; }

  // TensorFlow's warm-up: allocate the configured bytes once and free them, so the pool holds them.
  void warm_up();
  CUresult allocate_on_private_stream(CUdeviceptr* out, std::size_t bytes);
  // One stream-ordered allocation from the default pool on the private stream.
  CUresult allocate_from_pool(CUdeviceptr* out, std::size_t bytes);
  CUresult return_to_pool(CUdeviceptr ptr);
  bool is_deferred_locked(CUdeviceptr ptr) const { return blocks_.find(ptr) == kDeferred; }

  static constexpr detail::ChunkHandle kServed = 1;
  static constexpr detail::ChunkHandle kDeferred = 2;

  const CUmemoryPool pool_;
  const CUstream private_stream_;
  std::once_flag warmed_up_;
  mutable std::mutex mutex_;
  detail::PointerMap blocks_;
  std::deque<std::pair<FenceId, CUdeviceptr>> deferred_;
};

}  // namespace gpumem::shim
