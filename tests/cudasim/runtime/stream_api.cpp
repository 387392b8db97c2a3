// Streams, events and host functions. cudaStream_t and cudaEvent_t are the driver's handles;
// stream 0 is the legacy default stream, cudaStreamPerThread the per-thread default stream.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

namespace cudasim::runtime {
namespace {

cudaError_t create_stream(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking) return cudaErrorInvalidValue;
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  // cudaStreamNonBlocking and CU_STREAM_NON_BLOCKING are both 0x1.
  return call_driver<&DriverTable::cuStreamCreate>(stream, flags);
}

cudaError_t destroy_stream(cudaStream_t stream) {
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return cudaErrorInvalidResourceHandle;  // the default streams cannot be destroyed
  return call_driver<&DriverTable::cuStreamDestroy>(stream);
}

constexpr unsigned int kEventFlags = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

cudaError_t create_event(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr || (flags & ~kEventFlags) != 0) return cudaErrorInvalidValue;
  // An interprocess event must also disable timing, as documented.
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0)
    return cudaErrorInvalidValue;
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  // The runtime's event flags have the driver's values (CU_EVENT_BLOCKING_SYNC, ...).
  return call_driver<&DriverTable::cuEventCreate>(event, flags);
}

}  // namespace

cudaError_t stream_synchronize(CUstream stream) {
  return with_context([&] { return call_driver<&DriverTable::cuStreamSynchronize>(stream); });
}

cudaError_t stream_query(CUstream stream) {
  return with_context([&] { return call_driver<&DriverTable::cuStreamQuery>(stream); });
}

cudaError_t stream_wait_event(CUstream stream, CUevent event, unsigned int flags) {
  return with_context([&] { return call_driver<&DriverTable::cuStreamWaitEvent>(stream, event, flags); });
}

cudaError_t stream_is_capturing(CUstream stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    const cudaError_t result = call_driver<&DriverTable::cuStreamIsCapturing>(stream, &capture);
    if (result == cudaSuccess) *status = static_cast<cudaStreamCaptureStatus>(capture);
    return result;
  });
}

cudaError_t event_record(CUevent event, CUstream stream) {
  return with_context([&] { return call_driver<&DriverTable::cuEventRecord>(event, stream); });
}

cudaError_t launch_host_func(CUstream stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  return with_context([&] { return call_driver<&DriverTable::cuLaunchHostFunc>(stream, fn, user_data); });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return api_call([&] { return create_stream(pStream, cudaStreamDefault); }); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return api_call([&] { return create_stream(pStream, flags); });
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) { return api_call([&] { return destroy_stream(stream); }); }
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return api_call([&] { return stream_synchronize(stream); }); }
cudaError_t cudaStreamQuery(cudaStream_t stream) { return api_call([&] { return stream_query(stream); }); }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return api_call([&] { return stream_wait_event(stream, event, flags); });
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return api_call([&] { return stream_is_capturing(stream, pCaptureStatus); });
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return api_call([&] { return create_event(event, cudaEventDefault); }); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return api_call([&] { return create_event(event, flags); });
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) { return api_call([&] { return event_record(event, stream); }); }
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuEventQuery>(event); }); });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuEventSynchronize>(event); }); });
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuEventDestroy>(event); }); });
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return api_call([&] { return cudaErrorInvalidValue; });
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuEventElapsedTime>(ms, start, end); }); });
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return api_call([&] { return launch_host_func(stream, fn, userData); });
}

}  // extern "C"
