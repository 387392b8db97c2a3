// What a stream is and carries: its attributes (cuStreamGetAttribute, cuStreamSetAttribute,
// cuStreamCopyAttributes), its number (cuStreamGetId), device (cuStreamGetDevice) and contexts
// (cuStreamGetCtx_v2), each with its _ptsz spelling.
//
// The attributes cuda.h marks "Valid for streams" are stored per stream, checked where cuda.h
// bounds them, and answered back; only the priority changes anything else (cuStreamGetPriority
// reads it). No device code runs, so an access policy window or a synchronisation domain has
// nothing to act on. An attribute never set reads as the device's default: a zero window, the
// automatic synchronisation policy, domain 0, and the map {default: 0, remote: 1}.
#include "contexts.h"
#include "state.h"

using namespace cudasim;

namespace {

// The attributes cuda.h marks "Valid for streams".
CUresult check_stream_attribute(CUstreamAttrID attr, const CUstreamAttrValue& value) {
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      return launch_attribute_value_valid(attr, value) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default: return CUDA_ERROR_INVALID_VALUE;  // not an attribute of streams
  }
}

CUstreamAttrValue default_attribute(CUstreamAttrID attr) {
  CUstreamAttrValue value{};
  if (attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY) value.syncPolicy = CU_SYNC_POLICY_AUTO;
  if (attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP) value.memSyncDomainMap = CUlaunchMemSyncDomainMap{0, 1};
  return value;
}

CUresult get_attribute(CUstream handle, CUstreamAttrID attr, CUstreamAttrValue* value, bool per_thread_default) {
  if (value == nullptr || check_stream_attribute(attr, default_attribute(attr)) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State&, const std::shared_ptr<CUstream_st>& stream) {
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
      *value = CUstreamAttrValue{};
      value->priority = stream->priority;
      return CUDA_SUCCESS;
    }
    const auto found = stream->attributes.find(attr);
    *value = found != stream->attributes.end() ? found->second : default_attribute(attr);
    return CUDA_SUCCESS;
  });
}

// Applies to work submitted from now on; a priority is clamped to the device's range, as
// cuStreamCreateWithPriority clamps it.
CUresult set_attribute(CUstream handle, CUstreamAttrID attr, const CUstreamAttrValue* value, bool per_thread_default) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_stream_attribute(attr, *value); rc != CUDA_SUCCESS) return rc;
  return with_stream(handle, per_thread_default, [&](State&, const std::shared_ptr<CUstream_st>& stream) {
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) stream->priority = clamp_stream_priority(value->priority);
    else stream->attributes[attr] = *value;
    return CUDA_SUCCESS;
  });
}

// "Both streams must have the same context."
CUresult copy_attributes(CUstream dst, CUstream src, bool per_thread_default) {
  return with_stream(dst, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& to) {
    std::shared_ptr<CUstream_st> from;
    if (CUresult rc = resolve_stream(st, src, per_thread_default, &from); rc != CUDA_SUCCESS) return rc;
    if (from->ctx != to->ctx) return CUDA_ERROR_INVALID_VALUE;
    to->attributes = from->attributes;
    to->priority = from->priority;
    return CUDA_SUCCESS;
  });
}

// Unique for the life of the process: numbered when first asked, never reused.
CUresult get_id(CUstream handle, unsigned long long* id, bool per_thread_default) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (stream->id == 0) stream->id = ++st.last_stream_id;
    *id = stream->id;
    return CUDA_SUCCESS;
  });
}

// Entry points of 12.8 (cuStreamGetDevice) and 12.5 (cuStreamGetCtx_v2): an older simulated driver
// (CUDASIM_DRIVER_VERSION) does not have them.
CUresult get_device(CUstream handle, CUdevice* device, bool per_thread_default) {
  if (driver_version() < 12080) return CUDA_ERROR_NOT_SUPPORTED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State&, const std::shared_ptr<CUstream_st>& stream) {
    *device = stream->ctx->device;
    return CUDA_SUCCESS;
  });
}

// No green contexts are simulated: the stream's regular context, and NULL for the green one.
CUresult get_contexts(CUstream handle, CUcontext* ctx, CUgreenCtx* green, bool per_thread_default) {
  if (driver_version() < 12050) return CUDA_ERROR_NOT_SUPPORTED;
  if (ctx == nullptr || green == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State&, const std::shared_ptr<CUstream_st>& stream) {
    *ctx = stream->ctx;
    *green = nullptr;
    return CUDA_SUCCESS;
  });
}

}  // namespace

CUDASIM_EXPORT CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value_out) {
  return get_attribute(hStream, attr, value_out, false);
}
CUDASIM_EXPORT CUresult cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue* value_out) {
  return get_attribute(hStream, attr, value_out, true);
}
CUDASIM_EXPORT CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  return set_attribute(hStream, attr, value, false);
}
CUDASIM_EXPORT CUresult cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                  const CUstreamAttrValue* value) {
  return set_attribute(hStream, attr, value, true);
}
CUDASIM_EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) { return copy_attributes(dst, src, false); }
CUDASIM_EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  return copy_attributes(dst, src, true);
}
CUDASIM_EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  return get_id(hStream, streamId, false);
}
CUDASIM_EXPORT CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long* streamId) {
  return get_id(hStream, streamId, true);
}
CUDASIM_EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice* device) {
  return get_device(hStream, device, false);
}
CUDASIM_EXPORT CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice* device) {
  return get_device(hStream, device, true);
}
CUDASIM_EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return get_contexts(hStream, pCtx, pGreenCtx, false);
}
CUDASIM_EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return get_contexts(hStream, pCtx, pGreenCtx, true);
}
