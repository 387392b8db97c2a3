// Streams: each one runs its queued operations in order on its own worker thread, started on the
// first submission. Sequence numbers order the work: the n-th operation submitted has sequence n,
// and `completed` counts operations finished, so "the stream reached n" is completed >= n.
#pragma once

#include "cuda_api.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace cudasim {

using Operation = std::function<void()>;

enum class StreamKind { Legacy, PerThread, Created };

struct Capture;  // graphs.h
struct IpcEventPage;  // ipc_events.cpp: the record counters an interprocess event shares

}  // namespace cudasim

// Invariant: completed <= submitted; queue.size() == submitted - completed - (running ? 1 : 0);
// operations run one at a time, in sequence order.
struct CUstream_st : std::enable_shared_from_this<CUstream_st> {
  CUctx_st* ctx = nullptr;
  cudasim::StreamKind kind = cudasim::StreamKind::Created;
  unsigned flags = 0;  // CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING
  int priority = 0;
  // Guarded by State::mu: cuStreamGetId's number (0 until first asked), and the attributes set with
  // cuStreamSetAttribute other than the priority (stream_attributes.cpp).
  unsigned long long id = 0;
  std::map<CUlaunchAttributeID, CUlaunchAttributeValue> attributes;
  // The capture sequence this stream records into (graphs.h); guarded by State::mu.
  std::shared_ptr<cudasim::Capture> capture;

  // Blocking streams synchronise with the legacy default stream; non-blocking ones do not.
  bool blocking() const { return (flags & CU_STREAM_NON_BLOCKING) == 0; }

  // Queues an operation; returns its sequence number. caller_waits: the caller goes on to
  // run_or_wait_until() this operation, so a worker asleep on an empty queue is not woken for it.
  std::uint64_t enqueue(cudasim::Operation op, bool caller_waits = false);
  std::uint64_t last_submitted();
  bool reached(std::uint64_t seq);
  void wait_until(std::uint64_t seq);
  // wait_until(seq) for an operation the calling thread queued and blocks on (a synchronous copy):
  // once every earlier operation has completed and the worker runs none, the caller runs it itself,
  // in the stream's order as the worker would, and spares two thread switches. Only for operations
  // that may run on any thread (copies and sets, not host functions).
  void run_or_wait_until(std::uint64_t seq);
  // Lets the worker exit once the queue is empty (destroyed streams and contexts).
  void retire();

 private:
  void run_worker();
  // Runs the queue's front operation, which nobody else runs: `lock` holds mu_ and is released
  // while the operation runs.
  void run_front(std::unique_lock<std::mutex>& lock);

  // Wake-ups cost a context switch each: the worker is woken only when it sleeps on an empty queue,
  // and waiters for completion only when there are some.
  std::mutex mu_;
  std::condition_variable work_;      // the worker waits here for work or retirement
  std::condition_variable progress_;  // wait_until() callers wait here for completions
  std::deque<cudasim::Operation> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  int progress_waiters_ = 0;
  bool worker_started_ = false;
  bool worker_idle_ = false;  // the worker sleeps on work_
  bool running_ = false;      // an operation runs (on the worker or a run_or_wait_until() caller)
  bool retired_ = false;
};

// Invariant: when recorded_seq > 0 the event completes when `stream` reaches recorded_seq; the
// record operation stores `time` just before that.
struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  std::shared_ptr<CUstream_st> stream;
  std::uint64_t recorded_seq = 0;
  std::uint64_t generation = 0;  // bumped per record, so only the latest record sets `time`
  // Set when the event was last recorded into a capture sequence (graphs.h), not onto a stream.
  std::shared_ptr<cudasim::Capture> captured_in;
  std::vector<CUgraphNode_st*> captured_tail;  // what the recording stream had captured then
  // An interprocess event's (CU_EVENT_INTERPROCESS, or opened with cuIpcOpenEventHandle): whether
  // it is complete is read there, as processes sharing it may record it.
  std::shared_ptr<cudasim::IpcEventPage> ipc;
  std::chrono::steady_clock::time_point time{};  // written by the worker under State::mu
};
