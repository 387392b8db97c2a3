// Page-locked ("pinned") host memory: cuMemHostAlloc / cuMemAllocHost and cuMemHostRegister. With
// unified addressing every pinned range is mapped for the devices at its own address, so the device
// pointer of pinned memory is the host pointer. Pinned memory takes no device memory. What changes
// for copies is only their synchronisation: a host source that is pinned is not staged, so an async
// copy reads it when the copy runs on its stream (copies.cpp).
#include "contexts.h"
#include "state.h"

#include <sys/mman.h>
#include <unistd.h>

using namespace cudasim;

namespace {

constexpr unsigned kAllocFlags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned kRegisterFlags =
    CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

// The pinned range holding [ptr, ptr + bytes), or null. Needs State::mu.
const PinnedRange* find_pinned_range(const State& st, std::uintptr_t ptr, std::size_t bytes) {
  auto it = st.pinned.upper_bound(ptr);
  if (it == st.pinned.begin()) return nullptr;
  --it;
  const PinnedRange& r = it->second;
  if (ptr - r.base >= r.size || bytes > r.size - (ptr - r.base)) return nullptr;
  return &r;
}

CUresult allocate_pinned(void** pp, std::size_t bytes, unsigned flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (pp == nullptr || bytes == 0 || (flags & ~kAllocFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (at == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<std::uintptr_t>(at);
  l.st.pinned[base] = PinnedRange{base, bytes, flags, ctx, PinnedRange::Origin::Allocated};
  l.st.pinned_stats.allocs++;
  l.st.pinned_stats.bytes += bytes;
  l.st.pinned_stats.peak_bytes = std::max(l.st.pinned_stats.peak_bytes, l.st.pinned_stats.bytes);
  *pp = at;
  return CUDA_SUCCESS;
}

// Whether [p, p + bytes) is mapped host memory of this process.
bool mapped_in_process(void* p, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<std::uintptr_t>(p) / page * page;
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + bytes;
  return msync(reinterpret_cast<void*>(start), end - start, MS_ASYNC) == 0;
}

CUresult register_host(void* p, std::size_t bytes, unsigned flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  if (p == nullptr || bytes == 0 || (flags & ~kRegisterFlags) != 0 || bytes > UINTPTR_MAX - base)
    return CUDA_ERROR_INVALID_VALUE;
  // Any overlap with a pinned range (allocated or registered) is already registered.
  auto next = l.st.pinned.lower_bound(base);
  if (next != l.st.pinned.end() && next->first < base + bytes) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (next != l.st.pinned.begin() && std::prev(next)->second.base + std::prev(next)->second.size > base)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (!mapped_in_process(p, bytes)) return CUDA_ERROR_INVALID_VALUE;
  l.st.pinned[base] = PinnedRange{base, bytes, flags, ctx, PinnedRange::Origin::Registered};
  l.st.pinned_stats.registers++;
  return CUDA_SUCCESS;
}

// The last operation queued on every stream of every live context, to wait for before pinned memory
// stops being pinned (queued copies may still use it). Needs State::mu.
std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> queued_work(State& st) {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> queued;
  for (CUctx_st* ctx : st.contexts)
    for (auto& stream : context_streams(ctx)) queued.emplace_back(stream, stream->last_submitted());
  return queued;
}

}  // namespace

namespace cudasim {

bool host_range_pinned(const State& st, std::uintptr_t ptr, std::size_t bytes) {
  return find_pinned_range(st, ptr, bytes) != nullptr;
}

bool pinned_range_of(const State& st, std::uintptr_t ptr, std::uintptr_t* base, std::size_t* size) {
  const PinnedRange* r = find_pinned_range(st, ptr, 1);
  if (r == nullptr) return false;
  *base = r->base;
  *size = r->size;
  return true;
}

bool host_pointer_attribute(State& st, void* data, CUpointer_attribute attribute, CUdeviceptr ptr, CUresult* rc) {
  const PinnedRange* r = find_pinned_range(st, ptr, 1);
  if (r == nullptr) return false;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = r->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<CUmemorytype*>(data) = CU_MEMORYTYPE_HOST; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = reinterpret_cast<void*>(ptr); break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<int*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<int*>(data) = 1; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = r->ctx->device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = r->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = r->size; break;
    default: *rc = CUDA_ERROR_INVALID_VALUE; return true;
  }
  *rc = CUDA_SUCCESS;
  return true;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return allocate_pinned(pp, bytesize, Flags);
}
CUDASIM_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) { return allocate_pinned(pp, bytesize, 0); }

// Frees memory from cuMemHostAlloc / cuMemAllocHost. Work still queued may read or write it, so
// like the driver this waits for the device first.
CUDASIM_EXPORT CUresult cuMemFreeHost(void* p) {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> queued;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    auto it = l.st.pinned.find(reinterpret_cast<std::uintptr_t>(p));
    if (p == nullptr || it == l.st.pinned.end() || it->second.origin != PinnedRange::Origin::Allocated)
      return CUDA_ERROR_INVALID_VALUE;
    queued = queued_work(l.st);
  }
  for (auto& [stream, seq] : queued) stream->wait_until(seq);
  Locked l;
  auto it = l.st.pinned.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == l.st.pinned.end()) return CUDA_ERROR_INVALID_VALUE;  // freed by another thread meanwhile
  l.st.pinned_stats.frees++;
  l.st.pinned_stats.bytes -= it->second.size;
  munmap(p, it->second.size);
  l.st.pinned.erase(it);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (find_pinned_range(l.st, reinterpret_cast<std::uintptr_t>(p), 1) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

// With unified addressing all pinned memory is mapped, as if CU_MEMHOSTALLOC_DEVICEMAP was given.
CUDASIM_EXPORT CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const PinnedRange* r = find_pinned_range(l.st, reinterpret_cast<std::uintptr_t>(p), 1);
  if (r == nullptr || r->origin != PinnedRange::Origin::Allocated) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = r->flags | CU_MEMHOSTALLOC_DEVICEMAP;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  return register_host(p, bytesize, Flags);
}
CUDASIM_EXPORT CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return register_host(p, bytesize, Flags);
}

CUDASIM_EXPORT CUresult cuMemHostUnregister(void* p) {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> queued;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto it = l.st.pinned.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == l.st.pinned.end() || it->second.origin != PinnedRange::Origin::Registered)
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    queued = queued_work(l.st);
  }
  for (auto& [stream, seq] : queued) stream->wait_until(seq);
  Locked l;
  if (l.st.pinned.erase(reinterpret_cast<std::uintptr_t>(p)) == 0) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  l.st.pinned_stats.unregisters++;
  return CUDA_SUCCESS;
}
