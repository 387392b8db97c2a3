// Events: recorded into a stream, complete when the stream reaches them, timed by the worker.
#include "contexts.h"
#include "faults.h"
#include "state.h"

using namespace cudasim;

namespace {

constexpr unsigned kEventFlags = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

CUresult find_event(State& st, CUevent handle, std::shared_ptr<CUevent_st>* out) {
  auto it = st.events.find(handle);
  if (it == st.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

// An interprocess event is complete when its latest record, made by any process sharing it, is.
bool event_done(const CUevent_st& ev) {
  if (ev.ipc) return ipc_record_done(*ev.ipc, latest_ipc_record(*ev.ipc));
  return ev.recorded_seq == 0 || ev.stream->reached(ev.recorded_seq);
}

CUresult event_record(CUevent handle, CUstream stream_handle, unsigned flags, bool per_thread_default) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (flags != CU_EVENT_RECORD_DEFAULT && flags != CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<CUevent_st> ev;
  if (CUresult rc = find_event(l.st, handle, &ev); rc != CUDA_SUCCESS) return rc;
  std::shared_ptr<CUstream_st> stream;
  if (CUresult rc = resolve_stream(l.st, stream_handle, per_thread_default, &stream); rc != CUDA_SUCCESS)
    return rc;
  if (stream->ctx != ev->ctx) return CUDA_ERROR_INVALID_HANDLE;
  // Recorded in a capture, the event stands for what the stream captured so far; recorded with
  // CU_EVENT_RECORD_EXTERNAL, it is an event-record node of the graph.
  if (stream->capture && flags == CU_EVENT_RECORD_DEFAULT) return capture_event_record(l.st, stream, *ev);
  bool captured = false;
  CUgraphNode_st* node = nullptr;
  if (CUresult rc = capture_work(l.st, stream, NodeKind::EventRecord, &captured, {}, &node); rc != CUDA_SUCCESS)
    return rc;
  if (captured) {
    node->event = handle;  // the graph's launches record it
    return CUDA_SUCCESS;
  }
  record_event_on(l.st, stream, ev);
  return CUDA_SUCCESS;
}

}  // namespace

void cudasim::record_event_on(State& st, const std::shared_ptr<CUstream_st>& stream,
                              const std::shared_ptr<CUevent_st>& ev) {
  ev->captured_in.reset();
  ev->captured_tail.clear();
  ev->stream = stream;
  const std::uint64_t generation = ++ev->generation;
  std::shared_ptr<IpcEventPage> page = ev->ipc;
  const std::uint64_t shared_generation = page ? begin_ipc_record(*page) : 0;
  ev->recorded_seq = submit(st, stream, [ev, generation, page, shared_generation] {
    if (page) complete_ipc_record(*page, shared_generation);
    Locked timed;
    if (ev->generation == generation) ev->time = std::chrono::steady_clock::now();
  });
}

namespace {

CUresult event_destroy(CUevent handle) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  // Destroying an event with a pending record is allowed; the record op keeps it alive.
  return l.st.events.erase(handle) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

CUDASIM_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  CUDASIM_FAULT_POINT("cuEventCreate");
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if ((Flags & ~kEventFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Interprocess events must have timing disabled (as documented).
  if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  auto ev = std::make_shared<CUevent_st>();
  ev->ctx = ctx;
  ev->flags = Flags;
  if ((Flags & CU_EVENT_INTERPROCESS) != 0) {  // its counters live where other processes can see them
    ev->ipc = create_ipc_event_page(l.st);
    if (!ev->ipc) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  l.st.events.emplace(ev.get(), ev);
  *phEvent = ev.get();
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUDASIM_FAULT_POINT("cuEventRecord");
  return event_record(hEvent, hStream, 0, false);
}
CUDASIM_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return event_record(hEvent, hStream, 0, true);
}
CUDASIM_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags, false);
}
CUDASIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags, true);
}

CUDASIM_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  CUDASIM_FAULT_POINT("cuEventQuery");
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  std::shared_ptr<CUevent_st> ev;
  if (CUresult rc = find_event(l.st, hEvent, &ev); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_event_not_captured(l.st, *ev); rc != CUDA_SUCCESS) return rc;
  return event_done(*ev) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUDASIM_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  std::shared_ptr<CUevent_st> ev;
  std::shared_ptr<CUstream_st> stream;
  std::uint64_t seq = 0;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = find_event(l.st, hEvent, &ev); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_event_not_captured(l.st, *ev); rc != CUDA_SUCCESS) return rc;
    stream = ev->stream;
    seq = ev->recorded_seq;
  }
  if (ev->ipc) {
    wait_ipc_record(*ev->ipc, latest_ipc_record(*ev->ipc));
    return CUDA_SUCCESS;
  }
  if (seq == 0) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  stream->wait_until(seq);
  Locked l;
  release_pools_above_threshold(l.st, context_device(ev->ctx));
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuEventDestroy(CUevent hEvent) { return event_destroy(hEvent); }
CUDASIM_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) { return event_destroy(hEvent); }

namespace {
CUresult elapsed_time(float* ms, CUevent start_handle, CUevent end_handle) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  std::shared_ptr<CUevent_st> start, end;
  if (CUresult rc = find_event(l.st, start_handle, &start); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = find_event(l.st, end_handle, &end); rc != CUDA_SUCCESS) return rc;
  if (((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (start->recorded_seq == 0 || end->recorded_seq == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!event_done(*start) || !event_done(*end)) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return CUDA_SUCCESS;
}
}  // namespace

CUDASIM_EXPORT CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return elapsed_time(pMilliseconds, hStart, hEnd);
}
CUDASIM_EXPORT CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (driver_version() < 12080) return CUDA_ERROR_NOT_SUPPORTED;  // new in 12.8
  return elapsed_time(pMilliseconds, hStart, hEnd);
}
