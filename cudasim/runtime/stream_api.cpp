// Streams, events and host functions. cudaStream_t and cudaEvent_t are the driver's handles;
// stream 0 is the legacy default stream, cudaStreamPerThread the per-thread default stream.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

namespace cudasim::runtime {
namespace {

// A priority outside the device's range is clamped by the driver, as documented.
cudaError_t create_stream(cudaStream_t* stream, unsigned int flags, int priority = 0) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking) return cudaErrorInvalidValue;
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  // cudaStreamNonBlocking and CU_STREAM_NON_BLOCKING are both 0x1.
  return call_driver<&DriverTable::cuStreamCreateWithPriority>(stream, flags, priority);
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

// cudaStreamCaptureMode and CUstreamCaptureMode, cudaGraph_t and CUgraph, cudaGraphNode_t and
// CUgraphNode, cudaGraphEdgeData and CUgraphEdgeData are the same values, handles and layout.
cudaError_t stream_begin_capture(CUstream stream, cudaStreamCaptureMode mode) {
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamBeginCapture>(stream, static_cast<CUstreamCaptureMode>(mode));
  });
}

cudaError_t stream_end_capture(CUstream stream, cudaGraph_t* graph) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  return with_context([&] { return call_driver<&DriverTable::cuStreamEndCapture>(stream, graph); });
}

cudaError_t stream_get_capture_info(CUstream stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                    cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                                    const cudaGraphEdgeData** edges, size_t* count) {
  if (status == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t sequence = 0;
    const cudaError_t result = call_driver<&DriverTable::cuStreamGetCaptureInfo>(
        stream, &capture, id != nullptr ? &sequence : nullptr, graph, dependencies,
        reinterpret_cast<const CUgraphEdgeData**>(edges), count);
    if (result == cudaSuccess) {
      *status = static_cast<cudaStreamCaptureStatus>(capture);
      if (id != nullptr && capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) *id = sequence;
    }
    return result;
  });
}

// cudaEventRecordDefault and cudaEventRecordExternal are CU_EVENT_RECORD_DEFAULT and _EXTERNAL.
cudaError_t event_record(CUevent event, CUstream stream, unsigned int flags) {
  return with_context([&] { return call_driver<&DriverTable::cuEventRecordWithFlags>(event, stream, flags); });
}

cudaError_t launch_host_func(CUstream stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  return with_context([&] { return call_driver<&DriverTable::cuLaunchHostFunc>(stream, fn, user_data); });
}

// The callback runs on the stream's worker, in order, with the stream's status (always cudaSuccess
// here: no work fails on a simulated device). cudaStreamCallback_t differs from CUstreamCallback in
// its status type only, an enum of the same size and values for success.
cudaError_t stream_add_callback(CUstream stream, cudaStreamCallback_t callback, void* user_data, unsigned int flags) {
  if (callback == nullptr || flags != 0) return cudaErrorInvalidValue;
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamAddCallback>(stream, reinterpret_cast<CUstreamCallback>(callback),
                                                          user_data, 0u);
  });
}

cudaError_t stream_get_priority(CUstream stream, int* priority) {
  if (priority == nullptr) return cudaErrorInvalidValue;
  return with_context([&] { return call_driver<&DriverTable::cuStreamGetPriority>(stream, priority); });
}

cudaError_t stream_get_flags(CUstream stream, unsigned int* flags) {
  if (flags == nullptr) return cudaErrorInvalidValue;
  return with_context([&] { return call_driver<&DriverTable::cuStreamGetFlags>(stream, flags); });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return api_call([&] { return create_stream(pStream, cudaStreamDefault); }); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return api_call([&] { return create_stream(pStream, flags); });
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  return api_call([&] { return create_stream(pStream, flags, priority); });
}
cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  return api_call([&] { return stream_get_priority(hStream, priority); });
}
cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  return api_call([&] { return stream_get_flags(hStream, flags); });
}
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                  unsigned int flags) {
  return api_call([&] { return stream_add_callback(stream, callback, userData, flags); });
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

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return api_call([&] { return stream_begin_capture(stream, mode); });
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  return api_call([&] { return stream_end_capture(stream, pGraph); });
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  return api_call([&] {
    return stream_get_capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                                   numDependencies_out);
  });
}
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return api_call([&] { return cudaErrorInvalidValue; });
  return api_call([&] {
    return call_driver<&DriverTable::cuThreadExchangeStreamCaptureMode>(reinterpret_cast<CUstreamCaptureMode*>(mode));
  });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuGraphDestroy>(graph); }); });
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return api_call([&] { return create_event(event, cudaEventDefault); }); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return api_call([&] { return create_event(event, flags); });
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) { return api_call([&] { return event_record(event, stream); }); }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return api_call([&] { return event_record(event, stream, flags); });
}
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
