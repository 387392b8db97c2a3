// Simulated device memory: host address space from mmap, per-device capacity accounting, the
// live-allocation table every memory-touching call validates against, and the synchronous
// allocation entry points.
#include "contexts.h"
#include "faults.h"
#include "pools.h"
#include "shared_device.h"
#include "state.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using namespace cudasim;

namespace {

constexpr std::size_t kPitchAlignment = 512;
constexpr std::size_t kQuarantineRanges = 1024;

void sleep_us(std::uint64_t us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// Takes `bytes` of device memory for a synchronous allocation in the current context.
CUresult allocate_sync(CUdeviceptr* dptr, std::size_t bytes) {
  std::uint64_t latency = 0;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    latency = l.st.config.alloc_latency_us;
    owe_latency(l.st.config.latency, TimedCall::mem_alloc);  // paid as the lock goes
  }
  sleep_us(latency);
  Locked l;
  State& st = l.st;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_unsafe_call(st); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = allocate_device_memory(st, ctx, bytes, dptr); rc != CUDA_SUCCESS) return rc;
  DeviceStats& stats = st.device(ctx->device).stats;
  stats.driver_allocs++;
  stats.largest_alloc = std::max<std::uint64_t>(stats.largest_alloc, bytes);
  return CUDA_SUCCESS;
}

}  // namespace

namespace cudasim {

const Allocation* find_allocation(State& st, std::uintptr_t ptr, std::size_t bytes) {
  auto it = st.allocations.upper_bound(ptr);
  if (it == st.allocations.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (ptr - a.base >= a.size) return nullptr;
  if (bytes > a.size - (ptr - a.base)) {
    // Accessible VMM mappings that are adjacent in the address space form one range. Counted in
    // bytes still missing, never as ptr + bytes (which a huge count would wrap).
    if (a.kind != AllocKind::Vmm) return nullptr;
    std::uintptr_t end = a.base + a.size;
    std::size_t missing = bytes - (end - ptr);
    for (auto next = std::next(it); missing > 0 && next != st.allocations.end() && next->first == end &&
                                    next->second.kind == AllocKind::Vmm;
         ++next) {
      missing -= std::min(missing, next->second.size);
      end += next->second.size;
    }
    if (missing > 0) return nullptr;
  }
  return &a;
}

bool sync_memops(State& st, std::uintptr_t ptr) {
  const Allocation* a = find_allocation(st, ptr, 1);
  return a != nullptr && a->sync_memops;
}

bool size_memory_file(int fd, std::uint64_t bytes) {
  if (bytes > static_cast<std::uint64_t>(INT64_MAX)) {
    errno = EFBIG;
    return false;
  }
  sigset_t file_size;
  sigset_t old_mask;
  sigset_t pending;
  sigemptyset(&file_size);
  sigaddset(&file_size, SIGXFSZ);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGXFSZ) == 1;
  pthread_sigmask(SIG_BLOCK, &file_size, &old_mask);
  const bool sized = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  const int error = errno;
  if (!sized && error == EFBIG && !was_pending) {
    const timespec no_wait{};
    while (sigtimedwait(&file_size, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = error;
  return sized;
}

Mapping map_device_memory(std::size_t bytes) {
  // Larger than any address space: refused before the length arithmetic below could wrap.
  if (bytes > (std::size_t{1} << 62)) return Mapping{};
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const int prot = PROT_READ | PROT_WRITE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (bytes < kLargePage) {
    std::size_t length = round_up(bytes, page);
    void* addr = mmap(nullptr, length, prot, flags, -1, 0);
    return addr == MAP_FAILED ? Mapping{} : Mapping{addr, length};
  }
  // Over-reserve by one large page, then trim both ends to a 2 MiB-aligned range.
  std::size_t length = round_up(bytes, kLargePage);
  void* raw = mmap(nullptr, length + kLargePage, prot, flags, -1, 0);
  if (raw == MAP_FAILED) return Mapping{};
  auto start = reinterpret_cast<std::uintptr_t>(raw);
  auto aligned = round_up(start, kLargePage);
  if (aligned > start) munmap(raw, aligned - start);
  std::size_t tail = start + length + kLargePage - (aligned + length);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + length), tail);
  return Mapping{reinterpret_cast<void*>(aligned), length};
}

void retire_mapping(State& st, Mapping mapping) {
  // Drop the contents (no RAM kept) and fault on any later access. A shared file mapping is replaced
  // instead: its pages stay only while another process maps them.
  if (mapping.fd >= 0) {
    mmap(mapping.addr, mapping.length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    close(mapping.fd);
    mapping.fd = -1;
  } else {
    madvise(mapping.addr, mapping.length, MADV_DONTNEED);
    mprotect(mapping.addr, mapping.length, PROT_NONE);
  }
  st.quarantine.push_back(mapping);
  if (st.quarantine.size() > kQuarantineRanges) {
    munmap(st.quarantine.front().addr, st.quarantine.front().length);
    st.quarantine.pop_front();
  }
}

bool reserve_capacity(Device& dev, std::uint64_t bytes) {
  if (dev.shared != nullptr) {
    if (!shared_take(*dev.shared, bytes)) return false;
  } else if (bytes > dev.total - dev.committed) {
    return false;
  }
  dev.committed += bytes;
  return true;
}

void release_capacity(Device& dev, std::uint64_t bytes) {
  dev.committed -= bytes;
  if (dev.shared != nullptr) shared_give(*dev.shared, bytes);
}

std::uint64_t device_used(Device& dev) { return dev.shared != nullptr ? shared_used(*dev.shared) : dev.committed; }

bool take_device_memory(State& st, Device& dev, std::uint64_t bytes) {
  ++st.device_allocations;
  if (st.config.fail_alloc_after && st.device_allocations > *st.config.fail_alloc_after) return false;
  if (!reserve_capacity(dev, bytes)) return false;
  dev.stats.bytes_reserved += bytes;
  dev.stats.peak_bytes_reserved = std::max(dev.stats.peak_bytes_reserved, dev.stats.bytes_reserved);
  return true;
}

void give_device_memory(Device& dev, std::uint64_t bytes) {
  release_capacity(dev, bytes);
  dev.stats.bytes_reserved -= bytes;
}

CUresult allocate_device_memory(State& st, CUctx_st* ctx, std::size_t bytes, CUdeviceptr* dptr) {
  Device& dev = st.device(ctx->device);
  std::size_t accounted = round_up(bytes, kMinAlignment);
  if (!take_device_memory(st, dev, accounted)) return CUDA_ERROR_OUT_OF_MEMORY;
  // Shared with other processes through cuIpcGetMemHandle (ipc.cpp).
  Mapping mapping = map_exportable_memory(st, bytes, st.last_buffer_id + 1);
  if (mapping.addr == nullptr) {
    give_device_memory(dev, accounted);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto base = reinterpret_cast<std::uintptr_t>(mapping.addr);
  st.allocations[base] =
      Allocation{base, bytes, accounted, ctx->device, ctx, AllocKind::Sync, nullptr, ++st.last_buffer_id};
  st.mappings[base] = mapping;
  *dptr = base;
  return CUDA_SUCCESS;
}

void release_allocation(State& st, std::uintptr_t base) {
  auto it = st.allocations.find(base);
  if (it == st.allocations.end()) return;
  give_device_memory(st.device(it->second.device), it->second.accounted);
  if (it->second.kind == AllocKind::Managed) {
    st.device(it->second.device).stats.managed_bytes -= it->second.size;
    st.managed_pages.erase(base);  // its advice goes with it
  }
  retire_mapping(st, st.mappings.extract(base).mapped());
  st.allocations.erase(it);
}

void free_context_allocations(State& st, CUctx_st* ctx) {
  std::vector<std::uintptr_t> owned;
  for (const auto& entry : st.allocations)
    if (entry.second.ctx == ctx) owned.push_back(entry.first);
  for (std::uintptr_t base : owned) release_allocation(st, base);
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUDASIM_FAULT_POINT("cuMemAlloc_v2");
  return allocate_sync(dptr, bytesize);
}

CUDASIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                           size_t Height, unsigned int ElementSizeBytes) {
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  std::size_t pitch = round_up(WidthInBytes, kPitchAlignment);
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(pitch, Height, &bytes)) bytes = SIZE_MAX;  // more than any device holds
  CUresult rc = allocate_sync(dptr, bytes);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

CUDASIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUDASIM_FAULT_POINT("cuMemFree_v2");
  CUctx_st* ctx = nullptr;
  std::uint64_t latency = 0;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    // 0 frees nothing: NVIDIA's runtime passes cudaFree(NULL)'s 0 on, which succeeds.
    if (dptr == 0) return CUDA_SUCCESS;
    auto it = l.st.allocations.find(dptr);
    if (it == l.st.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult rc = check_unsafe_call(l.st); rc != CUDA_SUCCESS) return rc;
    // Graph memory is freed by the graph (a captured cuMemFreeAsync, or cuGraphDestroy) only: a
    // graph is never launched here, so its memory never becomes the program's to free.
    if (it->second.kind == AllocKind::Graph) return CUDA_ERROR_INVALID_VALUE;
    // A module's global lives as long as its module (cuModuleUnload, cuLibraryUnload).
    if (it->second.module_global) return CUDA_ERROR_INVALID_VALUE;
    // Mapped virtual memory is unmapped (cuMemUnmap) and released (cuMemRelease), never freed; an
    // opened IPC handle is closed (cuIpcCloseMemHandle). A pointer imported from a pool is freed.
    const bool pool_import = it->second.kind == AllocKind::Imported && it->second.pool != nullptr;
    if (it->second.kind == AllocKind::Vmm || (it->second.kind == AllocKind::Imported && !pool_import)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // cuMemAllocAsync memory: back to its pool at once, without the implicit synchronisation.
    if (it->second.kind == AllocKind::Pool) return free_pool_memory(l.st, dptr, nullptr);
    ctx = it->second.ctx;
    if (it->second.kind == AllocKind::Sync) latency = l.st.config.free_latency_us;  // managed memory: none
    owe_latency(l.st.config.latency, TimedCall::mem_free);
    l.st.device(ctx->device).stats.context_syncs++;
  }
  // The memory may still be in use by queued work: wait for everything in its context.
  synchronize_context(ctx);
  sleep_us(latency);
  Locked l;
  State& st = l.st;
  auto it = st.allocations.find(dptr);
  const AllocKind kind = it == st.allocations.end() ? AllocKind::Pool : it->second.kind;
  if (kind == AllocKind::Imported && it->second.pool != nullptr) return free_imported_pointer(st, dptr, nullptr);
  if (kind != AllocKind::Sync && kind != AllocKind::Managed) return CUDA_ERROR_INVALID_VALUE;
  DeviceStats& stats = st.device(it->second.device).stats;
  ++(kind == AllocKind::Managed ? stats.managed_frees : stats.driver_frees);
  release_allocation(st, dptr);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CUDASIM_FAULT_POINT("cuMemGetInfo_v2");
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device& dev = l.st.device(ctx->device);
  *free = dev.total - std::min(dev.total, device_used(dev));
  *total = dev.total;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  std::uintptr_t base = 0;
  std::size_t size = 0;
  if (const Allocation* a = find_allocation(l.st, dptr, 1)) {
    base = a->base;
    size = a->size;
  } else if (!pinned_range_of(l.st, dptr, &base, &size)) {  // mapped page-locked host memory counts too
    return CUDA_ERROR_NOT_FOUND;
  }
  if (pbase != nullptr) *pbase = base;
  if (psize != nullptr) *psize = size;
  return CUDA_SUCCESS;
}

namespace {

// cuPointerGetAttribute's answer for one attribute, with State::mu held.
CUresult pointer_attribute(State& st, void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  // Reserved virtual address space (mapped or not) answers for itself (vmm.cpp).
  if (CUresult rc = CUDA_SUCCESS; vmm_pointer_attribute(st, data, attribute, ptr, &rc)) return rc;
  if (CUresult rc = CUDA_SUCCESS; host_pointer_attribute(st, data, attribute, ptr, &rc)) return rc;
  const Allocation* a = find_allocation(st, ptr, 1);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;  // not device memory known to the driver
  const Device& dev = st.device(a->device);
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = a->ctx != nullptr ? a->ctx : dev.primary;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<CUmemorytype*>(data) = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = a->kind == AllocKind::Managed ? 1 : 0;  // bool-sized int in practice
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:  // only managed memory is valid on the host too
      if (a->kind != AllocKind::Managed) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      // Only cuMemAlloc memory has legacy IPC handles (cuIpcGetMemHandle); pool memory is shared
      // through its pool, and memory opened from another process is not exported again.
      *static_cast<int*>(data) = a->kind == AllocKind::Sync ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = a->device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = a->base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = a->size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = a->pool;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = a->buffer_id;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      if (a->kind == AllocKind::Vmm) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = a->sync_memops ? 1 : 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// The bytes cuPointerGetAttributes writes for each attribute it documents (the types
// cuPointerGetAttribute writes them as; booleans as int); 0 for any other attribute.
std::size_t listed_attribute_bytes(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(CUmemorytype);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return sizeof(int);
    default: return 0;
  }
}

}  // namespace

CUDASIM_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return pointer_attribute(l.st, data, attribute, ptr);
}

// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, the one attribute documented as settable, on memory the driver
// allocated (not virtual memory, whose attributes vmm.cpp answers, nor page-locked host memory here);
// anything else: CUDA_ERROR_INVALID_VALUE. Setting it waits for the work already queued, as
// documented for synchronous operations still pending.
CUDASIM_EXPORT CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attribute, CUdeviceptr ptr) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (value == nullptr || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
    auto it = l.st.allocations.upper_bound(ptr);
    if (it == l.st.allocations.begin()) return CUDA_ERROR_INVALID_VALUE;
    Allocation& a = std::prev(it)->second;
    if (ptr - a.base >= a.size || a.kind == AllocKind::Vmm) return CUDA_ERROR_INVALID_VALUE;
    a.sync_memops = *static_cast<const unsigned int*>(value) != 0;
    if (!a.sync_memops) return CUDA_SUCCESS;
  }
  wait_for_all_queued_work();
  return CUDA_SUCCESS;
}

// As documented: the attributes cuPointerGetAttributes lists, each answered as cuPointerGetAttribute
// answers it; one without a value for `ptr` (not a CUDA pointer at all, the host pointer of device
// memory, ...) gets its null value and the call still succeeds. An attribute it does not list, or a
// null array or output: CUDA_ERROR_INVALID_VALUE, before anything is written.
CUDASIM_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                               void** data, CUdeviceptr ptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (numAttributes > 0 && (attributes == nullptr || data == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr || listed_attribute_bytes(attributes[i]) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned int i = 0; i < numAttributes; ++i) {
    if (pointer_attribute(l.st, data[i], attributes[i], ptr) != CUDA_SUCCESS) {
      std::memset(data[i], 0, listed_attribute_bytes(attributes[i]));
    }
  }
  return CUDA_SUCCESS;
}
