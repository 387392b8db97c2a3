// Stream worker threads, the legacy-default-stream ordering rules and the cuStream* entry points.
#include "streams.h"

#include "contexts.h"
#include "faults.h"
#include "state.h"

#include <thread>

using namespace cudasim;

// --- the worker ---

std::uint64_t CUstream_st::enqueue(Operation op, bool caller_waits) {
  std::lock_guard lock(mu_);
  const bool runnable_now = queue_.empty() && !running_;
  queue_.push_back(std::move(op));
  ++submitted_;
  if (!worker_started_) {
    worker_started_ = true;
    // Detached: a process may exit with work still queued; nothing joins it at exit (no hang).
    std::thread([self = shared_from_this()] { self->run_worker(); }).detach();
  } else if (worker_idle_ && !(caller_waits && runnable_now)) {
    work_.notify_one();
  }
  return submitted_;
}

void CUstream_st::run_front(std::unique_lock<std::mutex>& lock) {
  running_ = true;
  Operation op = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  op();
  op = nullptr;  // drop captures before reporting completion
  lock.lock();
  running_ = false;
  ++completed_;
  if (progress_waiters_ > 0) progress_.notify_all();
}

void CUstream_st::run_worker() {
  std::unique_lock lock(mu_);
  const auto ready = [this] { return (!queue_.empty() && !running_) || (retired_ && queue_.empty()); };
  for (;;) {
    if (!ready()) {
      worker_idle_ = true;
      work_.wait(lock, ready);
      worker_idle_ = false;
    }
    if (queue_.empty()) return;  // retired and drained
    run_front(lock);
  }
}

void CUstream_st::run_or_wait_until(std::uint64_t seq) {
  std::unique_lock lock(mu_);
  // The front of the queue is operation `seq` exactly when the one before it has completed and none
  // runs (queue_ holds what is neither running nor completed, in order).
  const auto own_turn = [&] { return !running_ && completed_ + 1 == seq && !queue_.empty(); };
  while (completed_ < seq) {
    if (own_turn()) {
      run_front(lock);
      // Work queued behind it meanwhile is the worker's.
      if (!queue_.empty() && worker_idle_) work_.notify_one();
      return;
    }
    ++progress_waiters_;
    progress_.wait(lock, [&] { return completed_ >= seq || own_turn(); });
    --progress_waiters_;
  }
}

std::uint64_t CUstream_st::last_submitted() {
  std::lock_guard lock(mu_);
  return submitted_;
}

bool CUstream_st::reached(std::uint64_t seq) {
  std::lock_guard lock(mu_);
  return completed_ >= seq;
}

void CUstream_st::wait_until(std::uint64_t seq) {
  std::unique_lock lock(mu_);
  if (completed_ >= seq) return;
  ++progress_waiters_;
  progress_.wait(lock, [&] { return completed_ >= seq; });
  --progress_waiters_;
}

void CUstream_st::retire() {
  std::lock_guard lock(mu_);
  retired_ = true;
  if (worker_idle_) work_.notify_one();
}

// --- ordering ---

namespace cudasim {

CUresult resolve_stream(State& st, CUstream handle, bool per_thread_default,
                        std::shared_ptr<CUstream_st>* out) {
  if (handle != nullptr && handle != CU_STREAM_LEGACY && handle != CU_STREAM_PER_THREAD) {
    auto it = st.streams.find(handle);
    if (it == st.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    *out = it->second;
    return CUDA_SUCCESS;
  }
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  bool per_thread = handle == CU_STREAM_PER_THREAD || (handle == nullptr && per_thread_default);
  if (!per_thread) {
    *out = ctx->legacy;
    return CUDA_SUCCESS;
  }
  auto& slot = ctx->per_thread[std::this_thread::get_id()];
  if (!slot) {
    slot = std::make_shared<CUstream_st>();
    slot->ctx = ctx;
    slot->kind = StreamKind::PerThread;
    follow_context_waits(slot);
  }
  *out = slot;
  return CUDA_SUCCESS;
}

std::uint64_t submit(State&, const std::shared_ptr<CUstream_st>& stream, Operation op, bool caller_waits) {
  CUctx_st* ctx = stream->ctx;
  auto wait_for = [&](const std::shared_ptr<CUstream_st>& other) {
    std::uint64_t seq = other->last_submitted();
    if (!other->reached(seq)) stream->enqueue([other, seq] { other->wait_until(seq); });
  };
  if (stream->kind == StreamKind::Legacy) {
    // Work on the legacy default stream waits for all earlier work on blocking streams.
    for (auto& [thread, other] : ctx->per_thread) wait_for(other);
    for (auto& other : ctx->streams) {
      if (other->blocking()) wait_for(other);
    }
  } else if (stream->blocking() && ctx->legacy) {
    // ... and work on a blocking stream waits for earlier work on the legacy default stream.
    wait_for(ctx->legacy);
  }
  return stream->enqueue(std::move(op), caller_waits);
}

void wait_event_on(State& st, const std::shared_ptr<CUstream_st>& stream, const CUevent_st& event) {
  if (const std::shared_ptr<IpcEventPage>& page = event.ipc) {
    // Its latest record, made by any process sharing it, as of now.
    const std::uint64_t generation = latest_ipc_record(*page);
    if (generation != 0) submit(st, stream, [page, generation] { wait_ipc_record(*page, generation); });
    return;
  }
  if (event.recorded_seq == 0) return;  // never recorded: nothing to wait for
  submit(st, stream, [other = event.stream, seq = event.recorded_seq] { other->wait_until(seq); });
}

}  // namespace cudasim

// --- entry points ---

namespace {

CUresult stream_create(CUstream* out, unsigned flags, int priority) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  auto stream = std::make_shared<CUstream_st>();
  stream->ctx = ctx;
  stream->flags = flags;
  stream->priority = clamp_stream_priority(priority);
  ctx->streams.push_back(stream);
  l.st.streams.emplace(stream.get(), stream);
  follow_context_waits(stream);
  *out = stream.get();
  return CUDA_SUCCESS;
}

CUresult stream_destroy(CUstream handle) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  auto it = l.st.streams.find(handle);
  if (it == l.st.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  // Returns at once; queued work still runs, then the worker exits (as the real driver does).
  abandon_capture(l.st, it->second.get());  // an ongoing capture ends with it, its graph discarded
  it->second->retire();
  l.st.streams.erase(it);
  return CUDA_SUCCESS;
}

CUresult stream_synchronize(CUstream handle, bool per_thread_default) {
  std::shared_ptr<CUstream_st> stream;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = resolve_stream(l.st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS)
      return rc;
    if (CUresult rc = check_stream_not_capturing(l.st, stream); rc != CUDA_SUCCESS) return rc;
    l.st.device(stream->ctx->device).stats.stream_syncs++;
  }
  stream->wait_until(stream->last_submitted());
  Locked l;
  release_pools_above_threshold(l.st, stream->ctx->device);
  return CUDA_SUCCESS;
}

CUresult stream_query(CUstream handle, bool per_thread_default) {
  return with_stream(handle, per_thread_default, [](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (CUresult rc = check_stream_not_capturing(st, stream); rc != CUDA_SUCCESS) return rc;
    return stream->reached(stream->last_submitted()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

CUresult stream_wait_event(CUstream handle, CUevent event, unsigned flags, bool per_thread_default) {
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    auto ev = st.events.find(event);
    if (ev == st.events.end()) return CUDA_ERROR_INVALID_HANDLE;
    const auto& event_capture = ev->second->captured_in;
    if (event_capture && !event_capture->ended) return capture_event_wait(st, stream, *ev->second);
    if (ev->second->ipc && !stream->capture) {
      if (latest_ipc_record(*ev->second->ipc) == 0) return CUDA_SUCCESS;  // never recorded anywhere
      bool captured = false;
      if (CUresult rc = capture_work(st, stream, NodeKind::EventWait, &captured); rc != CUDA_SUCCESS) return rc;
      wait_event_on(st, stream, *ev->second);
      return CUDA_SUCCESS;
    }
    if (ev->second->recorded_seq == 0) return CUDA_SUCCESS;  // never recorded: nothing to wait for
    if (stream->capture) {
      if (stream->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      // Only an external wait may depend on work outside the capture sequence.
      if (flags != CU_EVENT_WAIT_EXTERNAL) {
        invalidate(*stream->capture);
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
      }
      bool captured = false;
      CUgraphNode_st* node = nullptr;
      if (CUresult rc = capture_work(st, stream, NodeKind::EventWait, &captured, {}, &node); rc != CUDA_SUCCESS)
        return rc;
      node->event = event;  // the graph's launches wait for it
      return CUDA_SUCCESS;
    }
    bool captured = false;
    if (CUresult rc = capture_work(st, stream, NodeKind::EventWait, &captured); rc != CUDA_SUCCESS) return rc;
    wait_event_on(st, stream, *ev->second);
    return CUDA_SUCCESS;
  });
}

CUresult stream_is_capturing(CUstream handle, CUstreamCaptureStatus* status, bool per_thread_default) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // cuStreamGetCaptureInfo without the optional outputs.
  return per_thread_default ? cuStreamGetCaptureInfo_ptsz(handle, status, nullptr)
                            : cuStreamGetCaptureInfo(handle, status, nullptr);
}

CUresult launch_host_func(CUstream handle, CUhostFn fn, void* data, bool per_thread_default) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    bool captured = false;
    Operation op = [fn, data] { fn(data); };
    CUgraphNode_st* node = nullptr;  // captured: a host node, whose parameters are the function and data
    if (CUresult rc = capture_work(st, stream, NodeKind::Host, &captured, op, &node); rc != CUDA_SUCCESS) return rc;
    if (captured) {
      node->host = CUDA_HOST_NODE_PARAMS{fn, data};
      return CUDA_SUCCESS;
    }
    submit(st, stream, std::move(op));
    return CUDA_SUCCESS;
  });
}

CUresult stream_add_callback(CUstream handle, CUstreamCallback fn, void* data, unsigned flags,
                             bool per_thread_default) {
  if (fn == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    bool captured = false;
    Operation op = [fn, data, handle] { fn(handle, CUDA_SUCCESS, data); };
    if (CUresult rc = capture_work(st, stream, NodeKind::Host, &captured, op); rc != CUDA_SUCCESS || captured) return rc;
    submit(st, stream, std::move(op));
    return CUDA_SUCCESS;
  });
}

CUresult stream_get_flags(CUstream handle, unsigned* flags, bool per_thread_default) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [flags](State&, const std::shared_ptr<CUstream_st>& stream) {
    *flags = stream->flags;
    return CUDA_SUCCESS;
  });
}

CUresult stream_get_priority(CUstream handle, int* priority, bool per_thread_default) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [priority](State&, const std::shared_ptr<CUstream_st>& stream) {
    *priority = stream->priority;  // 0 for the default streams
    return CUDA_SUCCESS;
  });
}

CUresult stream_get_ctx(CUstream handle, CUcontext* ctx, bool per_thread_default) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [ctx](State&, const std::shared_ptr<CUstream_st>& stream) {
    *ctx = stream->ctx;
    return CUDA_SUCCESS;
  });
}

}  // namespace

CUDASIM_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  CUDASIM_FAULT_POINT("cuStreamCreate");
  return stream_create(phStream, Flags, 0);
}
CUDASIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return stream_create(phStream, flags, priority);
}
CUDASIM_EXPORT CUresult cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }
CUDASIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
CUDASIM_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  CUDASIM_FAULT_POINT("cuStreamSynchronize");
  return stream_synchronize(hStream, false);
}
CUDASIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  CUDASIM_FAULT_POINT("cuStreamSynchronize");
  return stream_synchronize(hStream, true);
}
CUDASIM_EXPORT CUresult cuStreamQuery(CUstream hStream) { return stream_query(hStream, false); }
CUDASIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, true); }
CUDASIM_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, false);
}
CUDASIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, true);
}
CUDASIM_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return stream_is_capturing(hStream, captureStatus, false);
}
CUDASIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return stream_is_capturing(hStream, captureStatus, true);
}
CUDASIM_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, false);
}
CUDASIM_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, true);
}
CUDASIM_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                                            unsigned int flags) {
  return stream_add_callback(hStream, callback, userData, flags, false);
}
CUDASIM_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                                 void* userData, unsigned int flags) {
  return stream_add_callback(hStream, callback, userData, flags, true);
}
CUDASIM_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  return stream_get_flags(hStream, flags, false);
}
CUDASIM_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  return stream_get_flags(hStream, flags, true);
}
CUDASIM_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
  return stream_get_priority(hStream, priority, false);
}
CUDASIM_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  return stream_get_priority(hStream, priority, true);
}
CUDASIM_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  return stream_get_ctx(hStream, pctx, false);
}
CUDASIM_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  return stream_get_ctx(hStream, pctx, true);
}
