// Stream attributes, numbers and devices through the runtime API (cudaStreamGetAttribute,
// cudaStreamSetAttribute, cudaStreamCopyAttributes, cudaStreamGetId, cudaStreamGetDevice), over the
// driver's (stream_attributes.cpp there); the _ptsz forms are in per_thread_api.cpp.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

namespace cudasim::runtime {

// The runtime's stream attributes are the driver's launch attributes: the same identifiers, values
// of the same layout.
static_assert(sizeof(cudaStreamAttrValue) == sizeof(CUstreamAttrValue));
static_assert(static_cast<int>(cudaStreamAttributeSynchronizationPolicy) == CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY);
static_assert(static_cast<int>(cudaStreamAttributeMemSyncDomain) == CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN);

cudaError_t stream_get_attribute(CUstream stream, cudaStreamAttrID attr, cudaStreamAttrValue* value) {
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamGetAttribute>(stream, static_cast<CUstreamAttrID>(attr),
                                                            reinterpret_cast<CUstreamAttrValue*>(value));
  });
}

cudaError_t stream_set_attribute(CUstream stream, cudaStreamAttrID attr, const cudaStreamAttrValue* value) {
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamSetAttribute>(stream, static_cast<CUstreamAttrID>(attr),
                                                            reinterpret_cast<const CUstreamAttrValue*>(value));
  });
}

cudaError_t stream_copy_attributes(CUstream dst, CUstream src) {
  return with_context([&] { return call_driver<&DriverTable::cuStreamCopyAttributes>(dst, src); });
}

cudaError_t stream_get_id(CUstream stream, unsigned long long* id) {
  return with_context([&] { return call_driver<&DriverTable::cuStreamGetId>(stream, id); });
}

// The runtime's device numbers are the driver's ordinals.
cudaError_t stream_get_device(CUstream stream, int* device) {
  return with_context([&] { return call_driver<&DriverTable::cuStreamGetDevice>(stream, device); });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaStreamGetAttribute(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue* value) {
  return api_call([&] { return stream_get_attribute(stream, attr, value); });
}
cudaError_t cudaStreamSetAttribute(cudaStream_t stream, cudaStreamAttrID attr, const cudaStreamAttrValue* param) {
  return api_call([&] { return stream_set_attribute(stream, attr, param); });
}
cudaError_t cudaStreamCopyAttributes(cudaStream_t dstStream, cudaStream_t srcStream) {
  return api_call([&] { return stream_copy_attributes(dstStream, srcStream); });
}
cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  return api_call([&] { return stream_get_id(hStream, streamId); });
}
cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  return api_call([&] { return stream_get_device(hStream, device); });
}

}  // extern "C"
