// bfc mode: a BFC arena per context over driver regions or one VMM range.
#include "managers/bfc_manager.h"

#include <algorithm>

#include "context/capture_state.h"
#include "context/peer_access.h"
#include "base/cuda_status.h"
#include "base/log.h"
#include "driver/real_driver.h"
#include "exports/export_table.h"
#include "context/stream_domain.h"

namespace gpumem::shim {
namespace {

ArenaOptions arena_options(const Policy& policy, std::size_t limit_bytes, bool preallocate,
                           std::size_t preallocation_bytes, bool shared) {
  ArenaOptions options;
  // Shared, memory beyond the preallocation is the other processes': freed memory is reused first.
  // Preallocated, freed memory is reused before idle memory moves (a VMM arena unmapping it to map it
  // under a block elsewhere): another process could take it in between, and the preallocation
  // would no longer be the process's.
  if (shared || preallocate) {
    options.fences_before_growth_above = !preallocate ? 0 : preallocation_bytes > 0 ? preallocation_bytes : limit_bytes;
  }
  // Growing, with frees that wait for a synchronisation: fenced chunks are otherwise reused only at
  // the limit, so the arena would grow far past the live set. A synchronisation is cheaper than more
  // memory while the live blocks fill less than half of the arena: it then stays within about twice
  // the live peak plus a growth step, and synchronises only where it would otherwise grow.
  if (!preallocate && policy.free_sync == FreeSync::defer) options.fences_before_growth_below_use = 0.5;
  options.limit = limit_bytes;
  options.preallocate = preallocate;
  options.preallocation_bytes = preallocation_bytes;
  options.preallocation_head_bytes =
      preallocation_head_bytes(preallocation_bytes > 0 ? std::min(preallocation_bytes, limit_bytes) : limit_bytes);
  options.garbage_collection = policy.garbage_collection;
  options.max_internal_fragmentation = max_internal_fragmentation(policy.split_rule);
  options.block_alignment = kDeviceBlockAlignment;
  return options;
}

// The VMM source where the policy allows it and the device supports it: GPUMEM_REGION_SOURCE=auto
// (the default) is resolved here, per device; classic regions where the driver has no virtual memory
// management (named in the start line, BfcManager::do_serving; a warning when vmm was asked for by
// name). A shared GPU's arena takes memory beyond its guarantee a granule per piece: what it
// borrowed goes back as soon as it is idle; within the guarantee it holds memory as an unshared
// arena does, in few pieces.
std::optional<VmmRegionSource> vmm_source_for(const Policy& policy, CUdevice device, std::size_t limit_bytes,
                                              std::optional<std::size_t> shared_guarantee) {
  const bool automatic = policy.region_source == RegionSourceChoice::automatic;
  if (policy.region_source == RegionSourceChoice::classic) return std::nullopt;
  const std::size_t granularity = VmmRegionSource::granularity_for(device);
  if (granularity == 0) {
    log::at(automatic ? LogLevel::info : LogLevel::warn,
            "device {}: GPUMEM_REGION_SOURCE={}, but the driver does not support virtual memory management "
            "there; the arena uses classic regions", device, automatic ? "auto" : "vmm");
    return std::nullopt;
  }
  if (limit_bytes < granularity) {  // not one granule to map: classic regions serve such a limit
    log::at(LogLevel::debug, "device {}: a limit of {} bytes is below the {}-byte VMM granularity; the arena "
            "uses classic regions", device, limit_bytes, granularity);
    return std::nullopt;
  }
  return std::optional<VmmRegionSource>(std::in_place, device, limit_bytes, granularity,
                                        ArenaOptions{}.min_growth_bytes,
                                        shared_guarantee.value_or(std::numeric_limits<std::size_t>::max()));
}

// Synchronisations an allocation waits for before it takes memory whatever is fenced (or gives up at
// the limit); more than one only when other threads keep freeing meanwhile.
constexpr int kFenceSyncAttempts = 3;

}  // namespace

BfcManager::BfcManager(CUcontext context, CUdevice device, const Policy& policy, std::size_t limit_bytes,
                       CUmemoryPool default_pool, bool preallocate, std::size_t preallocation_bytes,
                       std::optional<std::size_t> shared_guarantee)
    : MemoryManager(context, device, policy, limit_bytes),
      classic_source_(device),
      vmm_source_(vmm_source_for(policy, device, limit_bytes, shared_guarantee)),
      fences_(fence_ids()),
      arena_(vmm_source_ ? static_cast<RegionSource&>(*vmm_source_) : classic_source_,
             arena_options(policy, limit_bytes, preallocate, preallocation_bytes, shared_guarantee.has_value()),
             &fences_),
      default_pool_(default_pool),
      preallocate_(preallocate),
      preallocation_bytes_(preallocation_bytes),
      shared_(shared_guarantee.has_value()) {}

std::string BfcManager::do_serving() const {
  const bool automatic = policy().region_source == RegionSourceChoice::automatic;
  return fmt::format("bfc arena, {}, {} regions{}", preallocate_ ? "preallocated" : "growing on demand",
                     vmm_source_ ? "vmm" : "classic", automatic ? " (auto)" : "");
}

CUresult BfcManager::allocate_from_arena(CUdeviceptr* out, std::size_t bytes, std::uintptr_t stream_domain,
                                         const StreamArg* stream) {
  // A graph capture forbids the synchronisation that would free fenced memory (the driver would
  // refuse it and end the capture): the arena grows instead where it can, and where it cannot, the
  // driver serves the request itself, as it would without gpumem.
  const bool capturing = capture_state::active();
  if (shared_ && vmm_source_) {  // what lies beyond the guarantee now is taken a granule per piece
    if (const share::Member* member = budget::shared(device())) vmm_source_->set_fine_above(member->terms().guarantee);
  }
  budget::clear_refusal_cause();  // what refuses from here on is this request's
  // On a shared GPU, a charge that must wait asks the others once for all this request may map
  // (its block, or at the first allocation the preallocation), not for one piece at a time.
  std::optional<budget::ExpectedNeed> need;
  if (budget::shared(device()) != nullptr) {
    const bool first = preallocate_ && do_reserved_bytes_now() == 0;
    const std::size_t preallocation = preallocation_bytes_ > 0 ? std::min(preallocation_bytes_, limit_bytes()) : limit_bytes();
    need.emplace(device(), first ? std::max(bytes, preallocation) : bytes);
  }
  std::uintptr_t address = 0;
  Status status = arena_.allocate(bytes, address, stream_domain,
                                  capturing ? FencedMemory::grow_instead : FencedMemory::synchronise_first);
  if (status != Status::ok && capturing) {
    count_pass_through();
    log::at(LogLevel::debug, "device {}: {} bytes from the driver while a graph capture is under way",
            device(), bytes);
    const CUresult result = allocate_charged(out, bytes, BudgetPath::driver, "cuMemAlloc", [&] {
      return stream == nullptr ? real_driver().cuMemAlloc_v2(out, bytes)
                               : driver_passthrough::mem_alloc_async(out, bytes, *stream);
    });
    return count_path(count_driver_alloc(result), AllocationPath::driver, bytes);
  }
  for (int attempt = 1; status == Status::fences_pending && attempt <= kFenceSyncAttempts; ++attempt) {
    if (synchronize_for_reuse() != CUDA_SUCCESS) break;
    // Other threads kept fencing meanwhile: the last attempt takes memory where the limit allows.
    status = arena_.allocate(bytes, address, stream_domain,
                             attempt < kFenceSyncAttempts ? FencedMemory::synchronise_first : FencedMemory::grow_instead);
  }
  if (status == Status::ok) {
    *out = static_cast<CUdeviceptr>(address);
    warn_once_if_preallocation_shrank();
    return count_path(CUDA_SUCCESS, AllocationPath::arena, bytes);
  }
  return to_cuda_result(status);
}

void BfcManager::warn_once_if_preallocation_shrank() {
  if (preallocation_checked_.load(std::memory_order_relaxed) ||
      preallocation_checked_.exchange(true, std::memory_order_relaxed)) {
    return;
  }
  const ArenaStats stats = arena_.stats();
  // A refusal that the 0.9x retries made up for (the whole limit reserved in the end) is no news;
  // the VMM source maps whole granules, so its whole limit is the limit rounded down to one.
  const std::size_t granule = vmm_source_ ? vmm_source_->resize_granule() : 1;
  const std::size_t wanted = preallocation_bytes_ > 0 ? std::min(preallocation_bytes_, limit_bytes()) : limit_bytes();
  if (preallocate_ && stats.bytes_reserved < wanted / granule * granule) {
    // One line, naming what refused: on a shared GPU the others' holdings explain it (info), a budget
    // or a driver's refusal is news (warn).
    const std::string retries = fmt::format("{} request{} refused, each retried smaller", stats.region_refusals,
                                            stats.region_refusals == 1 ? "" : "s");
    switch (budget::last_refusal_cause()) {
      case budget::RefusalCause::share:
        log::at(LogLevel::info, "device {}: the preallocation reserved {} of {} bytes: the GPU is shared and the "
                "others held the rest ({}); the arena grows beyond it as they give memory back", device(),
                stats.bytes_reserved, wanted, retries);
        break;
      case budget::RefusalCause::share_cap:
      case budget::RefusalCause::limit: {
        const std::string advice =
            budget::shared(device()) != nullptr ? budget::cap_advice(device()) : budget::limit_advice(device());
        log::at(LogLevel::warn, "device {}: the preallocation reserved {} of {} bytes: the budget refused the rest "
                "({}); the limit was {}", device(), stats.bytes_reserved, wanted, retries,
                advice.empty() ? std::string("the device's total") : advice);
        break;
      }
      case budget::RefusalCause::none:
      case budget::RefusalCause::driver:
        log::at(LogLevel::warn, "device {}: the driver refused a {}-byte preallocation; reserved {} bytes instead ({})",
                device(), wanted, stats.bytes_reserved, retries);
        break;
    }
  } else {
    log::at(LogLevel::debug, "device {}: reserved {} bytes at the first allocation ({} requests refused)",
            device(), stats.bytes_reserved, stats.region_refusals);
  }
}

CUresult BfcManager::do_allocate(CUdeviceptr* out, std::size_t bytes) {
  return allocate_from_arena(out, bytes, 0, nullptr);
}

CUresult BfcManager::do_free(CUdeviceptr ptr) {
  const auto address = static_cast<std::uintptr_t>(ptr);
  withdraw_mapping_exports(address);
  Fence fence;
  switch (policy().free_sync) {
    case FreeSync::defer:  // reusable once a context synchronisation began after this point
      fence = Fence{fences_.next_unordered_id(), 0};
      break;
    case FreeSync::sync: {  // what cuMemFree itself does: wait for the device first
      if (capture_state::active()) {  // but a graph capture forbids it: defer instead
        fence = Fence{fences_.next_unordered_id(), 0};
        break;
      }
      const CUresult synced = synchronize_for_reuse();
      if (synced != CUDA_SUCCESS) return synced;
      break;
    }
    case FreeSync::none:  // immediate reuse, as XLA does with a single stream
      break;
  }
  // The free itself asks whether the arena owns the pointer (one lock on the common path); only on a
  // refusal is it asked whether any region holds the pointer at all, and if none does it is the driver's.
  const Status status = arena_.deallocate(address, fence);
  if (status == Status::ok && fence.id != 0) bound_deferred_frees();
  if (status == Status::not_owned && !arena_.owns(address)) {
    count_pass_through();
    return free_passed_through(ptr, [&] { return real_driver().cuMemFree_v2(ptr); });
  }
  return to_cuda_result(status);
}

void BfcManager::bound_deferred_frees() {
  if (deferred_frees_.fetch_add(1, std::memory_order_relaxed) + 1 < kDeferredFreesPerSync) return;
  // Never while a graph is being captured (the driver would end the capture): the count keeps
  // growing and the first free after the capture synchronises.
  if (capture_state::active()) return;
  deferred_frees_.store(0, std::memory_order_relaxed);  // a failed synchronisation is not retried per free
  synchronize_for_reuse();
}

CUresult BfcManager::do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  const driver_passthrough::StreamStatus on = driver_passthrough::stream_status(stream);
  if (on.error != CUDA_SUCCESS) return on.error;  // a destroyed stream: nothing is handed out
  if (on.capturing) {  // the graph must own its allocation nodes
    count_pass_through();
    return count_path(count_driver_alloc(driver_passthrough::mem_alloc_async(out, bytes, stream)),
                      AllocationPath::graph, bytes);
  }
  return allocate_from_arena(out, bytes, fence_domain(stream.handle, stream.per_thread), &stream);
}

CUresult BfcManager::do_free_async(CUdeviceptr ptr, StreamArg stream) {
  const auto address = static_cast<std::uintptr_t>(ptr);
  // Chunks tile the arena's regions: no chunk holds the pointer exactly when no region does.
  const std::optional<ChunkInfo> chunk = arena_.find(address);
  if (!chunk) {
    count_pass_through();
    return free_passed_through(ptr, [&] { return driver_passthrough::mem_free_async(ptr, stream); });
  }
  const driver_passthrough::StreamStatus on = driver_passthrough::stream_status(stream);
  if (on.error != CUDA_SUCCESS) return on.error;  // a destroyed stream: the block stays allocated
  // A captured free makes a graph free node, which the driver accepts for graph allocations only:
  // an arena block gets the driver's answer for any other memory.
  if (on.capturing) return CUDA_ERROR_INVALID_VALUE;
  // The driver frees in stream order only what was allocated so: a cuMemAlloc block stays allocated.
  if (chunk->in_use && chunk->base == address && !chunk->ordered) return CUDA_ERROR_INVALID_VALUE;
  withdraw_mapping_exports(address);
  fences_.poll();
  Fence fence{fences_.record_on_stream(plain_stream_handle(stream.handle, stream.per_thread)),
              fence_domain(stream.handle, stream.per_thread)};
  if (fence.id == 0) fence = Fence{fences_.next_unordered_id(), 0};  // no event: wait for a context sync
  const Status status = arena_.deallocate(address, fence);
  if (status != Status::ok) fences_.abandon(fence.id);
  return to_cuda_result(status);
}

CUresult BfcManager::do_allocate_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                                 StreamArg stream) {
  if (pool != nullptr && pool == default_pool_) return do_allocate_async(out, bytes, stream);
  count_pass_through();  // the program's own pool
  const CUresult result = allocate_pool_charged(out, bytes, BudgetPath::program_pool, pool, "cuMemAllocFromPoolAsync", [&] {
    return driver_passthrough::mem_alloc_from_pool_async(out, bytes, pool, stream);
  });
  return count_path(count_driver_alloc(result), AllocationPath::program_pool, bytes);
}

std::size_t BfcManager::held_unused_bytes() const {
  const ArenaStats stats = arena_.stats();
  return stats.bytes_reserved - stats.bytes_in_use;
}

bool BfcManager::do_owns(CUdeviceptr ptr) const { return arena_.owns(static_cast<std::uintptr_t>(ptr)); }

void BfcManager::withdraw_mapping_exports(std::uintptr_t block_base) const {
  if (!vmm_source_ || !ipc::has_exports()) return;
  const auto chunk = arena_.find(block_base);
  if (chunk && chunk->in_use && chunk->base == block_base) {
    ipc::withdraw_range(chunk->base, chunk->base + chunk->size);
  }
}

IpcBlock BfcManager::do_ipc_block(CUdeviceptr ptr) const {
  const auto address = static_cast<std::uintptr_t>(ptr);
  const auto chunk = arena_.find(address);
  if (!chunk) return IpcBlock{};
  // A classic region's base is what cuMemGetAddressRange answers for any of its blocks (Numba and
  // vLLM export that base and send offsets beside it): the region's own driver handle is the right
  // one. VMM memory has no legacy handle at all, so there every block gets gpumem's.
  if (!vmm_source_ && chunk->region.base == address) return IpcBlock{};
  if (!chunk->in_use) {
    // The driver would export the whole region: refuse, as it refuses memory that is not allocated.
    log::at(LogLevel::error, "cuIpcGetMemHandle: {:#x} is not an allocated block (freed, or never handed out)",
            address);
    return IpcBlock{CUDA_ERROR_INVALID_VALUE};
  }
  IpcBlock block{CUDA_SUCCESS, false, chunk->region.base, chunk->base, chunk->size};
  if (!vmm_source_) return block;
  block.verdict = vmm_source_->export_span(block.block_base, block.block_size, block.vmm_span);
  return block;
}

std::optional<BlockRange> BfcManager::do_block_range(CUdeviceptr ptr) const {
  // A classic region is one driver allocation, whose range holds every block in it (and whose base
  // exports the region: docs/ipc.md). A VMM block may lie over several mappings, or share one with
  // other blocks: the driver's answer would be the mapping, so the block is answered instead.
  if (!vmm_source_) return std::nullopt;
  const auto chunk = arena_.find(static_cast<std::uintptr_t>(ptr));
  if (!chunk || !chunk->in_use) return std::nullopt;  // not a live block: the driver's answer
  // The driver calls mapped memory no legacy IPC memory; the shim exports any block through the
  // pieces it lies over (docs/ipc.md).
  return BlockRange{chunk->base, chunk->size, true};
}

void BfcManager::do_refresh_peer_access() {
  if (!vmm_source_) return;  // cuMemAlloc regions: the driver opens them to peers itself
  const std::lock_guard lock(peer_mutex_);
  const std::vector<CUdevice> wanted = peer_access::devices_with_access(context());
  for (const CUdevice device : vmm_source_->peer_accessors()) {
    if (std::find(wanted.begin(), wanted.end(), device) == wanted.end()) vmm_source_->set_peer_access(device, false);
  }
  for (const CUdevice device : wanted) vmm_source_->set_peer_access(device, true);
}

namespace {

// `vmm`: the VMM source whose pieces are the driver allocations; null for classic regions.
void copy_arena_figures(const ArenaStats& arena, const VmmRegionSource* vmm, ManagerStats& stats) {
  stats.bytes_in_use = arena.bytes_in_use;
  stats.peak_bytes_in_use = arena.peak_bytes_in_use;
  stats.bytes_reserved = arena.bytes_reserved;
  stats.peak_bytes_reserved = arena.peak_bytes_reserved;
  stats.largest_free_block = arena.largest_free_block;
  stats.bytes_fenced = arena.bytes_fenced;
  stats.regions = arena.regions;
  stats.fragmentation = arena.fragmentation;
  // Every classic region is one cuMemAlloc; a VMM region's memory is held in pieces, each one
  // cuMemCreate (as gpumem-replay counts them), some kept unmapped for the next mapping: what the
  // arena holds is theirs.
  stats.counters.driver_allocs += vmm != nullptr ? vmm->pieces_mapped() : arena.region_reservations;
  if (vmm != nullptr) {
    stats.bytes_reserved = vmm->bytes_reserved();
    stats.peak_bytes_reserved = vmm->peak_bytes_reserved();
  }
}

}  // namespace

void BfcManager::do_fill_stats(ManagerStats& stats) const {
  copy_arena_figures(arena_.stats(), vmm_source_ ? &*vmm_source_ : nullptr, stats);
}

bool BfcManager::do_try_fill_stats(ManagerStats& stats) const {
  ArenaStats arena;
  if (!arena_.try_stats(arena)) return false;
  copy_arena_figures(arena, vmm_source_ ? &*vmm_source_ : nullptr, stats);
  return true;
}

std::size_t BfcManager::do_trim() {
  // Fenced chunks count as used until the device is known to be done with them: synchronise once so
  // they can go back too (not while a graph is being captured: the driver would end the capture).
  if (!capture_state::active() && arena_.stats().bytes_fenced > 0) {
    synchronize_for_reuse();
  }
  return arena_.release_free_regions();
}

std::string BfcManager::do_dump() const { return arena_.oom_report(0).render(); }

std::string BfcManager::do_describe_refusal(std::size_t bytes) const {
  const bool driver = budget::last_refusal_cause() == budget::RefusalCause::driver;
  return (driver && budget::shared(device()) == nullptr ? driver_refusal() : limit_advice()) + "\n" +
         arena_.oom_report(bytes).render();
}

std::size_t BfcManager::do_reserved_bytes_now() const noexcept {
  return vmm_source_ ? vmm_source_->bytes_reserved() : classic_source_.bytes_reserved();
}

void BfcManager::do_retire() noexcept {
  if (vmm_source_) {
    vmm_source_->abandon();  // mappings outlive the context: they are given back here
  } else {
    classic_source_.abandon();
  }
}

MemoryManager::IdleGiveBack BfcManager::do_give_back_idle(std::size_t want) noexcept {
  IdleGiveBack result;
  if (want > 0 && vmm_source_) {
    // cuMemUnmap waits for the device's queued work ("exhibits synchronous behavior"), and the arena's
    // lock is held across it: only once the work queued so far is done, so that a program computing
    // for long is not kept out of its own arena meanwhile.
    if (!device_quiet()) {
      result.device_busy = true;
    } else {
      while (result.bytes < want && !idle_give_back_should_stop()) {
        const std::optional<std::size_t> step =
            arena_.try_release_idle(std::min(want - result.bytes, kGiveBackStepBytes));
        if (!step) {
          result.busy = true;  // a program thread is in the arena: the thread tries again shortly
          break;
        }
        result.bytes += *step;
        if (*step == 0) break;
      }
    }
  }
  ArenaStats stats;
  if (!arena_.try_stats(stats)) {
    result.busy = true;
    return result;
  }
  result.in_use = stats.bytes_in_use;
  if (vmm_source_) {
    const std::size_t held = vmm_source_->bytes_reserved();
    result.idle = held > stats.bytes_in_use ? held - stats.bytes_in_use : 0;
  }
  // Memory still fenced: the next event over the context resolves it.
  if (want > result.bytes && !result.busy && vmm_source_ && stats.bytes_fenced > 0) result.fences_pending = true;
  return result;
}

bool BfcManager::device_quiet() noexcept {
  const RealDriver& driver = real_driver();
  if (driver.cuCtxRecordEvent == nullptr || driver.cuEventQuery == nullptr) return true;  // cannot tell
  if (!context_event_pending_) {
    if (context_event_ == nullptr && driver.cuEventCreate(&context_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      context_event_ = nullptr;
      return true;
    }
    const FenceId through = last_fence_id();  // every fence drawn before the event is recorded
    if (driver.cuCtxRecordEvent(context(), context_event_) != CUDA_SUCCESS) return true;
    context_event_through_ = through;
    context_event_pending_ = true;
  }
  const CUresult done = driver.cuEventQuery(context_event_);
  if (done == CUDA_ERROR_NOT_READY) return false;
  context_event_pending_ = false;
  // Complete: the work queued before it is done, and the fences drawn before it with it (the arena
  // asks its oracle); an error says nothing of the device (the unmapping may wait).
  if (done == CUDA_SUCCESS && context_event_through_ != 0) fences_.resolve_through(context_event_through_);
  context_event_through_ = 0;
  return true;
}

void BfcManager::do_context_synchronized(FenceId through) {
  deferred_frees_.store(0, std::memory_order_relaxed);
  fences_.resolve_through(through);
  arena_.resolve_fences_through(through);
}

}  // namespace gpumem::shim
