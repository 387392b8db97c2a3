// Copies with rows and slices (cuMemcpy2D, cuMemcpy3D, cuMemcpy3DPeer and their async forms),
// copies to and from CUDA arrays (cuMemcpyHtoA, AtoH, AtoD, DtoA, AtoA), and 2D sets
// (cuMemsetD2D8/16/32). Both sides are checked when the call is made, as copies.cpp checks its
// ranges; the bytes move when the stream reaches the copy, with copies.cpp's rules for when the
// call waits and when a pageable host source is read at the call (staged).
//
// A side of a copy is host memory, device memory, unified (either) or an array, whose level-0
// bytes arrays.cpp keeps (rows of Width elements). Offsets and widths into an array are in bytes
// and must be whole elements, as cuda.h says; the region must lie inside the array.
#include "state.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

using namespace cudasim;

namespace {

// One side of a resolved copy: where its first byte is and how far rows and slices are apart.
struct Side {
  std::uintptr_t first = 0;
  std::size_t row = 0, slice = 0;
  bool device = false;  // device memory or an array: decides whether the call waits
  bool pinned = false;  // page-locked host memory: read when the copy runs, never staged
  std::shared_ptr<unsigned char> array;  // keeps an array's bytes alive while the copy is queued
};

struct Extent {
  std::size_t width, height, depth;
};

// What a side of CUDA_MEMCPY3D names, before it is resolved.
struct Operand {
  CUmemorytype type;
  const void* host;
  CUdeviceptr device;
  CUarray array;
  std::size_t x, y, z, pitch, height;
};

CUresult resolve_array(State& st, const Operand& o, const Extent& e, Side* out) {
  ArrayLayout a;
  if (!array_layout(st, o.array, &a)) return CUDA_ERROR_INVALID_VALUE;
  if (o.x % a.element != 0 || e.width % a.element != 0) return CUDA_ERROR_INVALID_VALUE;
  // The region inside the array (each sum checked against a bound no larger than the array).
  if (o.x > a.row_bytes || e.width > a.row_bytes - o.x || o.y > a.rows || e.height > a.rows - o.y ||
      o.z > a.slices || e.depth > a.slices - o.z)
    return CUDA_ERROR_INVALID_VALUE;
  out->row = a.row_bytes;
  out->slice = a.row_bytes * a.rows;
  out->first = reinterpret_cast<std::uintptr_t>(a.storage.get()) + o.z * out->slice + o.y * out->row + o.x;
  out->device = true;
  out->array = std::move(a.storage);
  return CUDA_SUCCESS;
}

CUresult resolve(State& st, const Operand& o, const Extent& e, Side* out) {
  if (o.type == CU_MEMORYTYPE_ARRAY) return resolve_array(st, o, e, out);
  if (o.type != CU_MEMORYTYPE_HOST && o.type != CU_MEMORYTYPE_DEVICE && o.type != CU_MEMORYTYPE_UNIFIED)
    return CUDA_ERROR_INVALID_VALUE;
  const std::uintptr_t start = o.type == CU_MEMORYTYPE_HOST ? reinterpret_cast<std::uintptr_t>(o.host) : o.device;
  if (start == 0) return CUDA_ERROR_INVALID_VALUE;
  // A pitch must hold a row past its X offset once there is more than one row; a slice height
  // likewise once there is more than one slice.
  if ((e.height > 1 || e.depth > 1) && (o.pitch < e.width || o.x > o.pitch - e.width)) return CUDA_ERROR_INVALID_VALUE;
  if (e.depth > 1 && (o.height < e.height || o.y > o.height - e.height)) return CUDA_ERROR_INVALID_VALUE;
  std::size_t offset = 0, span = 0, slice = 0, end = 0;
  if (__builtin_mul_overflow(o.pitch, o.height, &slice) || __builtin_mul_overflow(o.z, o.height, &offset) ||
      __builtin_add_overflow(offset, o.y, &offset) || __builtin_mul_overflow(offset, o.pitch, &offset) ||
      __builtin_add_overflow(offset, o.x, &offset))
    return CUDA_ERROR_INVALID_VALUE;
  // From the first byte to the end of the last row, without wrapping past the address space.
  if (__builtin_mul_overflow(e.depth - 1, slice, &span) || __builtin_mul_overflow(e.height - 1, o.pitch, &end) ||
      __builtin_add_overflow(span, end, &span) || __builtin_add_overflow(span, e.width, &span) ||
      start > UINTPTR_MAX - offset || start + offset > UINTPTR_MAX - span)
    return CUDA_ERROR_INVALID_VALUE;
  out->first = start + offset;
  if (!transfer_range_valid(st, o.type, out->first, span)) return CUDA_ERROR_INVALID_VALUE;
  out->row = o.pitch;
  out->slice = slice;
  out->device = o.type == CU_MEMORYTYPE_DEVICE ||
                (o.type == CU_MEMORYTYPE_UNIFIED && find_allocation(st, out->first, 1) != nullptr);
  out->pinned = !out->device && host_range_pinned(st, out->first, span);
  return CUDA_SUCCESS;
}

// The span of a side's rows (first byte to the end of the last row), for the write check.
std::size_t reach(const Side& s, const Extent& e) { return (e.depth - 1) * s.slice + (e.height - 1) * s.row + e.width; }

Operation copy_rows(Side dst, Side src, Extent e) {
  return [dst = std::move(dst), src = std::move(src), e] {
    for (std::size_t z = 0; z < e.depth; ++z) {
      for (std::size_t y = 0; y < e.height; ++y) {
        std::memmove(reinterpret_cast<void*>(dst.first + z * dst.slice + y * dst.row),
                     reinterpret_cast<const void*>(src.first + z * src.slice + y * src.row), e.width);
      }
    }
  };
}

// A pageable host source read now, into rows of `width` bytes: the staged side of an async copy.
Side stage(const Side& src, const Extent& e, std::shared_ptr<std::vector<unsigned char>>* keep) {
  auto bytes = std::make_shared<std::vector<unsigned char>>(e.width * e.height * e.depth);
  Side staged;
  staged.first = reinterpret_cast<std::uintptr_t>(bytes->data());
  staged.row = e.width;
  staged.slice = e.width * e.height;
  copy_rows(staged, src, e)();
  *keep = std::move(bytes);
  return staged;
}

// Both sides of a copy, checked, with the destination writable (of an empty extent: the operands only).
CUresult resolve_copy(State& st, const CUDA_MEMCPY3D& p, const Extent& e, Side* dst, Side* src) {
  if (p.reserved0 != nullptr || p.reserved1 != nullptr || p.srcLOD != 0 || p.dstLOD != 0)
    return CUDA_ERROR_INVALID_VALUE;
  const Operand from{p.srcMemoryType, p.srcHost, p.srcDevice, p.srcArray, p.srcXInBytes, p.srcY, p.srcZ,
                     p.srcPitch, p.srcHeight};
  const Operand to{p.dstMemoryType, p.dstHost, p.dstDevice, p.dstArray, p.dstXInBytes, p.dstY, p.dstZ,
                   p.dstPitch, p.dstHeight};
  if (CUresult rc = resolve(st, from, e, src); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = resolve(st, to, e, dst); rc != CUDA_SUCCESS) return rc;
  if (e.width > 0 && dst->array == nullptr && !vmm_range_writable(st, dst->first, reach(*dst, e)))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

constexpr bool kSync = true;
constexpr bool kAsync = false;
constexpr bool kLegacy = false;
constexpr bool kPerThread = true;

// The rules of copies.cpp for rows and slices: a synchronous copy returns once done unless both
// sides are device memory (arrays included); an async one is queued unless neither side is, and
// reads a pageable host source at the call. A copy of nothing checks its operands only.
CUresult copy_3d(const CUDA_MEMCPY3D* p, CUstream stream, bool ptd, bool sync) {
  if (p == nullptr) {
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  const CUDA_MEMCPY3D params = *p;
  return enqueue_transfer(
      stream, ptd, NodeKind::Memcpy,
      [&](State& st, bool capturing, bool* wait, Operation* op) -> CUresult {
        const Extent e{params.WidthInBytes, params.Height, params.Depth};
        const bool empty = e.width == 0 || e.height == 0 || e.depth == 0;
        Side src, dst;
        // An empty copy's operands must still be valid.
        if (CUresult rc = resolve_copy(st, params, empty ? Extent{0, 1, 1} : e, &dst, &src); rc != CUDA_SUCCESS)
          return rc;
        if (empty) {
          *op = [] {};
          return CUDA_SUCCESS;
        }
        *wait = sync ? !(dst.device && src.device) || sync_memops(st, dst.first) || sync_memops(st, src.first)
                     : !(dst.device || src.device);
        if (!sync && !capturing && dst.device && !src.device && !src.pinned) {
          std::shared_ptr<std::vector<unsigned char>> staged;
          Side from_stage = stage(src, e, &staged);
          Operation rows = copy_rows(dst, from_stage, e);
          *op = [rows = std::move(rows), staged] { rows(); };
        } else {
          *op = copy_rows(dst, src, e);
        }
        return CUDA_SUCCESS;
      },
      [&](CUgraphNode_st* node) { node->copy = params; });
}

CUDA_MEMCPY3D as_3d(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D q{};
  q.srcXInBytes = p.srcXInBytes, q.srcY = p.srcY;
  q.srcMemoryType = p.srcMemoryType, q.srcHost = p.srcHost, q.srcDevice = p.srcDevice, q.srcArray = p.srcArray;
  q.srcPitch = p.srcPitch;
  q.dstXInBytes = p.dstXInBytes, q.dstY = p.dstY;
  q.dstMemoryType = p.dstMemoryType, q.dstHost = p.dstHost, q.dstDevice = p.dstDevice, q.dstArray = p.dstArray;
  q.dstPitch = p.dstPitch;
  q.WidthInBytes = p.WidthInBytes, q.Height = p.Height, q.Depth = 1;
  return q;
}

CUresult copy_2d(const CUDA_MEMCPY2D* p, CUstream stream, bool ptd, bool sync) {
  if (p == nullptr) return copy_3d(nullptr, stream, ptd, sync);
  const CUDA_MEMCPY3D q = as_3d(*p);
  return copy_3d(&q, stream, ptd, sync);
}

// cuMemcpy3DPeer: a 3D copy once the contexts of its pointer sides are known alive (an array's
// context is ignored, as cuda.h says).
CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER* p, CUstream stream, bool ptd, bool sync) {
  if (p == nullptr) return copy_3d(nullptr, stream, ptd, sync);
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    for (auto [type, ctx] : {std::pair{p->srcMemoryType, p->srcContext}, std::pair{p->dstMemoryType, p->dstContext}}) {
      if (type != CU_MEMORYTYPE_ARRAY && !l.st.contexts.contains(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    }
  }
  CUDA_MEMCPY3D q{};
  q.srcXInBytes = p->srcXInBytes, q.srcY = p->srcY, q.srcZ = p->srcZ, q.srcLOD = p->srcLOD;
  q.srcMemoryType = p->srcMemoryType, q.srcHost = p->srcHost, q.srcDevice = p->srcDevice, q.srcArray = p->srcArray;
  q.srcPitch = p->srcPitch, q.srcHeight = p->srcHeight;
  q.dstXInBytes = p->dstXInBytes, q.dstY = p->dstY, q.dstZ = p->dstZ, q.dstLOD = p->dstLOD;
  q.dstMemoryType = p->dstMemoryType, q.dstHost = p->dstHost, q.dstDevice = p->dstDevice, q.dstArray = p->dstArray;
  q.dstPitch = p->dstPitch, q.dstHeight = p->dstHeight;
  q.WidthInBytes = p->WidthInBytes, q.Height = p->Height, q.Depth = p->Depth;
  return copy_3d(&q, stream, ptd, sync);
}

// The 1D array copies: `bytes` at byte `offset` of the array's first row (a 1D array's elements).
CUDA_MEMCPY3D linear(std::size_t bytes) {
  CUDA_MEMCPY3D q{};
  q.WidthInBytes = bytes;
  q.Height = 1;
  q.Depth = 1;
  return q;
}
void array_source(CUDA_MEMCPY3D* q, CUarray array, std::size_t offset) {
  q->srcMemoryType = CU_MEMORYTYPE_ARRAY, q->srcArray = array, q->srcXInBytes = offset;
}
void array_destination(CUDA_MEMCPY3D* q, CUarray array, std::size_t offset) {
  q->dstMemoryType = CU_MEMORYTYPE_ARRAY, q->dstArray = array, q->dstXInBytes = offset;
}

CUresult host_to_array(CUarray dst, std::size_t offset, const void* src, std::size_t bytes, CUstream s, bool ptd,
                       bool sync) {
  CUDA_MEMCPY3D q = linear(bytes);
  array_destination(&q, dst, offset);
  q.srcMemoryType = CU_MEMORYTYPE_HOST, q.srcHost = src;
  return copy_3d(&q, s, ptd, sync);
}
CUresult array_to_host(void* dst, CUarray src, std::size_t offset, std::size_t bytes, CUstream s, bool ptd, bool sync) {
  CUDA_MEMCPY3D q = linear(bytes);
  array_source(&q, src, offset);
  q.dstMemoryType = CU_MEMORYTYPE_HOST, q.dstHost = dst;
  return copy_3d(&q, s, ptd, sync);
}
CUresult array_to_device(CUdeviceptr dst, CUarray src, std::size_t offset, std::size_t bytes, bool ptd) {
  CUDA_MEMCPY3D q = linear(bytes);
  array_source(&q, src, offset);
  q.dstMemoryType = CU_MEMORYTYPE_DEVICE, q.dstDevice = dst;
  return copy_3d(&q, nullptr, ptd, kSync);
}
CUresult device_to_array(CUarray dst, std::size_t offset, CUdeviceptr src, std::size_t bytes, bool ptd) {
  CUDA_MEMCPY3D q = linear(bytes);
  array_destination(&q, dst, offset);
  q.srcMemoryType = CU_MEMORYTYPE_DEVICE, q.srcDevice = src;
  return copy_3d(&q, nullptr, ptd, kSync);
}
CUresult array_to_array(CUarray dst, std::size_t dst_offset, CUarray src, std::size_t src_offset, std::size_t bytes,
                        bool ptd) {
  CUDA_MEMCPY3D q = linear(bytes);
  array_destination(&q, dst, dst_offset);
  array_source(&q, src, src_offset);
  return copy_3d(&q, nullptr, ptd, kSync);
}

// A 2D set: `height` rows of `width` elements, `pitch` bytes apart, checked as a memset node is;
// queued without waiting, like every set, unless synchronous on CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
// memory. Setting nothing checks cuInit and the stream only.
template <typename T>
CUresult set_2d(CUdeviceptr dst, std::size_t pitch, T value, std::size_t width, std::size_t height, CUstream s,
                bool ptd, bool sync) {
  CUDA_MEMSET_NODE_PARAMS params{};
  params.dst = dst;
  params.pitch = pitch;
  params.value = value;
  params.elementSize = sizeof(T);
  params.width = width;
  params.height = height;
  return enqueue_transfer(
      s, ptd, NodeKind::Memset,
      [&](State& st, bool, bool* wait, Operation* op) -> CUresult {
        *wait = sync && sync_memops(st, dst);
        if (width == 0 || height == 0) {
          *op = [] {};
          return CUDA_SUCCESS;
        }
        if (CUresult rc = memset_node(st, &params, op); rc != CUDA_SUCCESS) return rc;
        // memset_node bounded (height - 1) x pitch + width x sizeof(T) already.
        return vmm_range_writable(st, dst, (height - 1) * pitch + width * sizeof(T)) ? CUDA_SUCCESS
                                                                                      : CUDA_ERROR_INVALID_VALUE;
      },
      [&](CUgraphNode_st* node) { node->memset = params; });
}

// --- batches ---

constexpr std::size_t kNoCopy = SIZE_MAX;  // failIdx when an error concerns no copy in particular

bool valid_access_order(CUmemcpySrcAccessOrder order) {
  return order == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
         order == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}
bool valid_copy_flags(unsigned flags) { return (flags & ~unsigned{CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE}) == 0; }

// One copy of a batch, resolved: CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL sources are read at the
// call (the documentation lets such a source be read out of stream order, and requires it to be
// read before the call returns); the others when the batch runs.
struct BatchCopy {
  Side dst, src;
  Extent extent;
  bool read_now = false;
};

// Queues a batch as one operation in stream order (copies within a batch have no order). `resolve`
// checks copy i under State::mu. The legacy stream is refused, as documented; so is a capture,
// whose graph has no node for a batch here.
template <typename Resolve>
CUresult issue_batch(std::size_t count, std::size_t* fail_index, CUstream stream, bool ptd, Resolve resolve) {
  if (fail_index != nullptr) *fail_index = kNoCopy;
  if (stream == CU_STREAM_LEGACY || (stream == nullptr && !ptd)) {
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  return enqueue_transfer(
      stream, ptd, NodeKind::Memcpy,
      [&](State& st, bool capturing, bool*, Operation* op) -> CUresult {
        if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        auto copies = std::make_shared<std::vector<BatchCopy>>(count);
        for (std::size_t i = 0; i < count; ++i) {
          if (CUresult rc = resolve(st, i, &(*copies)[i]); rc != CUDA_SUCCESS) {
            if (fail_index != nullptr) *fail_index = i;
            return rc;
          }
        }
        std::vector<Operation> work;
        std::vector<std::shared_ptr<std::vector<unsigned char>>> staged(count);
        for (std::size_t i = 0; i < count; ++i) {
          BatchCopy& c = (*copies)[i];
          const Side src = c.read_now ? stage(c.src, c.extent, &staged[i]) : c.src;
          work.push_back(copy_rows(c.dst, src, c.extent));
        }
        *op = [work = std::move(work), staged = std::move(staged)] {
          for (const Operation& copy : work) copy();
        };
        return CUDA_SUCCESS;
      },
      {});
}

CUresult batch_1d(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                  CUmemcpyAttributes* attrs, std::size_t* attrs_idxs, std::size_t num_attrs, std::size_t* fail_index,
                  CUstream stream, bool ptd) {
  // The attribute list: entries starting at copy 0, increasing, each naming a valid access order.
  bool shape = count > 0 && dsts != nullptr && srcs != nullptr && sizes != nullptr && attrs != nullptr &&
               attrs_idxs != nullptr && num_attrs > 0 && num_attrs <= count && attrs_idxs[0] == 0;
  for (std::size_t k = 0; shape && k < num_attrs; ++k) {
    shape = valid_access_order(attrs[k].srcAccessOrder) && valid_copy_flags(attrs[k].flags) &&
            attrs_idxs[k] < count && (k == 0 || attrs_idxs[k] > attrs_idxs[k - 1]);
  }
  if (!shape) {
    if (fail_index != nullptr) *fail_index = kNoCopy;
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  return issue_batch(count, fail_index, stream, ptd, [&](State& st, std::size_t i, BatchCopy* out) -> CUresult {
    std::size_t k = num_attrs - 1;
    while (attrs_idxs[k] > i) --k;  // the attribute entry copy i falls under
    const Extent e{sizes[i], 1, 1};
    const Operand to{CU_MEMORYTYPE_UNIFIED, nullptr, dsts[i], nullptr, 0, 0, 0, 0, 0};
    const Operand from{CU_MEMORYTYPE_UNIFIED, nullptr, srcs[i], nullptr, 0, 0, 0, 0, 0};
    if (CUresult rc = resolve(st, from, e, &out->src); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = resolve(st, to, e, &out->dst); rc != CUDA_SUCCESS) return rc;
    if (!vmm_range_writable(st, out->dst.first, e.width)) return CUDA_ERROR_INVALID_VALUE;
    out->extent = e;
    out->read_now = attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    return CUDA_SUCCESS;
  });
}

// An operand of a 3D batch copy as a CUDA_MEMCPY3D side: a pointer's rows are rowLength elements
// (0: the width) and its layers layerHeight rows (0: the height); an array's offset is in elements.
Operand batch_operand(const CUmemcpy3DOperand& o, const CUextent3D& extent, std::size_t element) {
  if (o.type == CU_MEMCPY_OPERAND_TYPE_ARRAY)
    return {CU_MEMORYTYPE_ARRAY, nullptr, 0, o.op.array.array, o.op.array.offset.x * element, o.op.array.offset.y,
            o.op.array.offset.z, 0, 0};
  if (o.type != CU_MEMCPY_OPERAND_TYPE_POINTER) return {static_cast<CUmemorytype>(0), nullptr, 0, nullptr, 0, 0, 0, 0, 0};
  const std::size_t row = o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : extent.width;
  const std::size_t layer = o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : extent.height;
  return {CU_MEMORYTYPE_UNIFIED, nullptr, o.op.ptr.ptr, nullptr, 0, 0, 0, row * element, layer};
}

// The element size of a 3D batch copy: an array's (both arrays' when both are, which must agree), else 1.
CUresult batch_element(State& st, const CUDA_MEMCPY3D_BATCH_OP& op, std::size_t* element) {
  *element = 1;
  bool seen = false;
  for (const CUmemcpy3DOperand* o : {&op.src, &op.dst}) {
    if (o->type != CU_MEMCPY_OPERAND_TYPE_ARRAY) continue;
    ArrayLayout a;
    if (!array_layout(st, o->op.array.array, &a) || (seen && a.element != *element)) return CUDA_ERROR_INVALID_VALUE;
    *element = a.element;
    seen = true;
  }
  return CUDA_SUCCESS;
}

CUresult batch_3d(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t* fail_index, unsigned long long flags,
                  CUstream stream, bool ptd) {
  if (count == 0 || ops == nullptr || flags != 0) {
    if (fail_index != nullptr) *fail_index = kNoCopy;
    Locked l;
    return l.init_status() != CUDA_SUCCESS ? l.init_status() : CUDA_ERROR_INVALID_VALUE;
  }
  return issue_batch(count, fail_index, stream, ptd, [&](State& st, std::size_t i, BatchCopy* out) -> CUresult {
    const CUDA_MEMCPY3D_BATCH_OP& op = ops[i];
    const CUextent3D& x = op.extent;
    if (x.width == 0 || x.height == 0 || x.depth == 0 || !valid_access_order(op.srcAccessOrder) ||
        !valid_copy_flags(op.flags))
      return CUDA_ERROR_INVALID_VALUE;
    std::size_t element = 1, width = 0;
    if (CUresult rc = batch_element(st, op, &element); rc != CUDA_SUCCESS) return rc;
    if (__builtin_mul_overflow(x.width, element, &width)) return CUDA_ERROR_INVALID_VALUE;
    const Extent e{width, x.height, x.depth};
    // A row length or layer height shorter than the copy is refused (zero means packed).
    for (const CUmemcpy3DOperand* o : {&op.src, &op.dst}) {
      if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER &&
          ((o->op.ptr.rowLength != 0 && o->op.ptr.rowLength < x.width) ||
           (o->op.ptr.layerHeight != 0 && o->op.ptr.layerHeight < x.height)))
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult rc = resolve(st, batch_operand(op.src, x, element), e, &out->src); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = resolve(st, batch_operand(op.dst, x, element), e, &out->dst); rc != CUDA_SUCCESS) return rc;
    if (out->dst.array == nullptr && !vmm_range_writable(st, out->dst.first, reach(out->dst, e)))
      return CUDA_ERROR_INVALID_VALUE;
    out->extent = e;
    out->read_now = op.srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    return CUDA_SUCCESS;
  });
}

}  // namespace

CUresult cudasim::copy_operation(State& st, const CUDA_MEMCPY3D& p, Operation* op) {
  const Extent e{p.WidthInBytes, p.Height, p.Depth};
  Side dst, src;
  if (CUresult rc = resolve_copy(st, p, e, &dst, &src); rc != CUDA_SUCCESS) return rc;
  *op = copy_rows(dst, src, e);
  return CUDA_SUCCESS;
}

// --- 2D and 3D copies ---
CUDASIM_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) { return copy_2d(pCopy, nullptr, kLegacy, kSync); }
CUDASIM_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, nullptr, kPerThread, kSync);
}
// Pitches are never required to be cuMemAllocPitch's here, so the unaligned form is the same copy.
CUDASIM_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* pCopy) { return copy_3d(pCopy, nullptr, kLegacy, kSync); }
CUDASIM_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* pCopy) {
  return copy_3d(pCopy, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  return copy_3d(pCopy, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  return copy_3d(pCopy, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* pCopy) {
  return copy_3d_peer(pCopy, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* pCopy) {
  return copy_3d_peer(pCopy, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return copy_3d_peer(pCopy, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return copy_3d_peer(pCopy, hStream, kPerThread, kAsync);
}

// --- arrays ---
CUDASIM_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount) {
  return host_to_array(dstArray, dstOffset, srcHost, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyHtoA_v2_ptds(CUarray dstArray, size_t dstOffset, const void* srcHost,
                                             size_t ByteCount) {
  return host_to_array(dstArray, dstOffset, srcHost, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void* srcHost,
                                             size_t ByteCount, CUstream hStream) {
  return host_to_array(dstArray, dstOffset, srcHost, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dstArray, size_t dstOffset, const void* srcHost,
                                                  size_t ByteCount, CUstream hStream) {
  return host_to_array(dstArray, dstOffset, srcHost, ByteCount, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoH_v2(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return array_to_host(dstHost, srcArray, srcOffset, ByteCount, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoH_v2_ptds(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return array_to_host(dstHost, srcArray, srcOffset, ByteCount, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoHAsync_v2(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                             CUstream hStream) {
  return array_to_host(dstHost, srcArray, srcOffset, ByteCount, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dstHost, CUarray srcArray, size_t srcOffset,
                                                  size_t ByteCount, CUstream hStream) {
  return array_to_host(dstHost, srcArray, srcOffset, ByteCount, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return array_to_device(dstDevice, srcArray, srcOffset, ByteCount, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                                             size_t ByteCount) {
  return array_to_device(dstDevice, srcArray, srcOffset, ByteCount, kPerThread);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount) {
  return device_to_array(dstArray, dstOffset, srcDevice, ByteCount, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                                             size_t ByteCount) {
  return device_to_array(dstArray, dstOffset, srcDevice, ByteCount, kPerThread);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                                        size_t ByteCount) {
  return array_to_array(dstArray, dstOffset, srcArray, srcOffset, ByteCount, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpyAtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                                             size_t ByteCount) {
  return array_to_array(dstArray, dstOffset, srcArray, srcOffset, ByteCount, kPerThread);
}

// --- 2D sets ---
CUDASIM_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                        size_t Height) {
  return set_2d(dstDevice, dstPitch, uc, Width, Height, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                             size_t Height) {
  return set_2d(dstDevice, dstPitch, uc, Width, Height, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                         size_t Height) {
  return set_2d(dstDevice, dstPitch, us, Width, Height, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                              size_t Width, size_t Height) {
  return set_2d(dstDevice, dstPitch, us, Width, Height, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                         size_t Height) {
  return set_2d(dstDevice, dstPitch, ui, Width, Height, nullptr, kLegacy, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                              size_t Height) {
  return set_2d(dstDevice, dstPitch, ui, Width, Height, nullptr, kPerThread, kSync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                          size_t Height, CUstream hStream) {
  return set_2d(dstDevice, dstPitch, uc, Width, Height, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                               size_t Width, size_t Height, CUstream hStream) {
  return set_2d(dstDevice, dstPitch, uc, Width, Height, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                           size_t Height, CUstream hStream) {
  return set_2d(dstDevice, dstPitch, us, Width, Height, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                                size_t Width, size_t Height, CUstream hStream) {
  return set_2d(dstDevice, dstPitch, us, Width, Height, hStream, kPerThread, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                           size_t Height, CUstream hStream) {
  return set_2d(dstDevice, dstPitch, ui, Width, Height, hStream, kLegacy, kAsync);
}
CUDASIM_EXPORT CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                                size_t Width, size_t Height, CUstream hStream) {
  return set_2d(dstDevice, dstPitch, ui, Width, Height, hStream, kPerThread, kAsync);
}

// --- batches (12.8's forms report the failing copy's index; 13.0's _v2 forms do not) ---
CUDASIM_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                           CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                           size_t* failIdx, CUstream hStream) {
  return batch_1d(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                                CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                                size_t* failIdx, CUstream hStream) {
  return batch_1d(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, kPerThread);
}
CUDASIM_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                              CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                              CUstream hStream) {
  return batch_1d(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                                   CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                                   CUstream hStream) {
  return batch_1d(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream, kPerThread);
}
CUDASIM_EXPORT CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                             unsigned long long flags, CUstream hStream) {
  return batch_3d(numOps, opList, failIdx, flags, hStream, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                                  unsigned long long flags, CUstream hStream) {
  return batch_3d(numOps, opList, failIdx, flags, hStream, kPerThread);
}
CUDASIM_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                                unsigned long long flags, CUstream hStream) {
  return batch_3d(numOps, opList, nullptr, flags, hStream, kLegacy);
}
CUDASIM_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                                     unsigned long long flags, CUstream hStream) {
  return batch_3d(numOps, opList, nullptr, flags, hStream, kPerThread);
}
