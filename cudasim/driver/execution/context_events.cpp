// Events recorded for, and waited for by, a whole context: cuCtxRecordEvent and cuCtxWaitEvent.
//
// A context record completes once every stream of the context (created, per-thread and legacy
// default streams) has run the work queued on it before the call: it is recorded on a stream of
// its own that first waits for each of them. A context wait makes every stream of the context wait
// for the event's last record, as cuStreamWaitEvent does, and streams the context makes later too
// (until that record has completed). No green contexts are simulated, so a context is always the
// whole context.
#include "contexts.h"
#include "state.h"

using namespace cudasim;

namespace {

// A live context (INVALID_CONTEXT otherwise) and a live event (INVALID_HANDLE otherwise).
CUresult context_and_event(Locked& l, CUcontext ctx, CUevent event, std::shared_ptr<CUevent_st>* out) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (ctx == nullptr || !l.st.contexts.contains(ctx) || !ctx->alive) return CUDA_ERROR_INVALID_CONTEXT;
  auto found = l.st.events.find(event);
  if (found == l.st.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = found->second;
  return CUDA_SUCCESS;
}

}  // namespace

void cudasim::follow_context_waits(const std::shared_ptr<CUstream_st>& stream) {
  auto& waits = stream->ctx->waits;
  std::erase_if(waits, [](const auto& wait) { return wait.first->reached(wait.second); });
  // Copies, not structured bindings, go into the lambda: clang before 16 cannot capture those.
  for (const auto& wait : waits) stream->enqueue([other = wait.first, seq = wait.second] { other->wait_until(seq); });
}

// "hEvent and hCtx must be from the same CUDA context, otherwise CUDA_ERROR_INVALID_HANDLE"; a
// context with a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the captures invalidated.
CUDASIM_EXPORT CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent) {
  if (driver_version() < 12050) return CUDA_ERROR_NOT_SUPPORTED;  // an entry point of 12.5
  Locked l;
  std::shared_ptr<CUevent_st> event;
  if (CUresult rc = context_and_event(l, hCtx, hEvent, &event); rc != CUDA_SUCCESS) return rc;
  if (event->ctx != hCtx || event->ipc) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult rc = check_context_not_capturing(l.st, hCtx); rc != CUDA_SUCCESS) return rc;
  auto recorder = std::make_shared<CUstream_st>();
  recorder->ctx = hCtx;
  recorder->flags = CU_STREAM_NON_BLOCKING;
  for (const auto& stream : context_streams(hCtx)) {
    const std::uint64_t seq = stream->last_submitted();
    if (!stream->reached(seq)) recorder->enqueue([stream, seq] { stream->wait_until(seq); });
  }
  record_event_on(l.st, recorder, event);
  recorder->retire();  // its worker exits once the record has run
  return CUDA_SUCCESS;
}

// The event may be of another context or device. One last recorded into an ongoing capture, or a
// context with a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (captures invalidated).
CUDASIM_EXPORT CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent) {
  if (driver_version() < 12050) return CUDA_ERROR_NOT_SUPPORTED;
  Locked l;
  std::shared_ptr<CUevent_st> event;
  if (CUresult rc = context_and_event(l, hCtx, hEvent, &event); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_event_not_captured(l.st, *event); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_context_not_capturing(l.st, hCtx); rc != CUDA_SUCCESS) return rc;
  for (const auto& stream : context_streams(hCtx)) wait_event_on(l.st, stream, *event);
  if (!event->ipc && event->recorded_seq != 0) hCtx->waits.emplace_back(event->stream, event->recorded_seq);
  return CUDA_SUCCESS;
}
