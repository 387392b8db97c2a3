// Stream-ordered memory pools (cuMemAllocAsync and friends).
//
// A pool reserves memory from the device in chunks of 2 MiB granularity. An allocation of 2 MiB or
// more gets a chunk of its own; smaller ones are carved one after another from a chunk with room
// left (512-byte aligned), as real pools pack small allocations together. Each allocation is one
// pool block, which keeps its size: a freed block is reusable (by a request it fits without being
// more than twice as large) at once by later work on the stream that freed it, and by other streams
// once the free operation itself has executed on that stream. Chunks whose blocks are all idle go
// back to the device, above the pool's release threshold, at synchronisation points (stream,
// event, context) and on cuMemPoolTrimTo. Taking a block from the device and giving one back cost CUDASIM_ALLOC_LATENCY_US /
// CUDASIM_FREE_LATENCY_US, like cuMemAlloc and cuMemFree (paid by the thread that grew or released).
// A pool created with a non-zero CUmemPoolProps::maxSize never reserves more than that in total.
// A pool created with a POSIX descriptor handle type backs its chunks with one file (pool_ipc.cpp).
#include "contexts.h"
#include "faults.h"
#include "pools.h"
#include "state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

using namespace cudasim;

namespace {

constexpr std::size_t kPoolGranularity = kLargePage;

bool live_pool(State& st, CUmemoryPool pool) {
  return pool != nullptr && st.pools.count(pool) != 0 && !pool->destroyed;
}

// Gives chunks whose blocks are all idle back to the device until at most `keep` bytes stay reserved.
void release_idle_blocks(State& st, CUmemoryPool pool, std::uint64_t keep) {
  if (pool->reserved <= keep) return;
  Device& dev = st.device(pool->device);
  std::unordered_set<PoolChunk*> busy;
  for (const auto& block : pool->blocks) {
    if (!block->idle()) busy.insert(block->chunk.get());
  }
  auto& chunks = pool->chunks;
  // Largest first: fewest mappings for the most bytes.
  std::stable_sort(chunks.begin(), chunks.end(), [](const auto& a, const auto& b) {
    return a->mapping.length > b->mapping.length;
  });
  for (auto it = chunks.begin(); it != chunks.end() && pool->reserved > keep;) {
    PoolChunk& chunk = **it;
    if (busy.contains(&chunk)) {
      ++it;
      continue;
    }
    std::erase_if(pool->blocks, [&chunk](const auto& block) { return block->chunk.get() == &chunk; });
    pool->reserved -= chunk.mapping.length;
    dev.stats.pool_bytes_reserved -= chunk.mapping.length;
    if (chunk.mapping.fd >= 0) punch_pool_file(chunk);  // an exportable pool's
    give_device_memory(dev, chunk.mapping.length);
    retire_mapping(st, chunk.mapping);
    owe_latency(st.config.free_latency_us);
    it = chunks.erase(it);
  }
}

void note_reserved(Device& dev, CUmemoryPool pool, std::uint64_t bytes) {
  pool->reserved += bytes;
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  dev.stats.pool_bytes_reserved += bytes;
  dev.stats.pool_peak_bytes_reserved = std::max(dev.stats.pool_peak_bytes_reserved, dev.stats.pool_bytes_reserved);
}

void note_used(Device& dev, CUmemoryPool pool, std::uint64_t bytes) {
  pool->used += bytes;
  pool->used_high = std::max(pool->used_high, pool->used);
  dev.stats.pool_bytes_used += bytes;
  dev.stats.pool_peak_bytes_used = std::max(dev.stats.pool_peak_bytes_used, dev.stats.pool_bytes_used);
}

// A block the stream may use now: idle, big enough but not wastefully so, and either freed
// earlier on this same stream or with its free already executed.
PoolBlock* find_reusable(CUmemoryPool pool, std::size_t bytes, const std::shared_ptr<CUstream_st>& stream) {
  PoolBlock* best = nullptr;
  std::size_t limit = bytes > SIZE_MAX / 2 ? SIZE_MAX : bytes * 2;
  for (auto& block : pool->blocks) {
    if (block->in_use || block->length < bytes || block->length > limit) continue;
    bool ordered = block->free_done || (block->freed_on == stream);
    if (!ordered) continue;
    if (best == nullptr || block->length < best->length) best = block.get();
  }
  return best;
}

PoolBlock* carve_block(CUmemoryPool pool, const std::shared_ptr<PoolChunk>& chunk, std::size_t bytes) {
  auto block = std::make_shared<PoolBlock>();
  block->base = chunk->base + chunk->carved;
  block->length = bytes;
  block->chunk = chunk;
  chunk->carved += bytes;
  pool->blocks.push_back(std::move(block));
  return pool->blocks.back().get();
}

// A small request carved from the room left in one of the pool's chunks, or null.
PoolBlock* carve_from_existing(CUmemoryPool pool, std::size_t bytes) {
  if (bytes >= kPoolGranularity) return nullptr;
  for (const auto& chunk : pool->chunks) {
    if (chunk->mapping.length - chunk->carved >= bytes) return carve_block(pool, chunk, bytes);
  }
  return nullptr;
}

PoolBlock* reserve_block(State& st, CUmemoryPool pool, std::size_t bytes) {
  Device& dev = st.device(pool->device);
  std::size_t length = round_up(bytes, kPoolGranularity);  // SIZE_MAX when that would not fit
  // Beyond the pool's maxSize (compared without computing reserved + length, which could wrap
  // for a huge request): idle blocks of this pool make room if they can (largest first), else the
  // growth fails without asking the device.
  auto beyond_max_size = [&] { return length > pool->max_size - pool->reserved; };
  if (pool->max_size != 0 && beyond_max_size()) {
    if (length > pool->max_size) return nullptr;
    release_idle_blocks(st, pool, pool->max_size - length);
    if (beyond_max_size()) return nullptr;
  }
  owe_latency(st.config.alloc_latency_us);  // every growth attempt, as every cuMemAlloc
  if (!take_device_memory(st, dev, length)) {
    // Out of device memory: give back every idle block of the device's pools, then retry once.
    for (CUmemoryPool other : st.pools) {
      if (other->device == pool->device) release_idle_blocks(st, other, 0);
    }
    if (!take_device_memory(st, dev, length)) return nullptr;
  }
  Mapping mapping = map_device_memory(length);
  auto chunk = std::make_shared<PoolChunk>();
  if (mapping.addr != nullptr && pool->file_fd >= 0 && !map_pool_file(*pool, mapping, *chunk)) {
    munmap(mapping.addr, mapping.length);
    mapping.addr = nullptr;
  }
  if (mapping.addr == nullptr) {
    give_device_memory(dev, length);
    return nullptr;
  }
  chunk->base = reinterpret_cast<std::uintptr_t>(mapping.addr);
  chunk->mapping = mapping;
  note_reserved(dev, pool, length);
  pool->chunks.push_back(chunk);
  // A large request takes the whole chunk (rounding included), as before packing existed.
  return carve_block(pool, chunk, bytes >= kPoolGranularity ? length : bytes);
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream handle,
                     bool per_thread_default) {
  Locked l;
  State& st = l.st;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<CUstream_st> stream;
  if (CUresult rc = resolve_stream(st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
  if (pool == nullptr) pool = st.device(stream->ctx->device).current_pool;
  else if (!live_pool(st, pool) || pool->imported) return CUDA_ERROR_INVALID_VALUE;  // imported: allocates nothing
  std::size_t bytes = round_up(bytesize, kMinAlignment);
  // On a capturing stream: a memory-allocation node, whose memory the graph owns (not the pool).
  if (stream->capture) return graph_allocate(st, stream.get(), pool->device, bytesize, dptr);
  bool captured = false;  // the legacy stream while a blocking stream captures
  if (CUresult rc = capture_work(st, stream, NodeKind::MemAlloc, &captured); rc != CUDA_SUCCESS) return rc;
  PoolBlock* block = find_reusable(pool, bytes, stream);
  if (block == nullptr) block = carve_from_existing(pool, bytes);
  if (block == nullptr) block = reserve_block(st, pool, bytes);
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Device& dev = st.device(pool->device);
  block->in_use = true;
  block->freed_on.reset();
  note_used(dev, pool, block->length);
  st.allocations[block->base] =
      Allocation{block->base, bytesize, block->length, pool->device, nullptr, AllocKind::Pool, pool,
                 ++st.last_buffer_id};
  dev.stats.pool_async_allocs++;
  dev.stats.largest_alloc = std::max<std::uint64_t>(dev.stats.largest_alloc, bytesize);
  *dptr = block->base;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr dptr, CUstream handle, bool per_thread_default) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  std::shared_ptr<CUstream_st> stream;
  if (CUresult rc = resolve_stream(l.st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
  if (stream->capture) return graph_free(l.st, stream.get(), dptr);  // a memory-free node
  bool captured = false;
  if (CUresult rc = capture_work(l.st, stream, NodeKind::MemFree, &captured); rc != CUDA_SUCCESS) return rc;
  return free_pool_memory(l.st, dptr, stream);
}

CUresult check_pool_call(Locked& l, CUmemoryPool pool) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return live_pool(l.st, pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

namespace cudasim {

CUmemoryPool create_default_pool(State& st, int device) {
  auto* pool = new CUmemPoolHandle_st();
  pool->device = device;
  pool->is_default = true;
  st.pools.insert(pool);
  return pool;
}

CUresult free_pool_memory(State& st, CUdeviceptr dptr, const std::shared_ptr<CUstream_st>& stream) {
  auto it = st.allocations.find(dptr);
  if (it != st.allocations.end() && it->second.kind == AllocKind::Imported && it->second.pool != nullptr) {
    return free_imported_pointer(st, dptr, stream);
  }
  if (it == st.allocations.end() || it->second.kind != AllocKind::Pool) return CUDA_ERROR_INVALID_VALUE;
  CUmemoryPool pool = it->second.pool;
  auto found = std::find_if(pool->blocks.begin(), pool->blocks.end(),
                            [dptr](const auto& b) { return b->base == dptr; });
  std::shared_ptr<PoolBlock> block = *found;
  st.allocations.erase(it);
  Device& dev = st.device(pool->device);
  pool->used -= block->length;
  dev.stats.pool_bytes_used -= block->length;
  dev.stats.pool_async_frees++;
  block->in_use = false;
  const std::uint64_t free_number = ++block->frees;
  if (!stream) {
    // cuMemFree: the caller guarantees the memory is no longer used, so every stream may reuse it
    // now (a pending earlier free of the block no longer matters: its number is stale).
    block->free_done = true;
    block->freed_on.reset();
    if (pool->destroyed) release_idle_blocks(st, pool, 0);
    return CUDA_SUCCESS;
  }
  block->free_done = false;
  block->freed_on = stream;
  submit(st, stream, [block, pool, free_number] {
    Locked done;
    // A block reused on its stream and freed again meanwhile waits for that later free instead.
    if (block->frees == free_number) block->free_done = true;
    if (pool->destroyed) release_idle_blocks(done.st, pool, 0);
  });
  return CUDA_SUCCESS;
}

void release_pools_above_threshold(State& st, int device) {
  for (CUmemoryPool pool : st.pools) {
    if (pool->device == device) release_idle_blocks(st, pool, pool->destroyed ? 0 : pool->release_threshold);
  }
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  CUDASIM_FAULT_POINT("cuMemAllocAsync");
  return alloc_async(dptr, bytesize, nullptr, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  CUDASIM_FAULT_POINT("cuMemAllocAsync");
  return alloc_async(dptr, bytesize, nullptr, hStream, true);
}
CUDASIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream) {
  CUDASIM_FAULT_POINT("cuMemAllocFromPoolAsync");
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytesize, pool, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                     CUmemoryPool pool, CUstream hStream) {
  CUDASIM_FAULT_POINT("cuMemAllocFromPoolAsync");
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytesize, pool, hStream, true);
}
CUDASIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  CUDASIM_FAULT_POINT("cuMemFreeAsync");
  return free_async(dptr, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  CUDASIM_FAULT_POINT("cuMemFreeAsync");
  return free_async(dptr, hStream, true);
}

CUDASIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  *pool_out = l.st.device(dev).default_pool;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  *pool = l.st.device(dev).current_pool;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  Locked l;
  if (CUresult rc = check_pool_call(l, pool); rc != CUDA_SUCCESS) return rc;
  if (!valid_device(l.st, dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (pool->device != dev || pool->imported) return CUDA_ERROR_INVALID_VALUE;
  l.st.device(dev).current_pool = pool;
  return CUDA_SUCCESS;
}

// The pools of a location and allocation type (cuMemGetDefaultMemPool, cuMemGetMemPool,
// cuMemSetMemPool, CUDA 13.0): pinned memory on a device is the device's pools, as the cuDevice*MemPool
// calls have them. Host and managed pools are valid in CUDA but not simulated.
static CUresult check_pool_location(State& st, const CUmemLocation* location, CUmemAllocationType type) {
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool host = location->type == CU_MEM_LOCATION_TYPE_HOST || location->type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  switch (type) {
    case CU_MEM_ALLOCATION_TYPE_PINNED:
      if (host) return CUDA_ERROR_NOT_SUPPORTED;
      if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
      return valid_device(st, location->id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_ALLOCATION_TYPE_MANAGED:
      if (host || location->type == CU_MEM_LOCATION_TYPE_DEVICE || location->type == CU_MEM_LOCATION_TYPE_NONE)
        return CUDA_ERROR_NOT_SUPPORTED;
      return CUDA_ERROR_INVALID_VALUE;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The default (current = false) or current pool of a location and allocation type.
static CUresult pool_of_location(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type,
                                 bool current) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_pool_location(l.st, location, type); rc != CUDA_SUCCESS) return rc;
  const Device& device = l.st.device(location->id);
  *pool_out = current ? device.current_pool : device.default_pool;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool_out, CUmemLocation* location, CUmemAllocationType type) {
  return pool_of_location(pool_out, location, type, false);
}

CUDASIM_EXPORT CUresult cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location, CUmemAllocationType type) {
  return pool_of_location(pool, location, type, true);
}

CUDASIM_EXPORT CUresult cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type, CUmemoryPool pool) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_pool_location(l.st, location, type); rc != CUDA_SUCCESS) return rc;
  }
  // The location and type must be the pool's: for pinned device memory, cuDeviceSetMemPool's rules.
  return cuDeviceSetMemPool(location->id, pool);
}

CUDASIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pool == nullptr || poolProps == nullptr || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(l.st, poolProps->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  // Handle types: a POSIX file descriptor makes the pool exportable; Win32 and fabric handles do not
  // exist on this platform.
  const auto types = static_cast<unsigned>(poolProps->handleTypes);
  constexpr unsigned kKnownTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                                   CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
  if ((types & ~kKnownTypes) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((types & ~unsigned{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR}) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  auto* created = new CUmemPoolHandle_st();  // never freed: see the struct's invariant
  created->device = poolProps->location.id;
  created->max_size = poolProps->maxSize;
  if (types != 0 && !make_pool_exportable(*created)) {
    delete created;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  l.st.pools.insert(created);
  *pool = created;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  Locked l;
  if (CUresult rc = check_pool_call(l, pool); rc != CUDA_SUCCESS) return rc;
  if (pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  Device& dev = l.st.device(pool->device);
  if (dev.current_pool == pool) dev.current_pool = dev.default_pool;
  // Outstanding allocations stay valid; their blocks go back once freed.
  pool->destroyed = true;
  release_idle_blocks(l.st, pool, 0);
  // Its file stays reachable through the chunks' mappings (punched as they go) and exported descriptors.
  if (pool->file_fd >= 0) close(std::exchange(pool->file_fd, -1));
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  CUDASIM_FAULT_POINT("cuMemPoolTrimTo");
  Locked l;
  if (CUresult rc = check_pool_call(l, pool); rc != CUDA_SUCCESS) return rc;
  release_idle_blocks(l.st, pool, minBytesToKeep);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Locked l;
  if (CUresult rc = check_pool_call(l, pool); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      pool->reuse_follow_event_dependencies = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      pool->reuse_allow_opportunistic = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      pool->reuse_allow_internal_dependencies = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:  // may only be reset, to the current value
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->reserved_high = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Peer access to a pool's memory. Every descriptor is checked before any applies: a device location
// of a valid device, flags none, read or read-write; a device that cannot access the pool's device
// (cuDeviceCanAccessPeer) only with none; the pool's own device only with read-write (it always has it).
namespace cudasim {

CUresult check_access_descs(const State& st, int device, const CUmemAccessDesc* map, size_t count) {
  if (map == nullptr && count != 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& desc = map[i];
    if (desc.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(st, desc.location.id)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc.location.id == device) {
      if (desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
    } else if (desc.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && !st.config.peer_access) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  Locked l;
  if (CUresult rc = check_pool_call(l, pool); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_access_descs(l.st, pool->device, map, count); rc != CUDA_SUCCESS) return rc;
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& desc = map[i];
    if (desc.location.id == pool->device) continue;
    if (desc.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      pool->peer_access.erase(desc.location.id);
    } else {
      pool->peer_access[desc.location.id] = desc.flags;
    }
  }
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool, CUmemLocation* location) {
  Locked l;
  if (CUresult rc = check_pool_call(l, memPool); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr || location == nullptr || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !valid_device(l.st, location->id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (location->id == memPool->device) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  } else {
    const auto found = memPool->peer_access.find(location->id);
    *flags = found != memPool->peer_access.end() ? found->second : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Locked l;
  if (CUresult rc = check_pool_call(l, pool); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* u64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *static_cast<int*>(value) = pool->reuse_follow_event_dependencies;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *static_cast<int*>(value) = pool->reuse_allow_opportunistic;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = pool->reuse_allow_internal_dependencies;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *u64 = pool->release_threshold; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *u64 = pool->reserved; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *u64 = pool->reserved_high; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *u64 = pool->used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *u64 = pool->used_high; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}
