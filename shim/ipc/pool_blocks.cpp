// Importing cuda_async pool blocks another process exported: its pool once, then each block.
#include "ipc/pool_blocks.h"

#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "base/fork_safe_lock.h"
#include "driver/real_driver.h"
#include "ipc/remote_descriptor.h"
#include "base/log.h"
#include "context/peer_access.h"

namespace gpumem::shim::ipc {
namespace {

// Pools imported in this process, by exporter: its pid, its export table's number, and the pool's
// descriptor number there. Imported once, kept: blocks opened from them may stay open indefinitely.
using PoolKey = std::tuple<std::int32_t, std::uint64_t, std::int32_t>;
std::map<PoolKey, CUmemoryPool>& imported_pools() {
  static auto* pools = new std::map<PoolKey, CUmemoryPool>;  // leaked: nothing runs at exit
  return *pools;
}

CUmemoryPool find_imported(const PoolKey& key) {
  const auto lock = lock_fork_safely(ProcessLock::imported_pools);
  const auto found = imported_pools().find(key);
  return found == imported_pools().end() ? nullptr : found->second;
}

// An imported pool is open to its own device only, but cuIpcOpenMemHandle's one flag,
// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, makes opened memory reachable from the current device and the
// devices that can access it, as the driver's own would be: the pool is opened to them, where the
// driver lets it.
void open_to_importers(CUmemoryPool pool) {
  const RealDriver& driver = real_driver();
  CUdevice device = 0;
  if (driver.cuMemPoolSetAccess == nullptr || driver.cuCtxGetDevice(&device) != CUDA_SUCCESS) return;
  const CUmemAccessDesc own{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (const CUresult result = driver.cuMemPoolSetAccess(pool, &own, 1); result != CUDA_SUCCESS) {
    log::at(LogLevel::warn, "cuIpcOpenMemHandle: the driver would not open the imported pool to device {} ({}); "
            "blocks from it may be unreachable there", device, driver_error_name(result));
  }
  for (const CUdevice peer : peer_access::devices_able_to_access(device)) {
    const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, peer}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    driver.cuMemPoolSetAccess(pool, &access, 1);  // refused: that device cannot reach the pool's
  }
}

// The exporter's pool imported here, from a fresh descriptor; null with *result set on failure.
CUmemoryPool import_pool(const Token& token, const ExportedBlock& block, const PoolKey& key, CUresult* result) {
  std::string why;
  const int fd = fetch_descriptor(token.pid, block.pool_fd, why);
  if (fd < 0) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: {}", why);
    *result = CUDA_ERROR_INVALID_VALUE;
    return nullptr;
  }
  const RealDriver& driver = real_driver();
  CUmemoryPool pool = nullptr;
  *result = driver.cuMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  close(fd);  // the driver keeps what it needs
  if (*result != CUDA_SUCCESS) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: the driver refused process {}'s pool descriptor (error {}): the "
            "exporter's pool is gone, or the handle is corrupt or forged", token.pid, static_cast<int>(*result));
    return nullptr;
  }
  open_to_importers(pool);
  try {
    const auto lock = lock_fork_safely(ProcessLock::imported_pools);
    const auto [entry, inserted] = imported_pools().emplace(key, pool);
    if (inserted) return pool;
    // Another thread imported it meanwhile: keep one.
    if (driver.cuMemPoolDestroy != nullptr) driver.cuMemPoolDestroy(pool);
    return entry->second;
  } catch (...) {  // no memory to remember it: used once, never freed (pointers from it may stay open)
    return pool;
  }
}

void forget_imported(const PoolKey& key, CUmemoryPool pool) {
  const auto lock = lock_fork_safely(ProcessLock::imported_pools);
  const auto found = imported_pools().find(key);
  if (found != imported_pools().end() && found->second == pool) imported_pools().erase(found);
}

}  // namespace

CUresult import_pool_block(const Token& token, const ExportedBlock& block, CUdeviceptr* ptr) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemPoolImportFromShareableHandle == nullptr || driver.cuMemPoolImportPointer == nullptr) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: the handle names a block of process {}'s stream-ordered pool, "
            "and this driver cannot import pools", token.pid);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const PoolKey key{token.pid, token.process_number, block.pool_fd};
  CUmemPoolPtrExportData data = block.pool_pointer;
  CUmemoryPool pool = find_imported(key);
  if (pool != nullptr) {
    const CUresult result = driver.cuMemPoolImportPointer(ptr, pool, &data);
    if (result != CUDA_ERROR_INVALID_VALUE) return result;
    // The exporter may have destroyed that pool (its context went) and given its descriptor number
    // to a new one: import afresh once.
    forget_imported(key, pool);
  }
  CUresult result = CUDA_SUCCESS;
  pool = import_pool(token, block, key, &result);
  if (pool == nullptr) return result;
  result = driver.cuMemPoolImportPointer(ptr, pool, &data);
  if (result != CUDA_SUCCESS) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: the driver refused the block's export data from process {}'s pool "
            "(error {}): the block is freed, or the handle is corrupt or forged", token.pid, static_cast<int>(result));
  }
  return result;
}

}  // namespace gpumem::shim::ipc
