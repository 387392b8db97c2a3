// cuda_async mode: the device's stream-ordered pool, as TF_GPU_ALLOCATOR=cuda_malloc_async uses it.
#include "managers/cuda_async_manager.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "context/capture_state.h"
#include "context/peer_access.h"
#include "exports/export_table.h"
#include "base/log.h"
#include "driver/real_driver.h"

namespace gpumem::shim {
namespace {

// A pool like the default one whose blocks other processes can import (POSIX descriptors); null,
// with the reason in `messages`, when the driver cannot make one.
CUmemoryPool create_shareable_pool(CUdevice device, log::Pending& messages) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemPoolCreate == nullptr || driver.cuMemPoolDestroy == nullptr ||
      driver.cuMemPoolExportToShareableHandle == nullptr || driver.cuMemPoolExportPointer == nullptr ||
      driver.cuMemAllocFromPoolAsync == nullptr) {
    messages.add(LogLevel::info, "device {}: the driver cannot share pool memory between processes; cuda_async "
                 "mode serves cuMemAlloc from the default pool, and its blocks cannot be exported", device);
    return nullptr;
  }
  int handle_types = 0;
  if (driver.cuDeviceGetAttribute != nullptr &&
      driver.cuDeviceGetAttribute(&handle_types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, device) ==
          CUDA_SUCCESS &&
      (handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    messages.add(LogLevel::info, "device {}: its pools cannot be shared through POSIX descriptors; cuda_async "
                 "mode serves cuMemAlloc from the default pool, and its blocks cannot be exported", device);
    return nullptr;
  }
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  CUmemoryPool pool = nullptr;
  if (const CUresult result = driver.cuMemPoolCreate(&pool, &props); result != CUDA_SUCCESS) {
    messages.add(LogLevel::warn, "device {}: creating an IPC-capable pool failed ({}); cuda_async mode serves "
                 "cuMemAlloc from the default pool, and its blocks cannot be exported", device, driver_error_name(result));
    return nullptr;
  }
  return pool;
}

}  // namespace

std::unique_ptr<CudaAsyncManager> CudaAsyncManager::create(CUcontext context, CUdevice device,
                                                           const Policy& policy, std::size_t limit_bytes,
                                                           log::Pending& messages) {
  const RealDriver& driver = real_driver();
  if (driver.cuDeviceGetDefaultMemPool == nullptr || driver.cuMemPoolSetAttribute == nullptr ||
      driver.cuMemAllocAsync == nullptr || driver.cuMemFreeAsync == nullptr ||
      driver.cuStreamCreate == nullptr || driver.cuStreamSynchronize == nullptr) {
    messages.add(LogLevel::error, "device {}: the driver has no stream-ordered allocator; cuda_async "
                 "mode is unavailable and requests go to the driver", device);
    return nullptr;
  }
  CUmemoryPool default_pool = nullptr;
  CUresult result = driver.cuDeviceGetDefaultMemPool(&default_pool, device);
  if (result != CUDA_SUCCESS) {
    messages.add(LogLevel::error, "device {}: cuDeviceGetDefaultMemPool failed ({}); cuda_async mode "
                 "is unavailable and requests go to the driver", device, driver_error_name(result));
    return nullptr;
  }
  CUmemoryPool pool = create_shareable_pool(device, messages);
  const bool pool_is_own = pool != nullptr;
  if (!pool_is_own) pool = default_pool;
  // Memory a pool holds above the threshold goes back to the driver at synchronisation points. The
  // default pool, which serves the program's stream-ordered calls, keeps the same threshold. On a GPU
  // shared with other processes the pools keep nothing idle: the ledger counts the blocks handed out,
  // and memory a pool kept would be hidden from the others (docs/sharing.md).
  std::uint64_t threshold = policy.preallocate && budget::shared(device) == nullptr ? limit_bytes : 0;
  for (CUmemoryPool configured : {pool, default_pool}) {
    result = driver.cuMemPoolSetAttribute(configured, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    if (result != CUDA_SUCCESS) {
      messages.add(LogLevel::warn, "device {}: setting the {} pool's release threshold to {} failed ({})", device,
                   configured == default_pool ? "default" : "cuda_async", threshold, driver_error_name(result));
    }
    if (!pool_is_own) break;  // the default pool is the only one
  }
  CUstream stream = nullptr;
  result = driver.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (result != CUDA_SUCCESS) {
    messages.add(LogLevel::error, "device {}: creating the allocation stream failed ({}); cuda_async "
                 "mode is unavailable and requests go to the driver", device, driver_error_name(result));
    if (pool_is_own) driver.cuMemPoolDestroy(pool);
    return nullptr;
  }
  return std::make_unique<CudaAsyncManager>(context, device, policy, limit_bytes, pool, pool_is_own, default_pool,
                                            stream);
}

CudaAsyncManager::CudaAsyncManager(CUcontext context, CUdevice device, const Policy& policy,
                                   std::size_t limit_bytes, CUmemoryPool pool, bool pool_is_own,
                                   CUmemoryPool default_pool, CUstream private_stream)
    : MemoryManager(context, device, policy, limit_bytes),
      pool_(pool),
      pool_is_own_(pool_is_own),
      default_pool_(default_pool),
      private_stream_(private_stream) {}

void CudaAsyncManager::warm_up() {
  if (!policy().async_prealloc || *policy().async_prealloc == 0) return;
  if (budget::shared(device()) != nullptr) {  // a pool that keeps nothing idle: warming it would give it straight back
    log::at(LogLevel::debug, "device {}: the GPU is shared; the pool is not warmed", device());
    return;
  }
  const std::int64_t asked = *policy().async_prealloc;
  const std::size_t bytes = asked < 0 ? (policy().preallocate ? limit_bytes() : 0)
                                      : static_cast<std::size_t>(asked);
  if (bytes == 0) return;
  const RealDriver& driver = real_driver();
  CUdeviceptr block = 0;
  const CUresult result = allocate_from_pool(&block, bytes);
  if (result == CUDA_SUCCESS) {
    driver.cuMemFreeAsync(block, private_stream_);
    driver.cuStreamSynchronize(private_stream_);
    log::at(LogLevel::debug, "device {}: warmed the pool with {} bytes", device(), bytes);
  } else {
    log::at(LogLevel::warn, "device {}: warming the pool with {} bytes failed ({})", device(), bytes,
                 driver_error_name(result));
  }
}

CUresult CudaAsyncManager::allocate_on_private_stream(CUdeviceptr* out, std::size_t bytes) {
  CUresult result = allocate_from_pool(out, bytes);
  if (result == CUDA_ERROR_OUT_OF_MEMORY && !capture_state::active()) {
    // As TensorFlow does: let pending frees land (ours included), then try once more. (Not while
    // the program captures a graph: the driver would refuse the synchronisation and end the capture.)
    const CUresult synced = synchronize_for_reuse();
    release_idle_pool_memory();
    result = allocate_from_pool(out, bytes);
    if (result != CUDA_SUCCESS && synced == CUDA_SUCCESS) {
      log::at(LogLevel::warn, "device {}: the stream-ordered pool refused {} bytes ({}), also after "
              "synchronising the context and returning every block freed before", device(), bytes,
              driver_error_name(result));
    } else if (result != CUDA_SUCCESS) {
      log::at(LogLevel::warn, "device {}: the stream-ordered pool refused {} bytes ({}); synchronising "
              "the context to return freed blocks failed ({})", device(), bytes, driver_error_name(result),
              driver_error_name(synced));
    }
  } else if (result != CUDA_SUCCESS) {
    log::at(LogLevel::warn, "device {}: the stream-ordered pool refused {} bytes ({})", device(), bytes,
            driver_error_name(result));
  }
  if (result != CUDA_SUCCESS) return result;
  result = real_driver().cuStreamSynchronize(private_stream_);  // a synchronous allocation is complete on return
  if (result != CUDA_SUCCESS) {
    return_to_pool(*out);
    log::at(LogLevel::warn, "device {}: completing a {}-byte allocation failed ({})", device(), bytes,
            driver_error_name(result));
  }
  return result;
}

CUresult CudaAsyncManager::allocate_from_pool(CUdeviceptr* out, std::size_t bytes) {
  // From the default pool by name: the program may have made another pool the device's current one.
  const RealDriver& driver = real_driver();
  const CUresult result = driver.cuMemAllocFromPoolAsync != nullptr
                              ? driver.cuMemAllocFromPoolAsync(out, bytes, pool_, private_stream_)
                              : driver.cuMemAllocAsync(out, bytes, private_stream_);
  if (result == CUDA_SUCCESS) note_pool_allocation();
  return count_driver_alloc(result);
}

void CudaAsyncManager::note_pool_allocation() noexcept {
  if ((pool_allocations_.fetch_add(1, std::memory_order_relaxed) & (kRefreshEvery - 1)) == 0) refresh_pool_figures();
}

CUresult CudaAsyncManager::return_to_pool(CUdeviceptr ptr) {
  return real_driver().cuMemFreeAsync(ptr, private_stream_);
}

void CudaAsyncManager::release_idle_pool_memory() const noexcept {
  const RealDriver& driver = real_driver();
  if (!pool_is_own_ || driver.cuMemPoolTrimTo == nullptr) return;  // one pool: the driver's own retry suffices
  driver.cuMemPoolTrimTo(pool_, 0);
  driver.cuMemPoolTrimTo(default_pool_, 0);
}

int CudaAsyncManager::pool_export_fd(CUresult& failure) const {
  std::lock_guard lock(export_mutex_);
  if (export_fd_ >= 0) return export_fd_;
  int fd = -1;
  failure = real_driver().cuMemPoolExportToShareableHandle(&fd, pool_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (failure != CUDA_SUCCESS) {
    log::at(LogLevel::error, "cuIpcGetMemHandle: exporting cuda_async mode's pool on device {} as a POSIX "
            "descriptor failed ({})", device(), driver_error_name(failure));
    return -1;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);  // the shim's own: not for programs this process executes
  export_fd_ = fd;
  return fd;
}

CUresult CudaAsyncManager::do_allocate(CUdeviceptr* out, std::size_t bytes) {
  std::call_once(warmed_up_, [this] { warm_up(); });
  const CUresult result = allocate_pool_charged(out, bytes, BudgetPath::async_pool, pool_, "cuMemAlloc",
                                                [&] { return allocate_on_private_stream(out, bytes); });  // logs why it failed
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard lock(mutex_);
  if (!blocks_.reserve_one()) {
    budget::forget_block(static_cast<std::uintptr_t>(*out));
    return_to_pool(*out);
    log::at(LogLevel::warn, "device {}: no host memory to track a {}-byte block", device(), bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const detail::ChunkHandle entry = served_entry(bytes);
  blocks_.insert(*out, entry);
  served_bytes_ += entry_bytes(entry);
  return count_path(CUDA_SUCCESS, AllocationPath::async_pool, bytes);
}

CUresult CudaAsyncManager::do_free(CUdeviceptr ptr) {
  // sync would synchronise the context, which a graph capture forbids: then it defers instead.
  const bool defer = policy().free_sync == FreeSync::defer ||
                     (policy().free_sync == FreeSync::sync && capture_state::active());
  {
    std::lock_guard lock(mutex_);
    const detail::ChunkHandle entry = blocks_.find(ptr);
    if (entry != detail::kNoChunk && entry_deferred(entry)) return CUDA_ERROR_INVALID_VALUE;  // freed twice
    if (entry == detail::kNoChunk) {
      count_pass_through();
      return free_passed_through(ptr, [&] { return real_driver().cuMemFree_v2(ptr); });
    }
    budget::forget_block(static_cast<std::uintptr_t>(ptr));  // the program gave it up
    if (defer) {
      const FenceId fence = fence_ids().fetch_add(1, std::memory_order_acq_rel) + 1;
      deferred_.emplace_back(fence, ptr);  // may throw: before the state changes
      blocks_.erase(ptr);  // the erase frees the slot the insert needs: no allocation
      blocks_.insert(ptr, entry | kDeferredBit);
      served_bytes_ -= entry_bytes(entry);
      deferred_bytes_ += entry_bytes(entry);
    } else {
      blocks_.erase(ptr);
      served_bytes_ -= entry_bytes(entry);
    }
  }
  if (defer) {
    bound_deferred_bytes();
    return CUDA_SUCCESS;
  }
  if (policy().free_sync == FreeSync::sync && !defer) {
    const CUresult synced = synchronize_for_reuse();
    if (synced != CUDA_SUCCESS) return synced;
  }
  return return_to_pool(ptr);
}

CUresult CudaAsyncManager::do_allocate_async(CUdeviceptr* out, std::size_t bytes, StreamArg stream) {
  if (driver_passthrough::stream_is_capturing(stream)) {  // the graph owns it: not charged
    return count_path(count_driver_alloc(driver_passthrough::mem_alloc_async(out, bytes, stream)),
                      AllocationPath::graph, bytes);
  }
  const CUresult result = allocate_pool_charged(out, bytes, BudgetPath::async_pool, budget::current_pool(device()),
                                                "cuMemAllocAsync", [&] {
    CUresult allocated = driver_passthrough::mem_alloc_async(out, bytes, stream);
    if (allocated == CUDA_ERROR_OUT_OF_MEMORY && !capture_state::active()) {
      // Blocks the program freed synchronously may still wait for a context synchronisation:
      // return them, as a synchronous allocation would, then try once more.
      if (synchronize_for_reuse() == CUDA_SUCCESS) {
        release_idle_pool_memory();
        allocated = driver_passthrough::mem_alloc_async(out, bytes, stream);
      }
    }
    return allocated;
  });
  if (result == CUDA_SUCCESS) note_pool_allocation();
  return count_path(count_driver_alloc(result), AllocationPath::async_pool, bytes);
}

CUresult CudaAsyncManager::do_free_async(CUdeviceptr ptr, StreamArg stream) {
  {
    std::lock_guard lock(mutex_);
    // Blocks of synchronous allocations (the pool serves them here, cuMemAlloc would not): the
    // driver frees in stream order only what was allocated so, and the block stays allocated.
    if (blocks_.find(ptr) != detail::kNoChunk) {
      const driver_passthrough::StreamStatus on = driver_passthrough::stream_status(stream);
      return on.error != CUDA_SUCCESS ? on.error : CUDA_ERROR_INVALID_VALUE;
    }
  }
  return free_passed_through(ptr, [&] { return driver_passthrough::mem_free_async(ptr, stream); });
}

bool CudaAsyncManager::do_owns(CUdeviceptr ptr) const {
  std::lock_guard lock(mutex_);
  return blocks_.find(ptr) != detail::kNoChunk;
}

// The driver's range (a pool allocation is the block), and whether cuIpcGetMemHandle exports it: pool
// memory has no legacy IPC handle of its own, but the shim shares a block of its own pool through the
// pool (do_ipc_block), as it would a cuMemAlloc block.
std::optional<BlockRange> CudaAsyncManager::do_block_range(CUdeviceptr ptr) const {
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const RealDriver& driver = real_driver();
  if (driver.cuMemGetAddressRange_v2 == nullptr || driver.cuMemGetAddressRange_v2(&base, &size, ptr) != CUDA_SUCCESS) {
    return std::nullopt;
  }
  std::lock_guard lock(mutex_);
  const detail::ChunkHandle entry = blocks_.find(base);
  if (entry == detail::kNoChunk || entry_deferred(entry)) return std::nullopt;
  return BlockRange{static_cast<std::uintptr_t>(base), size, pool_is_own_};
}

void CudaAsyncManager::do_refresh_peer_access() {
  const RealDriver& driver = real_driver();
  if (driver.cuMemPoolSetAccess == nullptr || driver.cuMemPoolGetAccess == nullptr) return;
  const std::lock_guard lock(peer_mutex_);
  const std::vector<CUdevice> wanted = peer_access::devices_with_access(context());
  const auto set_access = [&](CUdevice peer, CUmemAccess_flags flags) {
    const CUmemAccessDesc desc{{CU_MEM_LOCATION_TYPE_DEVICE, peer}, flags};
    const CUresult result = driver.cuMemPoolSetAccess(pool_, &desc, 1);
    if (result != CUDA_SUCCESS) {
      log::at(LogLevel::warn, "device {}: could not {} device {} ({}); its blocks stay {} there", device(),
              flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? "close cuda_async mode's pool to" : "open cuda_async mode's pool to",
              peer, driver_error_name(result), flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? "accessible" : "inaccessible");
    }
    return result == CUDA_SUCCESS;
  };
  for (auto it = pool_peers_.begin(); it != pool_peers_.end();) {
    const bool still_wanted = std::find(wanted.begin(), wanted.end(), *it) != wanted.end();
    if (!still_wanted && set_access(*it, CU_MEM_ACCESS_FLAGS_PROT_NONE)) {
      it = pool_peers_.erase(it);
    } else {
      ++it;
    }
  }
  for (const CUdevice peer : wanted) {
    if (peer == device() || std::find(pool_peers_.begin(), pool_peers_.end(), peer) != pool_peers_.end()) continue;
    CUmemLocation location{CU_MEM_LOCATION_TYPE_DEVICE, peer};
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    // Access the program gave a default pool itself stays the program's to take back.
    if (driver.cuMemPoolGetAccess(&flags, pool_, &location) == CUDA_SUCCESS &&
        flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      continue;
    }
    if (set_access(peer, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) pool_peers_.push_back(peer);
  }
}

// Pool memory has no legacy IPC handle: the block is shared through its pool (docs/ipc.md).
IpcBlock CudaAsyncManager::do_ipc_block(CUdeviceptr ptr) const {
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    const detail::ChunkHandle entry = blocks_.find(ptr);
    if (entry == detail::kNoChunk || entry_deferred(entry)) {
      log::at(LogLevel::error, "cuIpcGetMemHandle: {:#x} is not an allocated block (freed, or never handed out)",
              static_cast<std::uintptr_t>(ptr));
      return IpcBlock{CUDA_ERROR_INVALID_VALUE};
    }
    bytes = entry_bytes(entry);
  }
  if (!pool_is_own_) {
    log::at(LogLevel::error,
            "cuIpcGetMemHandle: {:#x} comes from the default stream-ordered pool (the driver could not make an "
            "IPC-capable one for cuda_async mode), which legacy IPC cannot export; run programs that share "
            "cudaMalloc memory between processes in bfc or platform mode", static_cast<std::uintptr_t>(ptr));
    return IpcBlock{CUDA_ERROR_INVALID_VALUE};
  }
  CUresult result = CUDA_SUCCESS;
  IpcBlock block{CUDA_SUCCESS, false, static_cast<std::uintptr_t>(ptr), static_cast<std::uintptr_t>(ptr), bytes};
  block.pool_fd = pool_export_fd(result);
  if (block.pool_fd < 0) return IpcBlock{result};
  result = real_driver().cuMemPoolExportPointer(&block.pool_pointer, ptr);
  if (result != CUDA_SUCCESS) {
    log::at(LogLevel::error, "cuIpcGetMemHandle: the driver refused to export {:#x} from cuda_async mode's pool ({})",
            static_cast<std::uintptr_t>(ptr), driver_error_name(result));
    return IpcBlock{result};
  }
  return block;
}

void CudaAsyncManager::do_context_synchronized(FenceId through) {
  // Returned under the lock: a thread that synchronised too and found nothing left to resolve must
  // find these blocks already back in the pool when it retries, or it fails spuriously.
  std::lock_guard lock(mutex_);
  while (!deferred_.empty() && deferred_.front().first <= through) {
    const CUdeviceptr ptr = deferred_.front().second;
    deferred_.pop_front();
    deferred_bytes_ -= entry_bytes(blocks_.erase(ptr));
    return_to_pool(ptr);
  }
  refresh_pool_figures();
}

// The context is being reset or destroyed, which frees what cuMemAlloc gave the program: the pool
// blocks that served it go back to the pool, and the pool gives their memory back, while the
// context still lives (after a last primary-context release it is already gone: the calls fail
// and change nothing).
void CudaAsyncManager::do_retire() noexcept {
  const RealDriver& driver = real_driver();
  std::lock_guard lock(mutex_);
  blocks_.drain([this](std::uintptr_t ptr, detail::ChunkHandle) {
    ipc::withdraw(ptr);  // freed with the context: its handles stop opening
    return_to_pool(static_cast<CUdeviceptr>(ptr));
  });
  deferred_.clear();
  served_bytes_ = deferred_bytes_ = 0;
  if (driver.cuStreamSynchronize != nullptr) driver.cuStreamSynchronize(private_stream_);
  refresh_pool_figures();  // the high mark before the trim gives the memory back
  if (driver.cuMemPoolTrimTo != nullptr) driver.cuMemPoolTrimTo(pool_, 0);
  refresh_pool_figures();
  if (pool_is_own_) {
    // A new context of the device gets a new manager and pool: this one would only leak.
    driver.cuMemPoolDestroy(pool_);
    std::lock_guard export_lock(export_mutex_);
    if (export_fd_ >= 0) close(export_fd_);
    export_fd_ = -1;
  }
}

std::size_t CudaAsyncManager::do_trim() {
  if (!capture_state::active()) {
    synchronize_for_reuse();  // deferred frees back to the pool first...
    // ...where they are free once the private stream has run them (a trim keeps what is not).
    if (real_driver().cuStreamSynchronize != nullptr) real_driver().cuStreamSynchronize(private_stream_);
  }
  refresh_pool_figures();
  const std::size_t before = pool_reserved_.load(std::memory_order_relaxed);
  const RealDriver& driver = real_driver();
  if (driver.cuMemPoolTrimTo != nullptr) {
    driver.cuMemPoolTrimTo(pool_, 0);
    if (pool_is_own_) driver.cuMemPoolTrimTo(default_pool_, 0);
  }
  refresh_pool_figures();
  const std::size_t after = pool_reserved_.load(std::memory_order_relaxed);
  return before > after ? before - after : 0;
}

void CudaAsyncManager::bound_deferred_bytes() {
  {
    std::lock_guard lock(mutex_);
    if (deferred_bytes_ <= std::max(served_bytes_, kDeferredFloor)) return;
  }
  if (capture_state::active()) return;  // the driver would refuse the synchronisation and end the capture
  synchronize_for_reuse();
}

void CudaAsyncManager::do_fill_stats(ManagerStats& stats) const {
  if (const DeviceBudget* budget = budget::existing(device())) {  // lock-free: safe at exit too
    stats.bytes_in_use = budget->charged(BudgetPath::async_pool);
    stats.peak_bytes_in_use = budget->peak_charged(BudgetPath::async_pool);
  }
  refresh_pool_figures();
  stats.bytes_reserved = pool_reserved_.load(std::memory_order_relaxed);
  stats.peak_bytes_reserved = pool_peak_reserved_.load(std::memory_order_relaxed);
}

// The exit path: the figures of the last refresh (every kRefreshEvery allocations, at the shim's
// synchronisations and at retirement), never a driver call.
bool CudaAsyncManager::do_try_fill_stats(ManagerStats& stats) const {
  if (const DeviceBudget* budget = budget::existing(device())) {
    stats.bytes_in_use = budget->charged(BudgetPath::async_pool);
    stats.peak_bytes_in_use = budget->peak_charged(BudgetPath::async_pool);
  }
  stats.bytes_reserved = pool_reserved_.load(std::memory_order_relaxed);
  stats.peak_bytes_reserved = pool_peak_reserved_.load(std::memory_order_relaxed);
  return true;
}

void CudaAsyncManager::refresh_pool_figures() const noexcept {
  const RealDriver& driver = real_driver();
  if (driver.cuMemPoolGetAttribute == nullptr) return;
  // Both pools serve the blocks the budget counts in use (cuMemAlloc from this mode's pool, the
  // program's stream-ordered calls from the default one): their reservations are added, and so are
  // their high marks (at most that much was reserved at once).
  std::size_t reserved = 0;
  std::size_t peak = 0;
  for (CUmemoryPool pool : {pool_, default_pool_}) {
    cuuint64_t current = 0;
    cuuint64_t high = 0;
    if (driver.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &current) != CUDA_SUCCESS ||
        driver.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high) != CUDA_SUCCESS) {
      return;
    }
    reserved += static_cast<std::size_t>(current);
    peak += static_cast<std::size_t>(high);
    if (!pool_is_own_) break;  // the default pool is the only one
  }
  pool_reserved_.store(reserved, std::memory_order_relaxed);
  pool_peak_reserved_.store(peak, std::memory_order_relaxed);
}

}  // namespace gpumem::shim
