// The memory manager of one CUDA context: the interface every mode implements.
//
// Public calls are non-virtual and do what all modes share (argument checks, counting), then
// forward to the private do_* hooks of the mode. Allocations are made with the manager's context
// current; frees and queries may come while another context is current (the driver allows freeing any
// context's memory). Every call is thread-safe.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "budget/budgets.h"
#include "budget/pool_reserve.h"
#include "driver/real_driver.h"
#include "fence.h"
#include "exports/ipc_block.h"
#include "policy/policy.h"

namespace gpumem::shim {

// A stream as the program named it: `per_thread` is true for the _ptsz entry points (stream 0 is then
// the calling thread's default stream).
struct StreamArg {
  CUstream handle = nullptr;
  bool per_thread = false;
};

// Where a served request's memory came from. Each path is counted apart, so a program (and the
// exit statistics) can see which part of its memory each one took.
enum class AllocationPath : std::uint8_t {
  arena,         // a bfc arena chunk
  driver,        // the driver's cuMemAlloc/cuMemAllocAsync on the program's behalf (platform mode,
                 // or a request the arena passed on)
  async_pool,    // cuda_async mode: the device's stream-ordered pool
  program_pool,  // cuMemAllocFromPoolAsync from a pool the program created (passed through)
  graph,         // a stream-ordered allocation captured into a graph (the graph owns it)
};
inline constexpr std::size_t kAllocationPaths = 5;
// The name used in the exit statistics and their JSON ("arena", "async_pool", ...).
std::string_view to_string(AllocationPath path) noexcept;

// What one path served: successful allocations and the bytes they asked for, summed.
struct PathCounters {
  std::uint64_t allocs = 0;
  std::uint64_t bytes = 0;
};

// Counters kept for every mode. Invariant: frees <= allocs; failed_allocs counts refusals only; the
// paths' allocs add up to allocs.
struct ManagerCounters {
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t failed_allocs = 0;
  std::uint64_t passed_through = 0;  // requests handed to the driver untouched (foreign, captured)
  std::uint64_t driver_allocs = 0;   // device allocations made through the driver (bfc: its regions too)
  std::uint64_t fence_syncs = 0;     // context synchronisations the shim made so freed memory could be reused
  std::array<PathCounters, kAllocationPaths> paths{};
  // Nanoseconds spent inside the allocation and free calls served, counted only when statistics were
  // asked for (GPUMEM_STATS, GPUMEM_STATS_FILE): else the clock is never read, and this stays 0.
  std::uint64_t call_ns = 0;
};

// A block as pointer queries describe it (cuMemGetAddressRange, the RANGE_* pointer attributes).
struct BlockRange {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  // CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: whether cuIpcGetMemHandle exports the block.
  bool legacy_ipc_capable = false;
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
  double fragmentation = 0.0;  // share of the free reserved bytes outside the largest free block
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

  // gpumem_trim: gives back to the driver what this manager holds wholly unused (synchronising first
  // when freed memory still waits for the device, unless a graph is being captured). Returns the
  // bytes given back.
  std::size_t trim() { return do_trim(); }
  // The context is being destroyed, and this manager's memory with it: what it charged to the
  // device's budget is refunded. Its figures stay readable; it serves nothing more. Waits for a
  // give_back_idle under way (a bounded step), and none starts afterwards.
  void retire() noexcept;

  // For the reclaim thread of a GPU shared with other processes (budget/reclaim_thread.h): gives back
  // up to about `want` bytes this manager holds unused, with the manager's context pushed on the
  // calling thread, never waiting for the program (an arena another call holds: `busy`) nor for the
  // device (memory still fenced goes back once an event says the work before its free completed:
  // `fences_pending`; nothing is unmapped while work queued before the request runs: `device_busy`).
  // With `want` 0, only the figures. Never after retire().
  struct IdleGiveBack {
    std::size_t bytes = 0;   // given back
    std::size_t idle = 0;    // still held unused that a later call can give back (fenced included)
    std::size_t in_use = 0;  // in live blocks
    bool busy = false;
    bool fences_pending = false;
    bool device_busy = false;  // the device still runs work queued before the request: not yet
  };
  IdleGiveBack give_back_idle(std::size_t want) noexcept;
  // gpumem_dump: the manager's memory as text, as the out-of-memory report shows it.
  std::string dump() const;
  // Bytes held from the driver now, for the trace; kUnknownBytes when the mode does not track them.
  static constexpr std::size_t kUnknownBytes = static_cast<std::size_t>(-1);
  std::size_t reserved_bytes_now() const noexcept { return do_reserved_bytes_now(); }

  // True if `ptr` was handed out by this manager (any address inside one of its blocks or regions).
  bool owns(CUdeviceptr ptr) const { return do_owns(ptr); }
  // For cuIpcGetMemHandle: what holds `ptr` (a pointer this manager owns).
  IpcBlock ipc_block(CUdeviceptr ptr) const { return do_ipc_block(ptr); }
  // For pointer queries: the live block holding `ptr` where the driver's own answer would describe other
  // memory (the mappings under a block of a VMM-backed arena); nullopt where the driver's answer holds.
  std::optional<BlockRange> block_range(CUdeviceptr ptr) const { return do_block_range(ptr); }
  // Whether the manager keeps a preallocated region that it cannot give back in part while blocks live in
  // it (classic arena regions): growing on demand would hold less. For the budget's refusal advice.
  bool keeps_preallocation() const noexcept { return do_keeps_preallocation(); }
  // Peer access to this context's memory changed (peer_access.h): memory the driver does not open to
  // peers by itself (a VMM-backed arena's) is opened to exactly the devices the table names now.
  void refresh_peer_access() { do_refresh_peer_access(); }

  // Frees memory that went to the driver past the manager (the program's own pools, pool blocks):
  // its budget charge (the ledger's) is refunded before the free, since another thread may be handed
  // the address at once, and restored if the free fails.
  template <typename Free>
  static CUresult free_passed_through(CUdeviceptr ptr, Free&& free) {
    return budget::free_block(static_cast<std::uintptr_t>(ptr), free);
  }
  // Context synchronisation: capture last_fence_id() before the real synchronisation, then report
  // that it completed; every free up to that id is then safe to reuse.
  FenceId last_fence_id() const noexcept { return fence_ids_.load(std::memory_order_acquire); }
  void context_synchronized(FenceId through) { do_context_synchronized(through); }

  ManagerCounters counters() const noexcept;
  ManagerStats stats() const;
  // stats() into `out`; with `never_wait`, false (and only the counters and limit filled) when another
  // thread holds the manager's figures right now.
  bool stats_snapshot(ManagerStats& out, bool never_wait) const;
  // One line for the log when the manager retires (its context goes, or the process exits): what it
  // served and what it took from the driver. With `never_wait`, nothing (an empty string) if
  // another thread holds the manager's figures right now.
  std::string summary(bool never_wait = false) const;
  CUcontext context() const noexcept { return context_; }
  CUdevice device() const noexcept { return device_; }
  std::size_t limit_bytes() const noexcept { return limit_bytes_; }
  const char* mode_name() const noexcept { return do_mode_name(); }
  // How this manager serves memory, in a few words for the line said when gpumem takes over a device:
  // "bfc arena, preallocated, vmm regions".
  std::string serving() const { return do_serving(); }

 protected:
  const Policy& policy() const noexcept { return policy_; }
  // Shared by every fence this context issues, so "all fences up to X" is one comparison.
  std::atomic<FenceId>& fence_ids() noexcept { return fence_ids_; }
  void count_pass_through() noexcept { passed_through_.fetch_add(1, std::memory_order_relaxed); }
  // A synchronisation made so that fenced (freed) memory could be reused.
  void count_fence_sync() noexcept { fence_syncs_.fetch_add(1, std::memory_order_relaxed); }
  // Records which path served a successful request of `bytes`; returns `result` unchanged (counts
  // nothing when it is an error).
  CUresult count_path(CUresult result, AllocationPath path, std::size_t bytes) noexcept {
    if (result == CUDA_SUCCESS) {
      PathCells& cells = path_cells_[static_cast<std::size_t>(path)];
      cells.allocs.fetch_add(1, std::memory_order_relaxed);
      cells.bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    return result;
  }
  // Counts a successful device allocation made through the driver (the shim's own included, such as
  // a region or the cuda_async warm-up); returns `result` unchanged.
  CUresult count_driver_alloc(CUresult result) noexcept {
    if (result == CUDA_SUCCESS) driver_allocs_.fetch_add(1, std::memory_order_relaxed);
    return result;
  }
  // Allocates from a pool past the manager, charged to `path` in the device's budget and kept in the
  // ledger until freed.
  template <typename Allocate>
  CUresult allocate_charged(CUdeviceptr* out, std::size_t bytes, BudgetPath path, std::string_view call,
                            Allocate&& allocate) {
    const CUresult result = budget::charged(device_, path, bytes, call, allocate, [&] { real_driver().cuMemFree_v2(*out); });
    if (result == CUDA_SUCCESS) budget::remember_block(static_cast<std::uintptr_t>(*out), device_, path, bytes);
    return result;
  }
  // The same for a block of the stream-ordered pool `pool`, which keeps the block's memory when it is
  // freed: charged as budget/pool_reserve.h says (what the pool holds idle is taken first).
  template <typename Allocate>
  CUresult allocate_pool_charged(CUdeviceptr* out, std::size_t bytes, BudgetPath path, CUmemoryPool pool,
                                 std::string_view call, Allocate&& allocate) {
    const std::optional<std::size_t> charged = budget::charge_pool_block(device_, pool, path, bytes, call);
    if (!charged) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult result = allocate();
    if (result == CUDA_SUCCESS) budget::remember_block(static_cast<std::uintptr_t>(*out), device_, path, bytes, pool);
    budget::pool_block_allocated(device_, pool, path, bytes, *charged, result == CUDA_SUCCESS);
    return result;
  }
  // "limit N bytes, <where it came from and what to raise>", for out-of-memory reports.
  std::string limit_advice() const;
  // For a refusal the driver made (budget::RefusalCause::driver): what the device has free, and why.
  std::string driver_refusal() const;
  // Synchronises this manager's context so that freed memory can be reused, then resolves every fence
  // drawn before the synchronisation began (counted as a fence sync). Returns the synchronisation's
  // result; on failure nothing is resolved.
  CUresult synchronize_for_reuse();
  // For a give-back between its steps: the manager is being retired, or the reclaim thread must yield.
  bool idle_give_back_should_stop() const noexcept;

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
  // Default: total = the device's budget limit, free = what the budget still allows (plus what the
  // manager holds unused), never above the device's own free memory.
  virtual CUresult do_get_info(std::size_t* free_bytes, std::size_t* total_bytes);
  virtual bool do_owns(CUdeviceptr ptr) const = 0;
  // Default: a whole driver allocation.
  virtual IpcBlock do_ipc_block(CUdeviceptr /*ptr*/) const { return IpcBlock{}; }
  // Default: the driver's answers hold.
  virtual std::optional<BlockRange> do_block_range(CUdeviceptr /*ptr*/) const { return std::nullopt; }
  // Default: the driver opens the manager's memory to peers itself.
  virtual void do_refresh_peer_access() {}
  // Default: nothing preallocated.
  virtual bool do_keeps_preallocation() const noexcept { return false; }
  virtual void do_context_synchronized(FenceId through) = 0;
  // Default: nothing beyond the counters and the limit.
  virtual void do_fill_stats(ManagerStats& /*stats*/) const {}
  // do_fill_stats without waiting for a lock: false if it would have to. Default: the same.
  virtual bool do_try_fill_stats(ManagerStats& stats) const {
    do_fill_stats(stats);
    return true;
  }
  virtual const char* do_mode_name() const noexcept = 0;
  // Default: the mode's name.
  virtual std::string do_serving() const { return do_mode_name(); }
  // Default: nothing to give back.
  virtual std::size_t do_trim() { return 0; }
  // Default: nothing charged outside the ledger (budget/budgets.h), which the registry clears.
  virtual void do_retire() noexcept {}
  // Default: nothing this manager holds can go back without the program (platform memory is the
  // program's; a pool's idle memory the budget trims itself): only the figures.
  virtual IdleGiveBack do_give_back_idle(std::size_t want) noexcept;
  // Default: the figures of stats() as lines.
  virtual std::string do_dump() const;
  // Default: kUnknownBytes.
  virtual std::size_t do_reserved_bytes_now() const noexcept { return kUnknownBytes; }
  // Bytes held from the driver (and charged) that no live block uses, for cuMemGetInfo, besides what
  // stream-ordered pools hold (budget::pools_idle). Default: 0.
  virtual std::size_t held_unused_bytes() const { return 0; }
  // What holds the memory, for the out-of-memory report. Default: the stats as one line.
  virtual std::string do_describe_refusal(std::size_t bytes) const;

  // Synchronises this manager's context with the real driver.
  CUresult synchronize_context() const;
  void count_alloc(CUresult result) noexcept;
  // Traces the free of `ptr` on `stream` (its trace column), runs `free`, and counts it when it succeeds.
  template <typename Free>
  CUresult traced_free(CUdeviceptr ptr, std::uintptr_t stream, Free&& free);
  // Counts the request; on refusal, logs the (rate-limited) out-of-memory report and traces it.
  void finish_alloc(CUresult result, CUdeviceptr* out, std::size_t bytes, std::uintptr_t stream) noexcept;
  // A shared device (docs/sharing.md), after every allocation and free: serves a request of other
  // processes to give memory back, and now and then tells the ledger what is in use. One load of a
  // word when the device is not shared or nothing is asked.
  void look_at_ledger() noexcept;
  // The limit a trace row records: the budget's now on a shared device, else the manager's.
  std::size_t traced_limit() const noexcept;
  // On a shared GPU, the first line of an out-of-memory report: what refused (the share, with the
  // processes holding the GPU; the most this process may hold; the driver) and what would help.
  std::string shared_refusal_cause(share::Member& member, std::size_t bytes) const;

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
  std::atomic<std::uint64_t> fence_syncs_{0};
  // ManagerCounters::call_ns; `timed_`: whether the calls are timed at all.
  const bool timed_;
  std::atomic<std::uint64_t> call_ns_{0};
  class CallTimer;
  std::atomic<std::uint32_t> calls_since_in_use_{0};  // look_at_ledger: allocations and frees
  // give_back_idle against retire(): kIdleFree, kIdleGiving while a give-back runs, kIdleRetired once
  // retired (none starts again).
  enum IdleState : int { kIdleFree, kIdleGiving, kIdleRetired };
  std::atomic<int> idle_state_{kIdleFree};
  std::atomic<bool> retiring_{false};  // a give-back under way stops at its next step
  struct PathCells {
    std::atomic<std::uint64_t> allocs{0};
    std::atomic<std::uint64_t> bytes{0};
  };
  std::array<PathCells, kAllocationPaths> path_cells_{};
};

// The driver's own answers, for requests a manager hands on untouched.
namespace driver_passthrough {
// cuMemGetInfo_v2 writing only the outputs asked for (either may be null).
CUresult mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes);
CUresult mem_alloc_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream);
CUresult mem_free_async(CUdeviceptr ptr, StreamArg stream);
CUresult mem_alloc_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                   StreamArg stream);
// What the driver says of the stream an ordered call names: `error` is its answer for a stream that
// is no longer one (destroyed: CUDA_ERROR_INVALID_HANDLE; its context gone), which the call must
// give too; else `capturing` tells whether it is being captured into a graph (then allocations on
// it must reach the driver).
struct StreamStatus {
  CUresult error = CUDA_SUCCESS;
  bool capturing = false;
};
StreamStatus stream_status(StreamArg stream);
inline bool stream_is_capturing(StreamArg stream) { return stream_status(stream).capturing; }
}  // namespace driver_passthrough

}  // namespace gpumem::shim
