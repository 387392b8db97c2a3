// Copies with rows and slices and copies to and from arrays (cudaMemcpy2D*, cudaMemcpy3D*,
// cudaMemcpy3DPeer*), and 2D/3D sets (cudaMemset2D, cudaMemset3D), over the driver's cuMemcpy3D,
// cuMemcpy3DPeer and cuMemsetD2D8 and their async forms. As for 1D copies (memory_api.cpp), a
// synchronous call on the legacy stream uses the driver's synchronous form; on any other stream
// (per-thread) an async copy or set followed by a synchronisation of that stream.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "graph_nodes.h"
#include "operations.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace cudasim::runtime {
namespace {

bool is_legacy(CUstream stream) { return stream == nullptr || stream == CU_STREAM_LEGACY; }

// Waits for `stream` after work queued on it, when the call is a synchronous one.
cudaError_t complete(cudaError_t queued, CUstream stream, Completion completion) {
  if (queued != cudaSuccess || completion == Completion::kAsynchronous) return queued;
  return call_driver<&DriverTable::cuStreamSynchronize>(stream);
}

cudaError_t issue_3d(const CUDA_MEMCPY3D& copy, CUstream stream, Completion completion) {
  return with_context([&] {
    if (completion == Completion::kSynchronous && is_legacy(stream)) return call_driver<&DriverTable::cuMemcpy3D>(&copy);
    return complete(call_driver<&DriverTable::cuMemcpy3DAsync>(&copy, stream), stream, completion);
  });
}

// Bytes per element of an array (format bytes x channels).
cudaError_t element_bytes(cudaArray_const_t array, size_t* bytes) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  const cudaError_t status =
      call_driver<&DriverTable::cuArray3DGetDescriptor>(&desc, reinterpret_cast<CUarray>(const_cast<cudaArray_t>(array)));
  if (status != cudaSuccess) return status == cudaErrorInvalidResourceHandle ? cudaErrorInvalidValue : status;
  size_t channel = 4;
  switch (desc.Format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: channel = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: channel = 2; break;
    default: break;  // the 32-bit formats: the only others an array is created with here
  }
  *bytes = channel * desc.NumChannels;
  return cudaSuccess;
}

}  // namespace

cudaError_t array_positions_in_bytes(const cudaMemcpy3DParms* p, CUDA_MEMCPY3D* copy) {
  if (p->srcArray == nullptr && p->dstArray == nullptr) return cudaSuccess;
  size_t element = 0;
  if (cudaError_t status = element_bytes(p->srcArray != nullptr ? p->srcArray : p->dstArray, &element);
      status != cudaSuccess)
    return status;
  if (__builtin_mul_overflow(copy->WidthInBytes, element, &copy->WidthInBytes) ||
      (p->srcArray != nullptr && __builtin_mul_overflow(copy->srcXInBytes, element, &copy->srcXInBytes)) ||
      (p->dstArray != nullptr && __builtin_mul_overflow(copy->dstXInBytes, element, &copy->dstXInBytes)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

void array_positions_in_elements(cudaMemcpy3DParms* p) {
  size_t element = 0;
  if ((p->srcArray == nullptr && p->dstArray == nullptr) ||
      element_bytes(p->srcArray != nullptr ? p->srcArray : p->dstArray, &element) != cudaSuccess || element == 0)
    return;
  p->extent.width /= element;
  if (p->srcArray != nullptr) p->srcPos.x /= element;
  if (p->dstArray != nullptr) p->dstPos.x /= element;
}

namespace {

// A 2D copy of `height` rows of `width` bytes between two pitched pointers; an array side is
// filled in by the caller.
cudaError_t driver_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                           cudaMemcpyKind kind, CUDA_MEMCPY3D* copy) {
  if (cudaError_t status = driver_copy_1d(dst, src, width, kind, copy); status != cudaSuccess) return status;
  copy->Height = height;
  copy->srcPitch = spitch;
  copy->dstPitch = dpitch;
  return cudaSuccess;
}

// "width must not exceed either dpitch or spitch" (cudaMemcpy2D's documentation), whatever the height.
bool pitch_holds(size_t pitch, size_t width) { return pitch >= width; }

void array_side(cudaArray_const_t array, size_t x, size_t y, CUmemorytype* type, CUarray* out, size_t* out_x,
                size_t* out_y) {
  *type = CU_MEMORYTYPE_ARRAY;
  *out = reinterpret_cast<CUarray>(const_cast<cudaArray_t>(array));
  *out_x = x;
  *out_y = y;
}

// The set of a 3D extent as one 2D set per slice, each queued like cudaMemset2D.
cudaError_t set_3d(cudaPitchedPtr ptr, int value, cudaExtent extent, CUstream stream, Completion completion) {
  if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return ensure_context();
  if (extent.depth > 1 && ptr.ysize < extent.height) return cudaErrorInvalidValue;
  size_t slice = 0, last = 0;
  if (__builtin_mul_overflow(ptr.pitch, ptr.ysize, &slice) || __builtin_mul_overflow(slice, extent.depth - 1, &last))
    return cudaErrorInvalidValue;
  for (size_t z = 0; z < extent.depth; ++z) {
    void* plane = static_cast<char*>(ptr.ptr) + z * slice;
    if (cudaError_t status = set_2d(plane, ptr.pitch, value, extent.width, extent.height, stream,
                                    completion == Completion::kSynchronous && z + 1 == extent.depth
                                        ? Completion::kSynchronous
                                        : Completion::kAsynchronous);
        status != cudaSuccess)
      return status;
  }
  return cudaSuccess;
}

// The deprecated 1D array copies lay `count` bytes out row after row from byte `x` of row `y`.
// An array's rows (`row` bytes each, `rows` of them in its first slice), and whether such a run fits.
cudaError_t array_rows(cudaArray_const_t array, size_t* row, size_t* rows) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  size_t element = 0;
  if (cudaError_t status = element_bytes(array, &element); status != cudaSuccess) return status;
  call_driver<&DriverTable::cuArray3DGetDescriptor>(&desc, reinterpret_cast<CUarray>(const_cast<cudaArray_t>(array)));
  *row = desc.Width * element;
  *rows = desc.Height == 0 ? 1 : desc.Height;
  return cudaSuccess;
}
bool run_fits(size_t x, size_t y, size_t count, size_t row, size_t rows) {
  size_t start = 0, end = 0;
  return x < row && y < rows && !__builtin_mul_overflow(y, row, &start) && !__builtin_add_overflow(start, x, &start) &&
         !__builtin_add_overflow(start, count, &end) && end <= row * rows;
}

// Such a run as at most three rectangles: the rest of the first row, whole rows, the start of the last.
struct Piece {
  size_t x, y, offset, width, height;
};
std::vector<Piece> linear_pieces(size_t x, size_t y, size_t count, size_t row) {
  std::vector<Piece> pieces;
  size_t offset = 0;
  if (x > 0 || count < row) {
    const size_t first = std::min(count, row - x);
    pieces.push_back({x, y++, 0, first, 1});
    offset = first;
  }
  if (const size_t whole = (count - offset) / row; whole > 0) {
    pieces.push_back({0, y, offset, row, whole});
    y += whole, offset += whole * row;
  }
  if (offset < count) pieces.push_back({0, y, offset, count - offset, 1});
  return pieces;
}

}  // namespace

cudaError_t copy_linear_array(cudaArray_const_t array, size_t x, size_t y, const void* linear, size_t count,
                              bool to_array, cudaMemcpyKind kind, CUstream stream, Completion completion) {
  return with_context([&] {
    CUDA_MEMCPY3D copy{};
    if (cudaError_t status = driver_copy_1d(nullptr, nullptr, 0, kind, &copy); status != cudaSuccess) return status;
    size_t row = 0, rows = 0;
    if (cudaError_t status = array_rows(array, &row, &rows); status != cudaSuccess) return status;
    if (count == 0) return cudaSuccess;
    if (!run_fits(x, y, count, row, rows)) return cudaErrorInvalidValue;
    for (const Piece& piece : linear_pieces(x, y, count, row)) {
      void* at = const_cast<char*>(static_cast<const char*>(linear)) + piece.offset;
      if (to_array) {
        driver_copy_2d(nullptr, 0, at, row, piece.width, piece.height, kind, &copy);
        array_side(array, piece.x, piece.y, &copy.dstMemoryType, &copy.dstArray, &copy.dstXInBytes, &copy.dstY);
      } else {
        driver_copy_2d(at, row, nullptr, 0, piece.width, piece.height, kind, &copy);
        array_side(array, piece.x, piece.y, &copy.srcMemoryType, &copy.srcArray, &copy.srcXInBytes, &copy.srcY);
      }
      if (cudaError_t status = issue_3d(copy, stream, completion); status != cudaSuccess) return status;
    }
    return cudaSuccess;
  });
}

cudaError_t copy_array_run(cudaArray_t dst, size_t dst_x, size_t dst_y, cudaArray_const_t src, size_t src_x,
                           size_t src_y, size_t count, cudaMemcpyKind kind, CUstream stream) {
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  return with_context([&] {
    size_t dst_row = 0, dst_rows = 0, src_row = 0, src_rows = 0;
    if (cudaError_t status = array_rows(dst, &dst_row, &dst_rows); status != cudaSuccess) return status;
    if (cudaError_t status = array_rows(src, &src_row, &src_rows); status != cudaSuccess) return status;
    if (count == 0) return cudaSuccess;
    if (!run_fits(dst_x, dst_y, count, dst_row, dst_rows) || !run_fits(src_x, src_y, count, src_row, src_rows))
      return cudaErrorInvalidValue;
    // One copy per stretch that stays within a row of both arrays.
    while (count > 0) {
      const size_t bytes = std::min({count, dst_row - dst_x, src_row - src_x});
      if (cudaError_t status = copy_2d_array_to_array(dst, dst_x, dst_y, src, src_x, src_y, bytes, 1, kind, stream);
          status != cudaSuccess)
        return status;
      count -= bytes;
      dst_x += bytes, src_x += bytes;
      if (dst_x == dst_row) dst_x = 0, ++dst_y;
      if (src_x == src_row) src_x = 0, ++src_y;
    }
    return cudaSuccess;
  });
}

cudaError_t copy_3d(const cudaMemcpy3DParms* p, CUstream stream, Completion completion) {
  CUDA_MEMCPY3D copy{};
  return with_context([&] {
    if (cudaError_t status = driver_copy_3d(p, &copy); status != cudaSuccess) return status;
    return issue_3d(copy, stream, completion);
  });
}

cudaError_t copy_3d_peer(const cudaMemcpy3DPeerParms* p, CUstream stream, Completion completion) {
  if (p == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUcontext contexts[2] = {nullptr, nullptr};
    const int devices[2] = {p->srcDevice, p->dstDevice};
    for (int i = 0; i < 2; ++i) {
      CUdevice handle = 0;
      if (cudaError_t status = device_handle(devices[i], &handle); status != cudaSuccess) return status;
      if (cudaError_t status = primary_context(devices[i], &contexts[i]); status != cudaSuccess) return status;
    }
    const cudaMemcpy3DParms plain{p->srcArray, p->srcPos, p->srcPtr, p->dstArray, p->dstPos, p->dstPtr, p->extent,
                                  cudaMemcpyDefault};
    CUDA_MEMCPY3D c{};
    if (cudaError_t status = driver_copy_3d(&plain, &c); status != cudaSuccess) return status;
    CUDA_MEMCPY3D_PEER peer{};
    peer.srcXInBytes = c.srcXInBytes, peer.srcY = c.srcY, peer.srcZ = c.srcZ;
    peer.srcMemoryType = c.srcMemoryType, peer.srcHost = c.srcHost, peer.srcDevice = c.srcDevice;
    peer.srcArray = c.srcArray, peer.srcContext = contexts[0], peer.srcPitch = c.srcPitch, peer.srcHeight = c.srcHeight;
    peer.dstXInBytes = c.dstXInBytes, peer.dstY = c.dstY, peer.dstZ = c.dstZ;
    peer.dstMemoryType = c.dstMemoryType, peer.dstHost = c.dstHost, peer.dstDevice = c.dstDevice;
    peer.dstArray = c.dstArray, peer.dstContext = contexts[1], peer.dstPitch = c.dstPitch, peer.dstHeight = c.dstHeight;
    peer.WidthInBytes = c.WidthInBytes, peer.Height = c.Height, peer.Depth = c.Depth;
    if (completion == Completion::kSynchronous && is_legacy(stream))
      return call_driver<&DriverTable::cuMemcpy3DPeer>(&peer);
    return complete(call_driver<&DriverTable::cuMemcpy3DPeerAsync>(&peer, stream), stream, completion);
  });
}

cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, CUstream stream, Completion completion) {
  if (!pitch_holds(dpitch, width) || !pitch_holds(spitch, width)) return cudaErrorInvalidPitchValue;
  CUDA_MEMCPY3D copy{};
  if (cudaError_t status = driver_copy_2d(dst, dpitch, src, spitch, width, height, kind, &copy); status != cudaSuccess)
    return status;
  return issue_3d(copy, stream, completion);
}

cudaError_t copy_2d_to_array(cudaArray_t dst, size_t x, size_t y, const void* src, size_t spitch, size_t width,
                             size_t height, cudaMemcpyKind kind, CUstream stream, Completion completion) {
  if (!pitch_holds(spitch, width)) return cudaErrorInvalidPitchValue;
  CUDA_MEMCPY3D copy{};
  if (cudaError_t status = driver_copy_2d(nullptr, 0, src, spitch, width, height, kind, &copy); status != cudaSuccess)
    return status;
  array_side(dst, x, y, &copy.dstMemoryType, &copy.dstArray, &copy.dstXInBytes, &copy.dstY);
  return issue_3d(copy, stream, completion);
}

cudaError_t copy_2d_from_array(void* dst, size_t dpitch, cudaArray_const_t src, size_t x, size_t y, size_t width,
                               size_t height, cudaMemcpyKind kind, CUstream stream, Completion completion) {
  if (!pitch_holds(dpitch, width)) return cudaErrorInvalidPitchValue;
  CUDA_MEMCPY3D copy{};
  if (cudaError_t status = driver_copy_2d(dst, dpitch, nullptr, 0, width, height, kind, &copy); status != cudaSuccess)
    return status;
  array_side(src, x, y, &copy.srcMemoryType, &copy.srcArray, &copy.srcXInBytes, &copy.srcY);
  return issue_3d(copy, stream, completion);
}

cudaError_t copy_2d_array_to_array(cudaArray_t dst, size_t dst_x, size_t dst_y, cudaArray_const_t src, size_t src_x,
                                   size_t src_y, size_t width, size_t height, cudaMemcpyKind kind, CUstream stream) {
  // Arrays are device memory: only the kinds that say so (or let the runtime tell) fit.
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  CUDA_MEMCPY3D copy{};
  copy.WidthInBytes = width, copy.Height = height, copy.Depth = 1;
  array_side(dst, dst_x, dst_y, &copy.dstMemoryType, &copy.dstArray, &copy.dstXInBytes, &copy.dstY);
  array_side(src, src_x, src_y, &copy.srcMemoryType, &copy.srcArray, &copy.srcXInBytes, &copy.srcY);
  return issue_3d(copy, stream, Completion::kSynchronous);
}

cudaError_t set_2d(void* dst, size_t pitch, int value, size_t width, size_t height, CUstream stream,
                   Completion completion) {
  return with_context([&] {
    const auto address = reinterpret_cast<CUdeviceptr>(dst);
    const auto byte = static_cast<unsigned char>(value);
    if (completion == Completion::kSynchronous && is_legacy(stream))
      return call_driver<&DriverTable::cuMemsetD2D8>(address, pitch, byte, width, height);
    return complete(call_driver<&DriverTable::cuMemsetD2D8Async>(address, pitch, byte, width, height, stream), stream,
                    completion);
  });
}

cudaError_t set_3d_extent(cudaPitchedPtr ptr, int value, cudaExtent extent, CUstream stream, Completion completion) {
  return with_context([&] { return set_3d(ptr, value, extent, stream, completion); });
}

// The batch structures are the driver's, member for member (driver_types.h mirrors cuda.h).
static_assert(sizeof(cudaMemcpyAttributes) == sizeof(CUmemcpyAttributes));
static_assert(offsetof(cudaMemcpyAttributes, flags) == offsetof(CUmemcpyAttributes, flags));
static_assert(sizeof(cudaMemcpy3DBatchOp) == sizeof(CUDA_MEMCPY3D_BATCH_OP));
static_assert(offsetof(cudaMemcpy3DBatchOp, extent) == offsetof(CUDA_MEMCPY3D_BATCH_OP, extent));
static_assert(offsetof(cudaMemcpy3DBatchOp, flags) == offsetof(CUDA_MEMCPY3D_BATCH_OP, flags));
static_assert(offsetof(cudaMemcpy3DOperand, op.ptr.layerHeight) == offsetof(CUmemcpy3DOperand, op.ptr.layerHeight));
static_assert(offsetof(cudaMemcpy3DOperand, op.array.offset) == offsetof(CUmemcpy3DOperand, op.array.offset));

cudaError_t copy_batch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                       cudaMemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs, CUstream stream) {
  return with_context([&] {
    return call_driver<&DriverTable::cuMemcpyBatchAsync>(
        reinterpret_cast<CUdeviceptr*>(const_cast<void**>(dsts)),
        reinterpret_cast<CUdeviceptr*>(const_cast<void**>(srcs)), const_cast<size_t*>(sizes), count,
        reinterpret_cast<CUmemcpyAttributes*>(attrs), attrs_idxs, num_attrs, stream);
  });
}

cudaError_t copy_3d_batch(size_t count, cudaMemcpy3DBatchOp* ops, unsigned long long flags, CUstream stream) {
  return with_context([&] {
    return call_driver<&DriverTable::cuMemcpy3DBatchAsync>(count, reinterpret_cast<CUDA_MEMCPY3D_BATCH_OP*>(ops),
                                                           flags, stream);
  });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  return api_call([&] { return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] { return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, Completion::kAsynchronous); });
}
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,
                                size_t width, size_t height, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d_to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, nullptr, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,
                                     size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_2d_to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                  size_t width, size_t height, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d_from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, nullptr, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpy2DFromArrayAsync(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                       size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_2d_from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                     size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height,
                                     enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_2d_array_to_array(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, nullptr);
  });
}

cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) {
  return api_call([&] { return copy_3d(p, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  return api_call([&] { return copy_3d(p, stream, Completion::kAsynchronous); });
}
cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms* p) {
  return api_call([&] { return copy_3d_peer(p, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms* p, cudaStream_t stream) {
  return api_call([&] { return copy_3d_peer(p, stream, Completion::kAsynchronous); });
}

cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return api_call([&] { return set_2d(devPtr, pitch, value, width, height, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) {
  return api_call([&] { return set_2d(devPtr, pitch, value, width, height, stream, Completion::kAsynchronous); });
}
cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent) {
  return api_call([&] { return set_3d_extent(pitchedDevPtr, value, extent, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
                              cudaStream_t stream) {
  return api_call([&] { return set_3d_extent(pitchedDevPtr, value, extent, stream, Completion::kAsynchronous); });
}

}  // extern "C"

extern "C" {

cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                 struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 cudaStream_t stream) {
  return api_call([&] { return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream); });
}
cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp* opList, unsigned long long flags,
                                   cudaStream_t stream) {
  return api_call([&] { return copy_3d_batch(numOps, opList, flags, stream); });
}


cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                              enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_linear_array(dst, wOffset, hOffset, src, count, true, kind, nullptr, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                   enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_linear_array(dst, wOffset, hOffset, src, count, true, kind, stream, Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                                enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_linear_array(src, wOffset, hOffset, dst, count, false, kind, nullptr, Completion::kSynchronous);
  });
}
cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                                     enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] {
    return copy_linear_array(src, wOffset, hOffset, dst, count, false, kind, stream, Completion::kAsynchronous);
  });
}
cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                   size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return copy_array_run(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind, nullptr);
  });
}

}  // extern "C"
