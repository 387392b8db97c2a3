// Copies and sets, synchronous and stream-ordered. Ranges are validated against live allocations
// when the call is made; the bytes move when the stream's worker reaches the operation.
#include "state.h"

#include <cstring>
#include <initializer_list>

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
    case Side::Device: return find_allocation(st, r.ptr, r.bytes) != nullptr;
    case Side::Host: return !in_quarantine(st, r.ptr);
    case Side::Unified:
      if (find_allocation(st, r.ptr, 1) != nullptr) return find_allocation(st, r.ptr, r.bytes) != nullptr;
      return !in_quarantine(st, r.ptr);
  }
  return false;
}

// Validates, queues `op` in stream order and, for the synchronous forms, waits for it.
CUresult issue(CUstream handle, bool per_thread_default, bool wait, std::initializer_list<Range> ranges,
               Operation op) {
  std::shared_ptr<CUstream_st> stream;
  std::uint64_t seq = 0;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = resolve_stream(l.st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
    for (const Range& r : ranges) {
      if (r.bytes > 0 && !valid_range(l.st, r)) return CUDA_ERROR_INVALID_VALUE;
    }
    seq = submit(l.st, stream, std::move(op));
  }
  if (wait) stream->wait_until(seq);
  return CUDA_SUCCESS;
}

void* host(std::uintptr_t p) { return reinterpret_cast<void*>(p); }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

CUresult copy(CUdeviceptr dst, Side dst_side, CUdeviceptr src, Side src_side, std::size_t n, CUstream s,
              bool ptd, bool wait) {
  return issue(s, ptd, wait, {{dst, n, dst_side}, {src, n, src_side}},
               [dst, src, n] { std::memmove(host(dst), host(src), n); });
}

template <typename T>
CUresult set(CUdeviceptr dst, T value, std::size_t count, CUstream s, bool ptd, bool wait) {
  if (dst % sizeof(T) != 0) {
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  return issue(s, ptd, wait, {{dst, count * sizeof(T), Side::Device}}, [dst, value, count] {
    T* p = static_cast<T*>(host(dst));
    for (std::size_t i = 0; i < count; ++i) p[i] = value;
  });
}

constexpr bool kSync = true;
constexpr bool kAsync = false;
constexpr bool kLegacy = false;
constexpr bool kPerThread = true;

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
