// cuda_async mode (TensorFlow's cuda_malloc_async): synchronous cuMemAlloc_v2 is served from a
// stream-ordered pool on a private stream and completed before returning. The pool is one the
// manager creates IPC-capable (POSIX descriptors), so its blocks can be shared with other processes
// (docs/ipc.md); where the driver cannot make one, the device's default pool. Stream-ordered calls of
// the program reach the device's current pool untouched.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "base/log.h"
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
  // Creates the pool (or takes the default one), sets its release threshold and the default pool's
  // (the limit when preallocating, else 0) and creates the private stream; null (and the reason in
  // `messages`) if the device has no usable pool.
  static std::unique_ptr<CudaAsyncManager> create(CUcontext context, CUdevice device, const Policy& policy,
                                                  std::size_t limit_bytes, log::Pending& messages);

  CudaAsyncManager(CUcontext context, CUdevice device, const Policy& policy, std::size_t limit_bytes,
                   CUmemoryPool pool, bool pool_is_own, CUmemoryPool default_pool, CUstream private_stream);

 private:
  CUresult do_allocate(CUdeviceptr* out, std::size_t bytes) override;
  CUresult do_free(CUdeviceptr ptr) override;
  CUresult do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) override;
  CUresult do_free_async(CUdeviceptr ptr, StreamArg stream) override;
  bool do_owns(CUdeviceptr ptr) const override;
  IpcBlock do_ipc_block(CUdeviceptr ptr) const override;
  std::optional<BlockRange> do_block_range(CUdeviceptr ptr) const override;
  // cudaMalloc memory is open to every context that enabled peer access to its context; pool memory
  // only to the devices cuMemPoolSetAccess names, so the pool names them.
  void do_refresh_peer_access() override;
  void do_context_synchronized(FenceId through) override;
  void do_retire() noexcept override;
  // In use: the live blocks' bytes as the budget charges them (all of this mode's blocks come from
  // the pools). Reserved: the pools' reservations, asked of the driver (current and high marks);
  // do_try_fill_stats (used at exit, where no CUDA call is made) gives the last figures asked.
  void do_fill_stats(ManagerStats& stats) const override;
  bool do_try_fill_stats(ManagerStats& stats) const override;
  void refresh_pool_figures() const noexcept;
  // Counts a pool allocation; every kRefreshEvery-th refreshes the figures (one driver query), so
  // those read at exit are recent without a query per allocation.
  void note_pool_allocation() noexcept;
  static constexpr std::uint64_t kRefreshEvery = 64;
  const char* do_mode_name() const noexcept override { return "cuda_async"; }
  std::string do_serving() const override { return "cuda_async pool"; }

  // TensorFlow's warm-up: allocate the configured bytes once and free them, so the pool holds them.
  void warm_up();
  CUresult allocate_on_private_stream(CUdeviceptr* out, std::size_t bytes);
  // One stream-ordered allocation from the default pool on the private stream.
  CUresult allocate_from_pool(CUdeviceptr* out, std::size_t bytes);
  CUresult return_to_pool(CUdeviceptr ptr);
  // The device ran out of memory: idle memory both pools keep (up to their release thresholds) goes
  // back, so neither starves the other.
  void release_idle_pool_memory() const noexcept;
  // gpumem_trim, and a shared GPU's request to give memory back: blocks freed and waiting for a
  // synchronisation go back to the pool, and the pools give their idle memory back to the driver.
  std::size_t do_trim() override;
  // The pool's POSIX descriptor for IPC, exported at the first call and kept open while the pool
  // lives (importers fetch it from this process); -1, after logging why, if it cannot be had.
  int pool_export_fd(CUresult& failure) const;
  // Returns the deferred blocks to the pool once the device is done with them (one context
  // synchronisation) when they hold more than the served blocks do, so that deferral cannot swell
  // the pool beyond about twice what the program holds. Not while a graph is being captured.
  void bound_deferred_bytes();

  // A block's entry in blocks_: its size in 256-byte units (at least 1, so never kNoChunk) shifted
  // left once, and the low bit set once it is freed and deferred.
  static constexpr std::size_t kEntryUnit = 256;
  static constexpr detail::ChunkHandle kDeferredBit = 1;
  static detail::ChunkHandle served_entry(std::size_t bytes) noexcept {
    const std::size_t units = std::min<std::size_t>(bytes / kEntryUnit + (bytes % kEntryUnit != 0), (std::size_t{1} << 31) - 1);
    return static_cast<detail::ChunkHandle>(std::max<std::size_t>(units, 1) << 1);
  }
  static std::size_t entry_bytes(detail::ChunkHandle entry) noexcept { return std::size_t{entry >> 1} * kEntryUnit; }
  static bool entry_deferred(detail::ChunkHandle entry) noexcept { return (entry & kDeferredBit) != 0; }
  // Deferral may hold at least this much before it synchronises, however little is served.
  static constexpr std::size_t kDeferredFloor = std::size_t{64} << 20;

  const CUmemoryPool pool_;
  const bool pool_is_own_;  // created here, IPC-capable; else pool_ is the default pool
  const CUmemoryPool default_pool_;
  const CUstream private_stream_;
  std::mutex peer_mutex_;
  // Devices this manager opened pool_ to (not those the program opened a default pool to itself).
  std::vector<CUdevice> pool_peers_;  // guarded by peer_mutex_
  mutable std::mutex export_mutex_;
  mutable int export_fd_ = -1;  // guarded by export_mutex_
  std::once_flag warmed_up_;
  mutable std::mutex mutex_;
  detail::PointerMap blocks_;
  std::deque<std::pair<FenceId, CUdeviceptr>> deferred_;
  std::size_t served_bytes_ = 0;    // entry_bytes of the served (not deferred) blocks in blocks_
  std::size_t deferred_bytes_ = 0;  // entry_bytes of the deferred ones
  // The pool's reserved bytes and high mark as the driver last answered (refresh_pool_figures).
  mutable std::atomic<std::size_t> pool_reserved_{0};
  mutable std::atomic<std::size_t> pool_peak_reserved_{0};
  std::atomic<std::uint64_t> pool_allocations_{0};
};

}  // namespace gpumem::shim
