// Managed memory (cuMemAllocManaged) and its hints (advice, prefetches, stream association, range
// attributes, below).
// Host memory here, as managed memory is valid on the host and
// on every device; it belongs to the current context (freed with it, or by cuMemFree) and is a live
// AllocKind::Managed allocation for copies, sets and pointer queries.
//
// It is charged to no device: the devices report CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
// for which cuda.h documents that managed memory "may not be populated when this API returns and
// instead may be populated on access", and device memory may be oversubscribed by it (evicted to
// host memory at any time). Nothing runs on a simulated device, so no page ever migrates there:
// cuMemGetInfo does not change and CUDASIM_FAIL_ALLOC_AFTER does not count it.
#include "contexts.h"
#include "state.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <vector>

using namespace cudasim;

CUDASIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_unsafe_call(st); rc != CUDA_SUCCESS) return rc;  // like cuMemAlloc during capture
  if (CUresult rc = allocate_managed_memory(st, ctx, bytesize, dptr); rc != CUDA_SUCCESS) return rc;
  st.device(ctx->device).stats.managed_allocs++;
  return CUDA_SUCCESS;
}

CUresult cudasim::allocate_managed_memory(State& st, CUctx_st* ctx, std::size_t bytes, CUdeviceptr* dptr) {
  Mapping mapping = map_device_memory(bytes);
  if (mapping.addr == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<std::uintptr_t>(mapping.addr);
  st.allocations[base] = Allocation{base, bytes, 0, ctx->device, ctx, AllocKind::Managed, nullptr, ++st.last_buffer_id};
  st.mappings[base] = mapping;
  DeviceStats& stats = st.device(ctx->device).stats;
  stats.managed_bytes += bytes;
  stats.managed_peak_bytes = std::max(stats.managed_peak_bytes, stats.managed_bytes);
  *dptr = base;
  return CUDA_SUCCESS;
}

// --- Hints: cuMemAdvise, cuMemPrefetchAsync, cuMemRangeGetAttribute(s) ---
//
// Advice and prefetches change nothing here (the memory is host memory, reachable by every
// processor at once), but they are checked as cuda.h documents them and remembered per page (the
// CPU page size: ranges are widened to whole pages, as documented), so that cuMemRangeGetAttribute
// answers what was asked for. A prefetch is an operation of its stream, ordered with the rest of its
// work; the last prefetch location is the one asked for, at the call (cuda.h: "no indication as to
// whether the prefetch operation to that location has completed or even begun"). The simulated host
// has one NUMA node, 0.

struct cudasim::ManagedPages {
  struct Page {
    bool read_mostly = false;
    CUmemLocation preferred{};      // type CU_MEM_LOCATION_TYPE_INVALID: none
    std::uint64_t accessed_by = 0;  // bit d: device d; bit 63: the host
    CUmemLocation prefetched{};     // type CU_MEM_LOCATION_TYPE_INVALID: never prefetched
  };
  std::uint64_t buffer_id = 0;  // the allocation's
  std::size_t count = 0;        // its pages
  // Runs of pages alike, by first page; a run ends where the next begins, the last at `count`, so
  // advice on a huge range costs no more than on a page. Invariant: page 0 starts a run.
  std::map<std::size_t, Page> runs{{0, Page{}}};

  // Calls f(page) for each run holding any of the pages [first, last).
  template <typename F>
  void each(std::size_t first, std::size_t last, F f) {
    for (auto it = std::prev(runs.upper_bound(first)); it != runs.end() && it->first < last; ++it) f(it->second);
  }
  // The same, for a change: the runs are split first so that only those pages change.
  template <typename F>
  void change(std::size_t first, std::size_t last, F f) {
    split(first);
    split(last);
    each(first, last, f);
  }
  void split(std::size_t at) {
    if (at >= count) return;
    auto it = std::prev(runs.upper_bound(at));
    if (it->first != at) runs.emplace_hint(std::next(it), at, it->second);
  }
};

namespace {

constexpr std::size_t kPage = 4096;
constexpr int kHostBit = 63;

// The pages [first, last) of the managed allocation holding [ptr, ptr + count), its record made on
// first use; INVALID_VALUE for an empty range or one that is not managed memory.
CUresult managed_pages(State& st, CUdeviceptr ptr, size_t count, ManagedPages** pages, std::size_t* first,
                       std::size_t* last) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  auto it = st.allocations.upper_bound(ptr);
  if (it == st.allocations.begin()) return CUDA_ERROR_INVALID_VALUE;
  const Allocation& a = std::prev(it)->second;
  if (a.kind != AllocKind::Managed || ptr - a.base > a.size || count > a.size - (ptr - a.base))
    return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<ManagedPages>& record = st.managed_pages[a.base];
  if (!record || record->buffer_id != a.buffer_id) {
    record = std::make_shared<ManagedPages>();
    record->buffer_id = a.buffer_id;
    record->count = round_up(a.size, kPage) / kPage;
  }
  *pages = record.get();
  *first = (ptr - a.base) / kPage;
  *last = round_up(ptr - a.base + count, kPage) / kPage;
  return CUDA_SUCCESS;
}

// A location as it is recorded: HOST_NUMA_CURRENT is node 0; the host's id is ignored (0).
// INVALID_DEVICE for an unknown device, INVALID_VALUE for any other location or NUMA node.
CUresult host_or_device(const State& st, CUmemLocation location, CUmemLocation* out) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!valid_device(st, location.id)) return CUDA_ERROR_INVALID_DEVICE;
      break;
    case CU_MEM_LOCATION_TYPE_HOST: location.id = 0; break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (location.id != 0) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  *out = location;
  return CUDA_SUCCESS;
}

// The v1 forms name a device ordinal, or CU_DEVICE_CPU for the host.
CUmemLocation location_of(CUdevice device) {
  return device == CU_DEVICE_CPU ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0}
                                 : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
}

CUresult advise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  ManagedPages* pages = nullptr;
  std::size_t first = 0, last = 0;
  if (CUresult rc = managed_pages(l.st, ptr, count, &pages, &first, &last); rc != CUDA_SUCCESS) return rc;
  CUmemLocation where{};
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      break;  // the location is ignored
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      if (CUresult rc = host_or_device(l.st, location, &where); rc != CUDA_SUCCESS) return rc;
      break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
      // A device or the host; "all other location types are invalid".
      if (location.type != CU_MEM_LOCATION_TYPE_DEVICE && location.type != CU_MEM_LOCATION_TYPE_HOST)
        return CUDA_ERROR_INVALID_VALUE;
      if (CUresult rc = host_or_device(l.st, location, &where); rc != CUDA_SUCCESS) return rc;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  const std::uint64_t bit = std::uint64_t{1} << (where.type == CU_MEM_LOCATION_TYPE_DEVICE ? where.id : kHostBit);
  pages->change(first, last, [&](ManagedPages::Page& page) {
    switch (advice) {
      case CU_MEM_ADVISE_SET_READ_MOSTLY: page.read_mostly = true; break;
      case CU_MEM_ADVISE_UNSET_READ_MOSTLY: page.read_mostly = false; break;
      case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: page.preferred = where; break;
      case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: page.preferred = CUmemLocation{}; break;
      case CU_MEM_ADVISE_SET_ACCESSED_BY: page.accessed_by |= bit; break;
      default: page.accessed_by &= ~bit; break;
    }
  });
  return CUDA_SUCCESS;
}

CUresult prefetch(CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned flags, CUstream handle,
                  bool per_thread_default) {
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "for future use, must be zero"
    CUmemLocation where{};
    if (CUresult rc = host_or_device(st, location, &where); rc != CUDA_SUCCESS) return rc;
    ManagedPages* pages = nullptr;
    std::size_t first = 0, last = 0;
    if (CUresult rc = managed_pages(st, ptr, count, &pages, &first, &last); rc != CUDA_SUCCESS) return rc;
    // No graph node stands for a prefetch: one on a capturing stream is refused (and invalidates).
    if (CUresult rc = check_stream_not_capturing(st, stream); rc != CUDA_SUCCESS) return rc;
    pages->change(first, last, [&](ManagedPages::Page& page) { page.prefetched = where; });
    submit(st, stream, [] {});  // nothing moves: the memory is everywhere already
    return CUDA_SUCCESS;
  });
}

// A stream association changes nothing either (every stream may touch managed memory, as on a
// device with concurrent managed access); it is checked as cuda.h documents it and is an operation
// of its stream, ordered with the rest of its work. Only whole managed allocations: pageable memory
// needs CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, which the simulated devices do not report.
CUresult attach(CUstream handle, CUdeviceptr ptr, size_t length, unsigned flags, bool per_thread_default) {
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
      return CUDA_ERROR_INVALID_VALUE;
    // "It is illegal to attach singly to the NULL stream."
    if (flags == CU_MEM_ATTACH_SINGLE && (handle == nullptr || handle == CU_STREAM_LEGACY) && !per_thread_default)
      return CUDA_ERROR_INVALID_VALUE;
    auto it = st.allocations.find(ptr);
    if (it == st.allocations.end() || it->second.kind != AllocKind::Managed) return CUDA_ERROR_INVALID_VALUE;
    // "length must be either zero or the entire allocation's size".
    if (length != 0 && length != it->second.size) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult rc = check_stream_not_capturing(st, stream); rc != CUDA_SUCCESS) return rc;
    submit(st, stream, [] {});
    return CUDA_SUCCESS;
  });
}

// cuMemPrefetchBatchAsync, cuMemDiscardBatchAsync and both at once: every range checked as a
// prefetch's, and the locations as documented (prefetchLocIdxs starts at 0, increases, stays below
// count; no more locations than ranges); then the batch is one operation of its stream (never the
// legacy NULL stream), each prefetch recorded as cuMemPrefetchAsync records it. A discard changes
// nothing: what a discarded range reads is indeterminate, and here it is what was there.
struct Batch {
  CUdeviceptr* dptrs;
  size_t* sizes;
  size_t count;
  CUmemLocation* locations;  // null: a discard only
  size_t* first_of;
  size_t location_count;
};

CUresult batch(const Batch& b, unsigned long long flags, CUstream handle, bool per_thread_default) {
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (flags != 0 || b.count == 0 || b.dptrs == nullptr || b.sizes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (handle == CU_STREAM_LEGACY || (handle == nullptr && !per_thread_default)) return CUDA_ERROR_INVALID_VALUE;
    std::vector<CUmemLocation> where(b.count);
    if (b.locations != nullptr) {
      if (b.first_of == nullptr || b.location_count == 0 || b.location_count > b.count || b.first_of[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
      for (size_t k = 0; k < b.location_count; ++k) {
        if (k > 0 && b.first_of[k] <= b.first_of[k - 1]) return CUDA_ERROR_INVALID_VALUE;
        if (b.first_of[k] >= b.count) return CUDA_ERROR_INVALID_VALUE;
        CUmemLocation location{};
        if (CUresult rc = host_or_device(st, b.locations[k], &location); rc != CUDA_SUCCESS) return rc;
        const size_t end = k + 1 < b.location_count ? b.first_of[k + 1] : b.count;
        std::fill(where.begin() + static_cast<std::ptrdiff_t>(b.first_of[k]),
                  where.begin() + static_cast<std::ptrdiff_t>(end), location);
      }
    }
    struct Range {
      ManagedPages* pages;
      std::size_t first, last;
    };
    std::vector<Range> ranges(b.count);
    for (size_t i = 0; i < b.count; ++i) {
      if (CUresult rc = managed_pages(st, b.dptrs[i], b.sizes[i], &ranges[i].pages, &ranges[i].first, &ranges[i].last);
          rc != CUDA_SUCCESS)
        return rc;
    }
    if (CUresult rc = check_stream_not_capturing(st, stream); rc != CUDA_SUCCESS) return rc;
    for (size_t i = 0; b.locations != nullptr && i < b.count; ++i) {
      const CUmemLocation location = where[i];
      ranges[i].pages->change(ranges[i].first, ranges[i].last,
                              [&](ManagedPages::Page& page) { page.prefetched = location; });
    }
    submit(st, stream, [] {});
    return CUDA_SUCCESS;
  });
}

bool operator==(const CUmemLocation& a, const CUmemLocation& b) { return a.type == b.type && a.id == b.id; }

// What every page of [first, last) has in common through `get`, else `mixed`.
template <typename T, typename Get>
T common(ManagedPages& pages, std::size_t first, std::size_t last, T mixed, Get get) {
  std::optional<T> value;
  bool alike = true;
  pages.each(first, last, [&](const ManagedPages::Page& page) {
    if (!value) value = get(page);
    else alike = alike && get(page) == *value;
  });
  return alike ? *value : mixed;
}

// A location as the legacy attributes answer it: a device ordinal, CU_DEVICE_CPU for the host (any
// NUMA node of it), CU_DEVICE_INVALID for none or for pages that differ.
int legacy_location(const CUmemLocation& location) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return location.id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return CU_DEVICE_CPU;
    default: return CU_DEVICE_INVALID;
  }
}

CUresult range_attribute(State& st, void* data, size_t size, CUmem_range_attribute attribute, CUdeviceptr ptr,
                         size_t count) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Every attribute is one 32-bit value (CUmemLocationType included), but the accessed-by list.
  const bool list = attribute == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY;
  if (list ? size == 0 || size % 4 != 0 : size != 4) return CUDA_ERROR_INVALID_VALUE;
  if (attribute < CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY || attribute > CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID)
    return CUDA_ERROR_INVALID_VALUE;
  ManagedPages* pages = nullptr;
  std::size_t first = 0, last = 0;
  if (CUresult rc = managed_pages(st, ptr, count, &pages, &first, &last); rc != CUDA_SUCCESS) return rc;
  const CUmemLocation mixed{};  // CU_MEM_LOCATION_TYPE_INVALID
  const CUmemLocation preferred = common(*pages, first, last, mixed, [](const auto& p) { return p.preferred; });
  const CUmemLocation prefetched = common(*pages, first, last, mixed, [](const auto& p) { return p.prefetched; });
  auto* out = static_cast<std::int32_t*>(data);
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      *out = common(*pages, first, last, false, [](const auto& p) { return p.read_mostly; }) ? 1 : 0;
      break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: *out = legacy_location(preferred); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: *out = legacy_location(prefetched); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: *out = preferred.type; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: *out = preferred.id; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: *out = prefetched.type; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: *out = prefetched.id; break;
    default: {
      // The processors advised for every page of the range, devices first, CU_DEVICE_INVALID after.
      std::uint64_t all = ~std::uint64_t{0};
      pages->each(first, last, [&](const ManagedPages::Page& page) { all &= page.accessed_by; });
      const std::size_t slots = size / 4;
      std::size_t n = 0;
      for (int d = 0; d < static_cast<int>(st.devices.size()) && n < slots; ++d) {
        if ((all >> d) & 1) out[n++] = d;
      }
      if (((all >> kHostBit) & 1) && n < slots) out[n++] = CU_DEVICE_CPU;
      std::fill(out + n, out + slots, CU_DEVICE_INVALID);
      break;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
  return advise(devPtr, count, advice, location);
}
CUDASIM_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  return advise(devPtr, count, advice, location_of(device));
}

CUDASIM_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                              unsigned int flags, CUstream hStream) {
  return prefetch(devPtr, count, location, flags, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                                   unsigned int flags, CUstream hStream) {
  return prefetch(devPtr, count, location, flags, hStream, true);
}
CUDASIM_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  return prefetch(devPtr, count, location_of(dstDevice), 0, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                                CUstream hStream) {
  return prefetch(devPtr, count, location_of(dstDevice), 0, hStream, true);
}

CUDASIM_EXPORT CUresult cuMemPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  if (prefetchLocs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return batch({dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs}, flags, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                     CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                     size_t numPrefetchLocs, unsigned long long flags,
                                                     CUstream hStream) {
  if (prefetchLocs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return batch({dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs}, flags, hStream, true);
}
CUDASIM_EXPORT CUresult cuMemDiscardBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                               unsigned long long flags, CUstream hStream) {
  return batch({dptrs, sizes, count, nullptr, nullptr, 0}, flags, hStream, false);
}
CUDASIM_EXPORT CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                    unsigned long long flags, CUstream hStream) {
  return batch({dptrs, sizes, count, nullptr, nullptr, 0}, flags, hStream, true);
}
// The same as a discard, then a prefetch, of every range.
CUDASIM_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                          CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                          size_t numPrefetchLocs, unsigned long long flags,
                                                          CUstream hStream) {
  return cuMemPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}
CUDASIM_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                               CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                               size_t numPrefetchLocs, unsigned long long flags,
                                                               CUstream hStream) {
  return cuMemPrefetchBatchAsync_ptsz(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                                      hStream);
}

CUDASIM_EXPORT CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags) {
  return attach(hStream, dptr, length, flags, false);
}
CUDASIM_EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length,
                                                    unsigned int flags) {
  return attach(hStream, dptr, length, flags, true);
}

CUDASIM_EXPORT CUresult cuMemRangeGetAttribute(void* data, size_t dataSize, CUmem_range_attribute attribute,
                                               CUdeviceptr devPtr, size_t count) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return range_attribute(l.st, data, dataSize, attribute, devPtr, count);
}

// Each attribute answered as by cuMemRangeGetAttribute, in order; the first failure is returned.
CUDASIM_EXPORT CUresult cuMemRangeGetAttributes(void** data, size_t* dataSizes, CUmem_range_attribute* attributes,
                                                size_t numAttributes, CUdeviceptr devPtr, size_t count) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numAttributes; ++i) {
    if (CUresult rc = range_attribute(l.st, data[i], dataSizes[i], attributes[i], devPtr, count); rc != CUDA_SUCCESS)
      return rc;
  }
  return CUDA_SUCCESS;
}
