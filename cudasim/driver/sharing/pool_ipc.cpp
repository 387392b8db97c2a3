// Sharing stream-ordered pools between processes (cuMemPoolExportToShareableHandle,
// cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer, cuMemPoolImportPointer), after the
// "Stream Ordered Memory Allocator" section of cuda.h.
//
// A pool created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is backed by one memfd: each chunk it
// reserves is the next range of the file, mapped MAP_SHARED (a released chunk's range is punched
// out, so the file holds only live chunks). Its shareable handle is a descriptor of that file; the
// program passes it to another process by any means (a Unix socket, inheritance, pidfd_getfd).
// Importing the descriptor gives a pool that allocates nothing; a pointer's export data names the
// file (device and inode), the chunk's range of it and the block's place in the chunk, and importing
// it maps that chunk afresh: both processes see the same bytes. Nothing is charged to the importer.
#include "contexts.h"
#include "memfd_name.h"
#include "pools.h"
#include "state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <string>

using namespace cudasim;

namespace {

constexpr char kPoolMemfdPrefix[] = "cudasim-pool-device-";
constexpr std::array<char, 8> kExportMagic = {'c', 'u', 'd', 'a', 's', 'i', 'm', 'P'};

// The 64 bytes of CUmemPoolPtrExportData::reserved as this driver fills them.
struct ExportLayout {
  std::array<char, 8> magic{};
  std::uint64_t file_device = 0;  // the pool file's st_dev and st_ino
  std::uint64_t file_inode = 0;
  std::uint64_t chunk_offset = 0;  // the chunk's range of the file
  std::uint64_t chunk_length = 0;
  std::uint64_t block_offset = 0;  // of the allocation in its chunk
  std::uint64_t size = 0;          // the bytes the allocation was asked for
  std::int32_t device = 0;
  std::uint32_t unused = 0;
};
static_assert(sizeof(ExportLayout) <= sizeof(CUmemPoolPtrExportData::reserved));

// Maps [offset, offset + mapping.length) of `fd` over `mapping`, shared.
bool map_range_over(const Mapping& mapping, int fd, std::uint64_t offset) {
  void* at = mmap(mapping.addr, mapping.length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                  static_cast<off_t>(offset));
  return at == mapping.addr;
}

bool live_pool(State& st, CUmemoryPool pool) {
  return pool != nullptr && st.pools.count(pool) != 0 && !pool->destroyed;
}

CUresult check_handle_type(CUmemAllocationHandleType type) {
  switch (type) {
    case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: return CUDA_SUCCESS;
    case CU_MEM_HANDLE_TYPE_WIN32:
    case CU_MEM_HANDLE_TYPE_WIN32_KMT:
    case CU_MEM_HANDLE_TYPE_FABRIC: return CUDA_ERROR_NOT_SUPPORTED;  // not on this platform
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

namespace cudasim {

bool make_pool_exportable(CUmemPoolHandle_st& pool) {
  // Named by the device's number, which another process may see under another ordinal.
  const std::string name = kPoolMemfdPrefix + std::to_string(state().device(pool.device).physical);
  pool.file_fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  return pool.file_fd >= 0;
}

bool map_pool_file(CUmemPoolHandle_st& pool, Mapping& mapping, PoolChunk& chunk) {
  const std::uint64_t offset = pool.file_end;
  if (offset > static_cast<std::uint64_t>(INT64_MAX) - mapping.length) return false;
  const int own = fcntl(pool.file_fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return false;
  if (!size_memory_file(own, offset + mapping.length) || !map_range_over(mapping, own, offset)) {
    close(own);
    return false;
  }
  pool.file_end = offset + mapping.length;
  mapping.fd = own;
  chunk.file_offset = offset;
  return true;
}

void punch_pool_file(const PoolChunk& chunk) {
  fallocate(chunk.mapping.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(chunk.file_offset),
            static_cast<off_t>(chunk.mapping.length));
}

CUresult free_imported_pointer(State& st, CUdeviceptr dptr, const std::shared_ptr<CUstream_st>& stream) {
  auto it = st.allocations.find(dptr);
  if (it == st.allocations.end() || it->second.kind != AllocKind::Imported || it->second.pool == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  st.allocations.erase(it);
  Mapping mapping = st.mappings.extract(dptr).mapped();
  if (!stream) {
    retire_mapping(st, mapping);
    return CUDA_SUCCESS;
  }
  // Work queued before the free on the stream still uses the mapping.
  submit(st, stream, [mapping] {
    Locked done;
    retire_mapping(done.st, mapping);
  });
  return CUDA_SUCCESS;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                         CUmemAllocationHandleType handleType,
                                                         unsigned long long flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (handle_out == nullptr || flags != 0 || !live_pool(l.st, pool)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_handle_type(handleType); rc != CUDA_SUCCESS) return rc;
  // Only a pool created with this handle type is IPC capable; an imported one is not re-exported.
  if (pool->file_fd < 0 || pool->imported) return CUDA_ERROR_INVALID_VALUE;
  const int fd = dup(pool->file_fd);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;  // out of descriptors
  *static_cast<int*>(handle_out) = fd;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle,
                                                           CUmemAllocationHandleType handleType,
                                                           unsigned long long flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pool_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_handle_type(handleType); rc != CUDA_SUCCESS) return rc;
  // For a file descriptor, the handle is the descriptor's value itself (passed as a pointer).
  const auto fd = static_cast<int>(reinterpret_cast<std::intptr_t>(handle));
  struct stat info {};
  if (fd < 0 || fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) return CUDA_ERROR_INVALID_VALUE;
  const int physical = memfd_device(fd, kPoolMemfdPrefix);
  const int device = physical < 0 ? -1 : ordinal_of_physical(l.st, physical);
  // Not a pool a cudasim driver exported, or one of a device this process does not see.
  if (device < 0) return CUDA_ERROR_INVALID_VALUE;
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller may close its descriptor
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* imported = new CUmemPoolHandle_st();  // never freed: see the struct's invariant
  imported->device = device;
  imported->imported = true;
  imported->file_fd = own;
  l.st.pools.insert(imported);
  *pool_out = imported;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (shareData_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Allocation* a = find_allocation(l.st, ptr, 1);
  // An allocation of an IPC capable pool of this process (a pointer inside names the allocation).
  if (a == nullptr || a->kind != AllocKind::Pool || a->pool->file_fd < 0 || a->pool->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUmemoryPool pool = a->pool;
  const PoolBlock* block = nullptr;
  for (const auto& candidate : pool->blocks) {
    if (candidate->base == a->base && candidate->in_use) block = candidate.get();
  }
  struct stat info {};
  if (block == nullptr || fstat(block->chunk->mapping.fd, &info) != 0) return CUDA_ERROR_INVALID_VALUE;
  ExportLayout data;
  data.magic = kExportMagic;
  data.file_device = static_cast<std::uint64_t>(info.st_dev);
  data.file_inode = static_cast<std::uint64_t>(info.st_ino);
  data.chunk_offset = block->chunk->file_offset;
  data.chunk_length = block->chunk->mapping.length;
  data.block_offset = block->base - block->chunk->base;
  data.size = a->size;
  data.device = l.st.device(pool->device).physical;
  std::memset(shareData_out->reserved, 0, sizeof shareData_out->reserved);
  std::memcpy(shareData_out->reserved, &data, sizeof data);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                               CUmemPoolPtrExportData* shareData) {
  Locked l;
  State& st = l.st;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (ptr_out == nullptr || shareData == nullptr || !live_pool(st, pool) || !pool->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  ExportLayout data;
  std::memcpy(&data, shareData->reserved, sizeof data);
  struct stat info {};
  // Export data of this very pool, for a range its file holds.
  if (data.magic != kExportMagic || fstat(pool->file_fd, &info) != 0 ||
      data.file_device != static_cast<std::uint64_t>(info.st_dev) ||
      data.file_inode != static_cast<std::uint64_t>(info.st_ino) || data.size == 0 || data.chunk_length == 0 ||
      data.chunk_offset % kLargePage != 0 || data.chunk_length % kLargePage != 0 ||
      data.chunk_length > static_cast<std::uint64_t>(info.st_size) ||
      data.chunk_offset > static_cast<std::uint64_t>(info.st_size) - data.chunk_length ||
      data.block_offset > data.chunk_length || data.size > data.chunk_length - data.block_offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Mapping mapping = map_device_memory(static_cast<std::size_t>(data.chunk_length));
  if (mapping.addr == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  mapping.fd = fcntl(pool->file_fd, F_DUPFD_CLOEXEC, 0);  // retire_mapping closes it
  if (mapping.fd < 0 || !map_range_over(mapping, mapping.fd, data.chunk_offset)) {
    if (mapping.fd >= 0) close(mapping.fd);
    munmap(mapping.addr, mapping.length);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(mapping.addr) + data.block_offset;
  // The importing context's, freed with it; nothing is charged here: the memory is the exporter's.
  st.allocations[base] = Allocation{base, static_cast<std::size_t>(data.size), 0, pool->device, ctx,
                                    AllocKind::Imported, pool, ++st.last_buffer_id};
  st.mappings[base] = mapping;
  *ptr_out = base;
  return CUDA_SUCCESS;
}
