// bfc mode: one best-fit-with-coalescing arena per context, over regions from the real driver.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>

#include "bfc_arena.h"
#include "regions/cuda_region_source.h"
#include "regions/vmm_region_source.h"
#include "managers/memory_manager.h"
#include "context/stream_fences.h"

namespace gpumem::shim {

// Invariants: every pointer the arena handed out lies in a region obtained with cuMemAlloc_v2 in
// `context()`, or with the VMM source in the one virtual range it reserved for this arena; a chunk freed synchronously is reused only as Policy::free_sync allows (defer: after a
// context synchronisation that began after the free; sync: the free itself synchronised; none: at
// once), and a chunk freed with cuMemFreeAsync on stream S at once on S, elsewhere only after the event
// recorded at its free completed; the arena is never destroyed (the driver frees its regions with the
// context).
class BfcManager final : public MemoryManager {
 public:
  // `default_pool` is the device's default memory pool (null if it has none): allocations from it
  // are served like cuMemAllocAsync. `preallocate`: the policy's choice, unless other paths already
  // hold part of the device's budget (then the arena grows on demand, so it cannot starve them).
  // `preallocation_bytes`: what preallocation reserves (0: the whole limit); a GPU shared with other
  // processes (`shared_guarantee`: its guarantee when the manager is made) preallocates the policy's
  // fraction of the guaranteed share, and takes memory beyond the guarantee (as it is now) a granule
  // per piece, so that idle granules can go back to the others (docs/sharing.md).
  BfcManager(CUcontext context, CUdevice device, const Policy& policy, std::size_t limit_bytes,
             CUmemoryPool default_pool, bool preallocate, std::size_t preallocation_bytes = 0,
             std::optional<std::size_t> shared_guarantee = std::nullopt);

 private:
  CUresult do_allocate(CUdeviceptr* out, std::size_t bytes) override;
  CUresult do_free(CUdeviceptr ptr) override;
  CUresult do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) override;
  CUresult do_free_async(CUdeviceptr ptr, StreamArg stream) override;
  CUresult do_allocate_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                       StreamArg stream) override;
  std::size_t held_unused_bytes() const override;
  bool do_owns(CUdeviceptr ptr) const override;
  IpcBlock do_ipc_block(CUdeviceptr ptr) const override;
  std::optional<BlockRange> do_block_range(CUdeviceptr ptr) const override;
  void do_refresh_peer_access() override;
  // Virtual memory gives back idle granules anywhere; a classic preallocated region goes back only whole.
  bool do_keeps_preallocation() const noexcept override { return preallocate_ && !vmm_source_; }
  // A VMM block about to be freed: the handles of mappings starting inside it stop opening too (the
  // block's own start is withdrawn by the caller).
  void withdraw_mapping_exports(std::uintptr_t block_base) const;
  void do_context_synchronized(FenceId through) override;
  void do_fill_stats(ManagerStats& stats) const override;
  bool do_try_fill_stats(ManagerStats& stats) const override;
  const char* do_mode_name() const noexcept override { return "bfc"; }
  std::string do_serving() const override;
  std::size_t do_trim() override;
  void do_retire() noexcept override;
  // A VMM arena's idle granules go back in bounded steps under a try-lock; a classic region would go
  // back with a cuMemFree, which waits for the device: only its figures.
  IdleGiveBack do_give_back_idle(std::size_t want) noexcept override;
  // Whether the work queued on the context so far is done, by an event recorded over the context
  // (cuCtxRecordEvent) and queried, never waited for: recorded at the first look, and once complete it
  // also resolves every fence drawn before it, as a synchronisation would. True where the driver
  // cannot tell (before 12.5).
  bool device_quiet() noexcept;
  std::string do_dump() const override;
  std::string do_describe_refusal(std::size_t bytes) const override;
  std::size_t do_reserved_bytes_now() const noexcept override;

  // Allocates from the arena; when only fenced memory would fit, synchronises the context once,
  // resolves every fence issued before it, and retries. Logs the OOM report on failure.
  // `stream`: the request's stream for a stream-ordered request, null for a synchronous one.
  CUresult allocate_from_arena(CUdeviceptr* out, std::size_t bytes, std::uintptr_t stream_domain,
                               const StreamArg* stream);
  void warn_once_if_preallocation_shrank();
  // Deferred frees: one context synchronisation every kDeferredFreesPerSync of them (see there).
  void bound_deferred_frees();

  // Where the arena's regions come from: vmm_source_ when engaged (Policy::region_source and the
  // device's support for virtual memory management decide), else classic_source_.
  CudaRegionSource classic_source_;
  std::optional<VmmRegionSource> vmm_source_;
  StreamFences fences_;
  BfcArena arena_;
  const CUmemoryPool default_pool_;
  const bool preallocate_;
  const std::size_t preallocation_bytes_;  // 0: the limit
  const bool shared_;                      // the device is shared: the source follows the guarantee
  std::atomic<bool> preallocation_checked_{false};
  // Serialises peer access refreshes, so that the last one applies the table as it is then.
  std::mutex peer_mutex_;
  // A loop that frees with GPUMEM_FREE_SYNC=defer and never synchronises the context would pile up
  // fenced chunks: records the arena keeps, skips and searches past on every allocation (at 200k of
  // them a cuMemAlloc+cuMemFree pair cost 2.5x what it does with the pile bounded). After this many
  // deferred frees one synchronisation resolves them all; cuMemFree itself synchronises on every
  // call, so the safety is the same at 1/1024 of the waits.
  static constexpr std::uint32_t kDeferredFreesPerSync = 1024;
  std::atomic<std::uint32_t> deferred_frees_{0};  // since the last context synchronisation
  // Used by the device's reclaim thread alone (one thread per device; give_back_idle runs one at a
  // time per manager): its event, made at its first use, whether one is recorded and not yet seen
  // complete, and the last fence drawn before it was recorded.
  CUevent context_event_ = nullptr;
  bool context_event_pending_ = false;
  FenceId context_event_through_ = 0;
  // A give-back unmaps at most about this much per arena call, so the program waits for the arena's
  // lock no longer than that takes (one free chunk is unmapped whole, however large).
  static constexpr std::size_t kGiveBackStepBytes = 64 * kMiB;
};

}  // namespace gpumem::shim
