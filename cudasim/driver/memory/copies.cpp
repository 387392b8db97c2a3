// Copies and sets, synchronous and stream-ordered. Ranges are validated against live allocations
// when the call is made; the bytes move when the stream's worker reaches the operation (a host
// source of an async copy is read at the call).
#include "state.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

using namespace cudasim;

namespace {

enum class Side { Device, Host, Unified };

// One side of a transfer: Device must lie inside a live allocation; Host and Unified (cuMemcpy:
// either kind) must be non-null and must not point into freed device memory.
struct Range {
  std::uintptr_t ptr;
  std::size_t bytes;
  Side side;
};

bool in_quarantine(const State& st, std::uintptr_t ptr) {
  for (const Mapping& m : st.quarantine) {
    auto base = reinterpret_cast<std::uintptr_t>(m.addr);
    if (ptr >= base && ptr - base < m.length) return true;
  }
  return false;
}

bool valid_range(State& st, const Range& r) {
  if (r.ptr == 0) return false;
  switch (r.side) {
    // Page-locked host memory is mapped (unified addressing): its address is a device pointer too.
    case Side::Device: return find_allocation(st, r.ptr, r.bytes) != nullptr || host_range_pinned(st, r.ptr, r.bytes);
    case Side::Host: return !in_quarantine(st, r.ptr) && !vmm_inaccessible(st, r.ptr, r.bytes);
    case Side::Unified:
      if (find_allocation(st, r.ptr, 1) != nullptr) return find_allocation(st, r.ptr, r.bytes) != nullptr;
      return !in_quarantine(st, r.ptr) && !vmm_inaccessible(st, r.ptr, r.bytes);
  }
  return false;
}

}  // namespace

bool cudasim::transfer_range_valid(State& st, CUmemorytype type, std::uintptr_t ptr, std::size_t bytes) {
  const Side side = type == CU_MEMORYTYPE_DEVICE ? Side::Device : type == CU_MEMORYTYPE_HOST ? Side::Host : Side::Unified;
  return bytes == 0 || valid_range(st, {ptr, bytes, side});
}

namespace {

CUmemorytype memory_type(Side side) {
  switch (side) {
    case Side::Device: return CU_MEMORYTYPE_DEVICE;
    case Side::Host: return CU_MEMORYTYPE_HOST;
    case Side::Unified: break;
  }
  return CU_MEMORYTYPE_UNIFIED;
}

// A captured copy's node parameters, as cuGraphMemcpyNodeGetParams answers them: one row.
CUDA_MEMCPY3D copy_node_params(const Range& dst, const Range& src) {
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = memory_type(src.side);
  p.srcHost = reinterpret_cast<const void*>(src.ptr);
  p.srcDevice = src.ptr;
  p.dstMemoryType = memory_type(dst.side);
  p.dstHost = reinterpret_cast<void*>(dst.ptr);
  p.dstDevice = dst.ptr;
  p.WidthInBytes = src.bytes;
  p.Height = 1;
  p.Depth = 1;
  return p;
}

// Validates the ranges, then queues the operation `plan` returns (under State::mu) in stream order;
// `plan` also says whether the call waits for it (the host-synchronous forms). Captured, the node
// made keeps `memset` as its parameters (a set), or the copy's.
template <typename Plan>
CUresult issue(CUstream handle, bool per_thread_default, std::initializer_list<Range> ranges, Plan plan,
               const CUDA_MEMSET_NODE_PARAMS& memset = {}) {
  const bool is_copy = ranges.size() == 2;
  return enqueue_transfer(
      handle, per_thread_default, is_copy ? NodeKind::Memcpy : NodeKind::Memset,
      [&](State& st, bool capturing, bool* wait, Operation* op) {
        for (const Range& r : ranges) {
          if (r.bytes > 0 && !valid_range(st, r)) return CUDA_ERROR_INVALID_VALUE;
        }
        // The first range is the destination: read-only virtual memory (cuMemSetAccess) takes no writes.
        if (!vmm_range_writable(st, ranges.begin()->ptr, ranges.begin()->bytes)) return CUDA_ERROR_INVALID_VALUE;
        *op = plan(st, wait, capturing);
        return CUDA_SUCCESS;
      },
      [&](CUgraphNode_st* node) {
        if (is_copy) node->copy = copy_node_params(ranges.begin()[0], ranges.begin()[1]);
        else node->memset = memset;
      });
}

}  // namespace

CUresult cudasim::enqueue_transfer(CUstream handle, bool per_thread_default, NodeKind kind,
                                   const std::function<CUresult(State&, bool, bool*, Operation*)>& prepare,
                                   const std::function<void(CUgraphNode_st*)>& keep) {
  std::shared_ptr<CUstream_st> stream;
  std::uint64_t seq = 0;
  bool wait = false;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = resolve_stream(l.st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
    Operation op;
    if (CUresult rc = prepare(l.st, stream->capture != nullptr, &wait, &op); rc != CUDA_SUCCESS) return rc;
    // A host-synchronous call cannot wait for a capturing stream; async work becomes a graph node.
    if (wait && stream->capture) {
      invalidate(*stream->capture);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    bool captured = false;
    CUgraphNode_st* node = nullptr;
    if (CUresult rc = capture_work(l.st, stream, kind, &captured, op, &node); rc != CUDA_SUCCESS) return rc;
    if (captured) {
      if (keep) keep(node);
      return CUDA_SUCCESS;
    }
    seq = submit(l.st, stream, std::move(op), wait);
  }
  if (wait) stream->run_or_wait_until(seq);
  return CUDA_SUCCESS;
}

namespace {

void* host(std::uintptr_t p) { return reinterpret_cast<void*>(p); }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// Whether a validated side of a copy is device memory (Unified: whichever it points into).
bool on_device(State& st, std::uintptr_t ptr, Side side) {
  return side == Side::Device || (side == Side::Unified && find_allocation(st, ptr, 1) != nullptr);
}

// How a copy synchronises with the host, after NVIDIA's "API synchronization behavior": the
// synchronous forms return once the copy is done, except device to device, which is only queued;
// the async forms are queued, except host to host, which is done at once, and a pageable host
// source is read when the call is made (it is staged), so the caller may reuse it; a pinned one
// (host_memory.cpp) is read when the copy runs.
CUresult copy(CUdeviceptr dst, Side dst_side, CUdeviceptr src, Side src_side, std::size_t n, CUstream s,
              bool ptd, bool sync) {
  return issue(s, ptd, {{dst, n, dst_side}, {src, n, src_side}}, [=](State& st, bool* wait, bool capturing) -> Operation {
    const bool dst_device = on_device(st, dst, dst_side);
    const bool src_device = on_device(st, src, src_side);
    *wait = sync ? !(dst_device && src_device) || sync_memops(st, dst) || sync_memops(st, src)
                 : !(dst_device || src_device);
    // Only pageable memory is staged; a pinned source is read when the copy runs, and so is any
    // source of a captured copy, which runs each time its graph is launched.
    if (!sync && !capturing && dst_device && !src_device && n > 0 && !host_range_pinned(st, src, n)) {
      auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<unsigned char*>(host(src)),
                                                                 static_cast<unsigned char*>(host(src)) + n);
      return [dst, staged] { std::memcpy(host(dst), staged->data(), staged->size()); };
    }
    return [dst, src, n] { std::memmove(host(dst), host(src), n); };
  });
}

// Sets never block the host: device memory is the only target, and even the synchronous forms
// are only queued on their default stream, unless the memory has CU_POINTER_ATTRIBUTE_SYNC_MEMOPS.
template <typename T>
CUresult set(CUdeviceptr dst, T value, std::size_t count, CUstream s, bool ptd, bool sync) {
  // A count whose size in bytes does not fit a size_t fits no allocation either (never wrapped to
  // a small range that would pass the check while the worker writes `count` elements).
  std::size_t bytes = 0;
  if (dst % sizeof(T) != 0 || __builtin_mul_overflow(count, sizeof(T), &bytes)) {
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  CUDA_MEMSET_NODE_PARAMS node{};  // as captured: one row of `count` elements
  node.dst = dst;
  node.value = value;
  node.elementSize = sizeof(T);
  node.width = count;
  node.height = 1;
  return issue(
      s, ptd, {{dst, bytes, Side::Device}},
      [=](State& st, bool* wait, bool) -> Operation {
        *wait = sync && sync_memops(st, dst);
        // std::fill_n on a value held in a local: an element loop through the closure reloads the
        // value at every store (the destination might alias it) and writes a byte a cycle.
        return [dst, value, count] {
          const T element = value;
          std::fill_n(static_cast<T*>(host(dst)), count, element);
        };
      },
      node);
}

constexpr bool kSync = true;
constexpr bool kAsync = false;
constexpr bool kLegacy = false;
constexpr bool kPerThread = true;

// A copy between two contexts' memory: with unified addressing a device-to-device copy, once both
// contexts are known to be alive.
CUresult peer_copy(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t n,
                   CUstream s, bool ptd, bool sync) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (!l.st.contexts.contains(dst_ctx) || !l.st.contexts.contains(src_ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return copy(dst, Side::Device, src, Side::Device, n, s, ptd, sync);
}

}  // namespace

// --- unified copies ---
CUDASIM_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return copy(dst, Side::Unified, src, Side::Unified, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return copy(dst, Side::Unified, src, Side::Unified, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return copy(dst, Side::Unified, src, Side::Unified, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return copy(dst, Side::Unified, src, Side::Unified, ByteCount, hStream, kPerThread, kAsync);
}

// --- host to device ---
CUDASIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return copy(dstDevice, Side::Device, addr(srcHost), Side::Host, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return copy(dstDevice, Side::Device, addr(srcHost), Side::Host, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                             CUstream hStream) {
  return copy(dstDevice, Side::Device, addr(srcHost), Side::Host, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost,
                                                  size_t ByteCount, CUstream hStream) {
  return copy(dstDevice, Side::Device, addr(srcHost), Side::Host, ByteCount, hStream, kPerThread, kAsync);
}

// --- device to host ---
CUDASIM_EXPORT CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(addr(dstHost), Side::Host, srcDevice, Side::Device, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(addr(dstHost), Side::Host, srcDevice, Side::Device, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                             CUstream hStream) {
  return copy(addr(dstHost), Side::Host, srcDevice, Side::Device, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                                  CUstream hStream) {
  return copy(addr(dstHost), Side::Host, srcDevice, Side::Device, ByteCount, hStream, kPerThread, kAsync);
}

// --- device to device ---
CUDASIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(dstDevice, Side::Device, srcDevice, Side::Device, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(dstDevice, Side::Device, srcDevice, Side::Device, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                     CUcontext srcContext, size_t ByteCount) {
  return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                          CUcontext srcContext, size_t ByteCount) {
  return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                          CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                               CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                             CUstream hStream) {
  return copy(dstDevice, Side::Device, srcDevice, Side::Device, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                  size_t ByteCount, CUstream hStream) {
  return copy(dstDevice, Side::Device, srcDevice, Side::Device, ByteCount, hStream, kPerThread, kAsync);
}

// --- sets ---
CUDASIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return set(dstDevice, uc, N, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return set(dstDevice, uc, N, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return set(dstDevice, us, N, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return set(dstDevice, us, N, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return set(dstDevice, ui, N, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return set(dstDevice, ui, N, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return set(dstDevice, uc, N, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                             CUstream hStream) {
  return set(dstDevice, uc, N, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return set(dstDevice, us, N, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                              CUstream hStream) {
  return set(dstDevice, us, N, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return set(dstDevice, ui, N, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                              CUstream hStream) {
  return set(dstDevice, ui, N, hStream, kPerThread, kAsync);
}
