// cuda_async mode (TensorFlow's cuda_malloc_async): the device's default stream-ordered pool serves
// every request; synchronous cuMemAlloc_v2 is served from it on a private stream and completed before
// returning. Stream-ordered calls of the program reach the same pool untouched.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "log.h"
#include "managers/memory_manager.h"
#include "pointer_map.h"

namespace gpumem::shim {

// Invariants: `blocks_` maps every block handed out by synchronous allocation and not yet back in
// the pool to its entry (served or deferred); `deferred_` lists the deferred ones in fence order: blocks the
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
  // In use: the live blocks' bytes as the budget charges them (all of this mode's blocks come from
  // the pool). Reserved stays 0: the pool's reservation is the driver's, known only by asking it.
  void do_fill_stats(ManagerStats& stats) const override;
  const char* do_mode_name() const noexcept override { return "cuda_async"; }

  // TensorFlow's warm-up: allocate the configured bytes once and free them, so the pool holds them.
  void warm_up();
  CUresult allocate_on_private_stream(CUdeviceptr* out, std::size_t bytes);
  // One stream-ordered allocation from the default pool on the private stream.
  CUresult allocate_from_pool(CUdeviceptr* out, std::size_t bytes);
  CUresult return_to_pool(CUdeviceptr ptr);
  // Returns the deferred blocks to the pool once the device is done with them (one context
  // synchronisation) when they hold more than the served blocks do, so that deferral cannot swell
  // the pool beyond about twice what the program holds. Not while a graph is being captured.
  void bound_deferred_bytes();

  // A block's entry in blocks_: its size in 256-byte units (at least 1, so never kNoChunk) shifted
  // left once, and the low bit set once it is freed and deferred.
  static constexpr std::size_t kEntryUnit = 256;
  static constexpr detail::ChunkHandle kDeferredBit = 1;
  static detail::ChunkHandle served_entry(std::size_t bytes) noexcept {
    const std::size_t units = std::min<std::size_t>((bytes + kEntryUnit - 1) / kEntryUnit, (std::size_t{1} << 31) - 1);
    return static_cast<detail::ChunkHandle>(std::max<std::size_t>(units, 1) << 1);
  }
  static std::size_t entry_bytes(detail::ChunkHandle entry) noexcept { return std::size_t{entry >> 1} * kEntryUnit; }
  static bool entry_deferred(detail::ChunkHandle entry) noexcept { return (entry & kDeferredBit) != 0; }
  // Deferral may hold at least this much before it synchronises, however little is served.
  static constexpr std::size_t kDeferredFloor = std::size_t{64} << 20;

  const CUmemoryPool pool_;
  const CUstream private_stream_;
  std::once_flag warmed_up_;
  mutable std::mutex mutex_;
  detail::PointerMap blocks_;
  std::deque<std::pair<FenceId, CUdeviceptr>> deferred_;
  std::size_t served_bytes_ = 0;    // entry_bytes of the served (not deferred) blocks in blocks_
  std::size_t deferred_bytes_ = 0;  // entry_bytes of the deferred ones
};

}  // namespace gpumem::shim
