// What every memory manager shares: argument checks, counting, tracing, the out-of-memory report.
#include "managers/memory_manager.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>

#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "base/refusal_limiter.h"
#include "budget/reclaim_thread.h"
#include "base/trace_log.h"
#include "checked_size.h"
#include "context/context_sync.h"
#include "context/pitch.h"
#include "driver/real_driver.h"
#include "context/stream_domain.h"

namespace gpumem::shim {
namespace {

// The stream column of the trace: the handle as the driver sees it (the per-thread default stream
// is CU_STREAM_PER_THREAD); 0 for synchronous calls.
std::uintptr_t stream_column(StreamArg stream) noexcept {
  return reinterpret_cast<std::uintptr_t>(plain_stream_handle(stream.handle, stream.per_thread));
}

}  // namespace

std::string_view to_string(AllocationPath path) noexcept {
  switch (path) {
    case AllocationPath::arena:
      return "arena";
    case AllocationPath::driver:
      return "driver";
    case AllocationPath::async_pool:
      return "async_pool";
    case AllocationPath::program_pool:
      return "program_pool";
    case AllocationPath::graph:
      return "graph";
  }
  return "?";
}

MemoryManager::MemoryManager(CUcontext context, CUdevice device, const Policy& policy,
                             std::size_t limit_bytes)
    : context_(context), device_(device), policy_(policy), limit_bytes_(limit_bytes),
      timed_(policy.stats || !policy.stats_file.empty()) {}

// Adds the time from its making to its end to the manager's call_ns_, when the manager times its calls.
class MemoryManager::CallTimer {
 public:
  explicit CallTimer(MemoryManager& manager) noexcept : sink_(manager.timed_ ? &manager.call_ns_ : nullptr) {
    if (sink_ != nullptr) started_ = now_ns();
  }
  ~CallTimer() {
    if (sink_ != nullptr) sink_->fetch_add(now_ns() - started_, std::memory_order_relaxed);
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  static std::uint64_t now_ns() noexcept {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(now.tv_nsec);
  }
  std::atomic<std::uint64_t>* const sink_;
  std::uint64_t started_ = 0;
};

CUresult MemoryManager::allocate(CUdeviceptr* out, std::size_t bytes) {
  const CallTimer timer(*this);
  budget::clear_refusal_cause();
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;  // as cuMemAlloc_v2 answers
  const CUresult result = do_allocate(out, bytes);
  finish_alloc(result, out, bytes, 0);
  look_at_ledger();
  return result;
}

std::size_t MemoryManager::traced_limit() const noexcept {
  // A shared device's budget moves with the others (its allowance): the trace shows it as it is.
  if (budget::shared(device_) != nullptr) {
    if (const DeviceBudget* budget = budget::existing(device_)) return budget->limit();
  }
  return limit_bytes_;
}

void MemoryManager::look_at_ledger() noexcept {
  share::Member* member = budget::shared(device_);
  if (member == nullptr) {
    budget::retry_join(device_);
    return;
  }
  if (member->reclaim_requested() != 0) budget::serve_reclaim_request(device_);
  // In use, for gpumem-top: at each of the first calls, then once every so many, read without waiting
  // for the manager.
  constexpr std::uint32_t kInUseFirst = 64;
  constexpr std::uint32_t kInUseEvery = 256;
  // A sample, not a count: threads racing here may skip one, which costs nothing.
  const std::uint32_t call = calls_since_in_use_.load(std::memory_order_relaxed);
  calls_since_in_use_.store(call + 1, std::memory_order_relaxed);
  if (call >= kInUseFirst && call % kInUseEvery != 0) return;
  ManagerStats stats;
  if (stats_snapshot(stats, /*never_wait=*/true)) member->note_in_use(stats.bytes_in_use);
}

CUresult MemoryManager::allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                                       std::size_t height, unsigned int element_size_bytes) {
  const CallTimer timer(*this);
  budget::clear_refusal_cause();
  if (out == nullptr || pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = do_allocate_pitch(out, pitch, width_bytes, height, element_size_bytes);
  // For a refusal's report: at least the rows' bytes, SIZE_MAX when that overflows.
  const std::size_t asked = saturating_mul(width_bytes, height);
  finish_alloc(result, out, result == CUDA_SUCCESS ? *pitch * height : asked, 0);
  look_at_ledger();
  return result;
}

template <typename Free>
CUresult MemoryManager::traced_free(CUdeviceptr ptr, std::uintptr_t stream, Free&& free) {
  const CallTimer timer(*this);
  observe::TraceLog* trace = observe::trace_log();
  // Traced before the free: once freed, another thread may be handed the same address.
  const std::uint64_t ticket =
      trace == nullptr ? 0 : observe::trace_free(*trace, ptr, stream, device_, reserved_bytes_now(), traced_limit());
  const CUresult result = free();
  if (result == CUDA_SUCCESS) {
    frees_.fetch_add(1, std::memory_order_relaxed);
  } else if (trace != nullptr) {
    observe::trace_free_failed(*trace, ticket);
  }
  look_at_ledger();
  return result;
}

CUresult MemoryManager::free(CUdeviceptr ptr) {
  return traced_free(ptr, 0, [&] { return do_free(ptr); });
}

CUresult MemoryManager::allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  const CallTimer timer(*this);
  budget::clear_refusal_cause();
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = do_allocate_async(out, bytes, stream);
  finish_alloc(result, out, bytes, stream_column(stream));
  look_at_ledger();
  return result;
}

CUresult MemoryManager::free_async(CUdeviceptr ptr, StreamArg stream) {
  return traced_free(ptr, stream_column(stream), [&] { return do_free_async(ptr, stream); });
}

CUresult MemoryManager::allocate_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                                 StreamArg stream) {
  const CallTimer timer(*this);
  budget::clear_refusal_cause();
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = do_allocate_from_pool_async(out, bytes, pool, stream);
  finish_alloc(result, out, bytes, stream_column(stream));
  look_at_ledger();
  return result;
}

CUresult MemoryManager::get_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  return do_get_info(free_bytes, total_bytes);
}

ManagerCounters MemoryManager::counters() const noexcept {
  ManagerCounters counters{allocs_.load(std::memory_order_relaxed),
                           frees_.load(std::memory_order_relaxed),
                           failed_allocs_.load(std::memory_order_relaxed),
                           passed_through_.load(std::memory_order_relaxed),
                           driver_allocs_.load(std::memory_order_relaxed),
                           fence_syncs_.load(std::memory_order_relaxed),
                           {},
                           call_ns_.load(std::memory_order_relaxed)};
  for (std::size_t i = 0; i < kAllocationPaths; ++i) {
    counters.paths[i] = PathCounters{path_cells_[i].allocs.load(std::memory_order_relaxed),
                                     path_cells_[i].bytes.load(std::memory_order_relaxed)};
  }
  return counters;
}

std::string MemoryManager::dump() const {
  return fmt::format("device {} context {}: {} mode, limit {} bytes\n{}", device_,
                     static_cast<const void*>(context_), mode_name(), limit_bytes_, do_dump());
}

std::string MemoryManager::do_dump() const {
  const ManagerStats s = stats();
  std::string paths;
  for (std::size_t i = 0; i < kAllocationPaths; ++i) {
    const PathCounters& path = s.counters.paths[i];
    if (path.allocs != 0) {
      paths += fmt::format(" {} {} allocations ({} bytes);", to_string(static_cast<AllocationPath>(i)),
                           path.allocs, path.bytes);
    }
  }
  return fmt::format(
      "in use {} bytes (peak {}), reserved {} bytes (peak {}), {} allocations, {} frees, {} refused, "
      "{} driver allocations;{}\n",
      s.bytes_in_use, s.peak_bytes_in_use, s.bytes_reserved, s.peak_bytes_reserved, s.counters.allocs,
      s.counters.frees, s.counters.failed_allocs, s.counters.driver_allocs, paths);
}

std::string MemoryManager::do_describe_refusal(std::size_t /*bytes*/) const {
  // A refused charge has said why in its own line already.
  return std::string(budget::last_charge_refused() ? "gpumem's budget refused it, not the driver (the line before says why)"
                                                   : "the driver refused it") +
         "; this process holds: " + do_dump();
}

std::string MemoryManager::driver_refusal() const {
  std::size_t free = 0;
  driver_passthrough::mem_get_info(&free, nullptr);
  return fmt::format("the driver refused it, not gpumem's budget: {} bytes of the device are free; the rest is held "
                     "outside this process's budget (other programs, contexts): free memory there, or keep the "
                     "budget to what the device has (limit {} bytes, {})", free, limit_bytes_,
                     budget::limit_advice(device_));
}

std::string MemoryManager::limit_advice() const {
  if (budget::shared(device_) != nullptr) {
    // Shared, the manager's limit is the most the process may hold; its budget moves with the share.
    const std::string cap = budget::cap_advice(device_);
    return fmt::format("limit {} bytes, the most this process may hold of the shared GPU: {}", limit_bytes_,
                       cap.empty() ? "the device's total (no GPUMEM_LIMIT or cluster limit applies)" : cap);
  }
  return fmt::format("limit {} bytes, {}", limit_bytes_, budget::limit_advice(device_));
}

void MemoryManager::finish_alloc(CUresult result, CUdeviceptr* out, std::size_t bytes,
                                 std::uintptr_t stream) noexcept {
  count_alloc(result);
  observe::TraceLog* trace = observe::trace_log();
  if (result == CUDA_SUCCESS) {
    if (trace != nullptr) {
      observe::trace_allocate(*trace, observe::TraceEvent{static_cast<std::uintptr_t>(*out), bytes, stream, device_,
                                                          reserved_bytes_now(), traced_limit()});
    }
    return;
  }
  if (trace != nullptr) {
    observe::trace_refusal(*trace, observe::TraceEvent{0, bytes, stream, device_, reserved_bytes_now(), traced_limit()});
  }
  if (result != CUDA_ERROR_OUT_OF_MEMORY || !log::enabled(LogLevel::warn)) return;
  std::string repeated;
  if (!observe::report_refusal(observe::RefusalKind::out_of_memory, bytes, repeated)) return;
  try {
    std::string description = do_describe_refusal(bytes);
    // On a shared GPU, the cause comes first: one line (docs/sharing.md).
    if (share::Member* member = budget::shared(device_)) {
      description = shared_refusal_cause(*member, bytes) + "\n" + description;
    }
    while (!description.empty() && description.back() == '\n') description.pop_back();  // the log ends the line
    log::at(LogLevel::warn, "device {}: out of memory: {} mode refused {} bytes{}\n{}", device_, mode_name(), bytes,
            repeated, description);
  } catch (...) {  // no host memory for the report
  }
}

ManagerStats MemoryManager::stats() const {
  ManagerStats stats;
  stats.counters = counters();
  stats.bytes_limit = limit_bytes_;
  do_fill_stats(stats);
  return stats;
}

bool MemoryManager::stats_snapshot(ManagerStats& out, bool never_wait) const {
  out = ManagerStats{};
  out.counters = counters();
  out.bytes_limit = limit_bytes_;
  if (!never_wait) {
    do_fill_stats(out);
    return true;
  }
  return do_try_fill_stats(out);
}

std::string MemoryManager::summary(bool never_wait) const {
  ManagerStats s;
  if (never_wait) {
    s.counters = counters();
    s.bytes_limit = limit_bytes_;
    if (!do_try_fill_stats(s)) return {};
  } else {
    s = stats();
  }
  return fmt::format(
      "context {} (device {}) summary: {} mode, {} allocations, {} frees, {} refused, {} driver allocations, "
      "peak in use {} bytes, peak reserved {} bytes, limit {} bytes",
      static_cast<const void*>(context_), device_, mode_name(), s.counters.allocs, s.counters.frees,
      s.counters.failed_allocs, s.counters.driver_allocs, s.peak_bytes_in_use, s.peak_bytes_reserved,
      s.bytes_limit);
}

CUresult MemoryManager::synchronize_for_reuse() {
  const FenceId through = last_fence_id();  // every fence drawn before the synchronisation starts
  count_fence_sync();
  const CUresult synced = synchronize_context();
  if (synced == CUDA_SUCCESS) do_context_synchronized(through);
  return synced;
}

CUresult MemoryManager::synchronize_context() const { return shim::synchronize_context(context_); }

void MemoryManager::retire() noexcept {
  retiring_.store(true, std::memory_order_seq_cst);
  // A give-back under way ends at its next step (a bounded unmapping); none starts afterwards. A
  // driver call that never returns must not hang the program: after kExitPatienceNs it goes on.
  const std::uint64_t deadline = share::monotonic_ns() + budget::kExitPatienceNs;
  int state = kIdleFree;
  while (!idle_state_.compare_exchange_weak(state, kIdleRetired, std::memory_order_acq_rel)) {
    if (state == kIdleRetired || share::monotonic_ns() >= deadline) break;
    state = kIdleFree;
    share::sleep_for_ns(50'000);
  }
  do_retire();
}

bool MemoryManager::idle_give_back_should_stop() const noexcept {
  return retiring_.load(std::memory_order_relaxed) || budget::reclaim_should_yield();
}

MemoryManager::IdleGiveBack MemoryManager::give_back_idle(std::size_t want) noexcept {
  int state = kIdleFree;
  if (retiring_.load(std::memory_order_seq_cst) ||
      !idle_state_.compare_exchange_strong(state, kIdleGiving, std::memory_order_acq_rel)) {
    return IdleGiveBack{};  // retired: it holds nothing any more
  }
  IdleGiveBack result;
  const RealDriver& driver = real_driver();
  // The driver calls of a give-back (events, unmapping) are made in the manager's context; figures
  // alone need none.
  const bool pushed = want > 0 && driver.cuCtxPushCurrent_v2 != nullptr &&
                      driver.cuCtxPushCurrent_v2(context_) == CUDA_SUCCESS;
  if (want == 0 || pushed) result = do_give_back_idle(want);
  if (pushed) {
    CUcontext popped = nullptr;
    driver.cuCtxPopCurrent_v2(&popped);
  }
  idle_state_.store(kIdleFree, std::memory_order_release);
  return result;
}

MemoryManager::IdleGiveBack MemoryManager::do_give_back_idle(std::size_t /*want*/) noexcept {
  IdleGiveBack result;
  ManagerStats stats;
  if (stats_snapshot(stats, /*never_wait=*/true)) {
    result.in_use = stats.bytes_in_use;
  } else {
    result.busy = true;
  }
  return result;
}

CUresult MemoryManager::do_allocate_pitch(CUdeviceptr* out, std::size_t* pitch, std::size_t width_bytes,
                                          std::size_t height, unsigned int element_size_bytes) {
  const auto pitched = pitched_size(width_bytes, height, element_size_bytes);
  if (!pitched) return CUDA_ERROR_INVALID_VALUE;
  if (!pitched->fits) return CUDA_ERROR_OUT_OF_MEMORY;  // as the driver answers
  const CUresult result = do_allocate(out, pitched->bytes);
  if (result == CUDA_SUCCESS) *pitch = pitched->pitch;
  return result;
}

CUresult MemoryManager::do_allocate_from_pool_async(CUdeviceptr* out, std::size_t bytes,
                                                    CUmemoryPool pool, StreamArg stream) {
  count_pass_through();
  const CUresult result = allocate_pool_charged(out, bytes, BudgetPath::program_pool, pool, "cuMemAllocFromPoolAsync", [&] {
    return driver_passthrough::mem_alloc_from_pool_async(out, bytes, pool, stream);
  });
  return count_path(count_driver_alloc(result), AllocationPath::program_pool, bytes);
}

CUresult MemoryManager::do_get_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  const DeviceBudget* budget = budget::existing(device_);
  if (budget == nullptr) return driver_passthrough::mem_get_info(free_bytes, total_bytes);
  budget::settle_pools(device_);  // what the pools hold now (they may have released memory at a sync)
  std::size_t device_free = 0;
  const CUresult result = driver_passthrough::mem_get_info(&device_free, nullptr);
  if (result != CUDA_SUCCESS) return result;
  // What the budget still allows plus what this manager and the device's pools hold unused (a charge
  // that does not fit gets the pools' back), never more than the device could really give (other
  // processes share it), never more than the total: a member that borrowed beyond its allowance may
  // hold unused more than the allowance now lets it have.
  const std::size_t held = held_unused_bytes() + budget::pools_idle(device_);
  const std::size_t limit = budget->limit();
  if (free_bytes != nullptr) *free_bytes = std::min({budget->available() + held, device_free + held, limit});
  if (total_bytes != nullptr) *total_bytes = limit;
  return CUDA_SUCCESS;
}

std::string MemoryManager::shared_refusal_cause(share::Member& member, std::size_t bytes) const {
  const share::Terms terms = member.terms();
  budget::RefusalCause cause = budget::last_refusal_cause();
  // Nothing charged was refused: the arena stopped at its own limit, the most the process may hold.
  if (cause == budget::RefusalCause::none && !fits_under(terms.held, bytes, limit_bytes_)) {
    cause = budget::RefusalCause::share_cap;
  }
  switch (cause) {
    case budget::RefusalCause::share_cap:
      return fmt::format("the GPU is shared, and this process holds {} bytes of the most it may hold: {}", terms.held,
                         budget::cap_advice(device_));
    case budget::RefusalCause::driver:
      return fmt::format("the GPU is shared, and its ledger had room ({} bytes held of a {}-byte allowance); {}",
                         terms.held, terms.allowance, driver_refusal());
    case budget::RefusalCause::none:
    case budget::RefusalCause::limit:
    case budget::RefusalCause::share:
      break;
  }
  const std::uint64_t waited = budget::last_share_wait_ms();
  return fmt::format("the GPU is shared{}: this process holds {} bytes of its {}-byte guarantee (allowance {}); {}; "
                     "free memory in the others, or raise GPUMEM_SHARE_WEIGHT or GPUMEM_SHARE_MIN",
                     waited > 0 ? fmt::format(" (this request waited {} ms for borrowed memory)", waited) : std::string(),
                     terms.held, terms.guarantee, terms.allowance, member.holders());
}

void MemoryManager::count_alloc(CUresult result) noexcept {
  if (result == CUDA_SUCCESS) {
    allocs_.fetch_add(1, std::memory_order_relaxed);
  } else {
    failed_allocs_.fetch_add(1, std::memory_order_relaxed);
  }
}

namespace driver_passthrough {

CUresult mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::size_t device_free = 0;  // the driver never sees a null output
  std::size_t device_total = 0;
  const CUresult result = real_driver().cuMemGetInfo_v2(&device_free, &device_total);
  if (result != CUDA_SUCCESS) return result;
  if (free_bytes != nullptr) *free_bytes = device_free;
  if (total_bytes != nullptr) *total_bytes = device_total;
  return CUDA_SUCCESS;
}

CUresult mem_alloc_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  const RealDriver& driver = real_driver();
  if (stream.per_thread && driver.cuMemAllocAsync_ptsz != nullptr) {
    return driver.cuMemAllocAsync_ptsz(out, bytes, stream.handle);
  }
  if (driver.cuMemAllocAsync == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return driver.cuMemAllocAsync(out, bytes, plain_stream_handle(stream.handle, stream.per_thread));
}

CUresult mem_free_async(CUdeviceptr ptr, StreamArg stream) {
  const RealDriver& driver = real_driver();
  if (stream.per_thread && driver.cuMemFreeAsync_ptsz != nullptr) {
    return driver.cuMemFreeAsync_ptsz(ptr, stream.handle);
  }
  if (driver.cuMemFreeAsync == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return driver.cuMemFreeAsync(ptr, plain_stream_handle(stream.handle, stream.per_thread));
}

CUresult mem_alloc_from_pool_async(CUdeviceptr* out, std::size_t bytes, CUmemoryPool pool,
                                   StreamArg stream) {
  const RealDriver& driver = real_driver();
  if (stream.per_thread && driver.cuMemAllocFromPoolAsync_ptsz != nullptr) {
    return driver.cuMemAllocFromPoolAsync_ptsz(out, bytes, pool, stream.handle);
  }
  if (driver.cuMemAllocFromPoolAsync == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return driver.cuMemAllocFromPoolAsync(out, bytes, pool,
                                        plain_stream_handle(stream.handle, stream.per_thread));
}

StreamStatus stream_status(StreamArg stream) {
  const RealDriver& driver = real_driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult result = CUDA_SUCCESS;
  if (stream.per_thread && driver.cuStreamIsCapturing_ptsz != nullptr) {
    result = driver.cuStreamIsCapturing_ptsz(stream.handle, &status);
  } else if (driver.cuStreamIsCapturing != nullptr) {
    result = driver.cuStreamIsCapturing(plain_stream_handle(stream.handle, stream.per_thread), &status);
  }
  switch (result) {
    case CUDA_SUCCESS:
      return {CUDA_SUCCESS, status != CU_STREAM_CAPTURE_STATUS_NONE};
    // The legacy stream while a blocking stream captures: work there would depend on the capture,
    // so the request goes to the driver, which refuses it (and invalidates the capture) as it would
    // without us.
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
      return {CUDA_SUCCESS, true};
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return {result, false};
    default:  // anything else says nothing of the stream: the call goes on as usual
      return {};
  }
}

}  // namespace driver_passthrough

}  // namespace gpumem::shim
