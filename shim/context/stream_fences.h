// Fences for memory freed in stream order (cuMemFreeAsync) and by synchronous frees whose device
// synchronisation is deferred. Answers the arena's "may this chunk be reused yet?" question.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "fence.h"

namespace gpumem::shim {

// Fence ids come from one increasing counter per context, shared by stream-ordered frees (each has an
// event recorded on its stream) and deferred synchronous frees (no event: only a context
// synchronisation that began after the free resolves them).
//
// Invariants: `pending_` holds the stream-ordered fences not yet known complete or popped, in
// increasing id order (ids are drawn under `mutex_`); every event in `pending_` or `spare_events_` was
// created by this object and is never destroyed (events are reused, so steady state creates none).
class StreamFences final : public FenceOracle {
 public:
  explicit StreamFences(std::atomic<FenceId>& id_counter) : ids_(id_counter) {}

  // Draws a fence id and records an event on `stream` (a handle for the plain entry points). Returns
  // 0 when no event could be created or recorded: the caller must then treat the free as unordered.
  FenceId record_on_stream(CUstream stream);

  // A fence id for a synchronous free (no event).
  FenceId next_unordered_id() noexcept { return ids_.fetch_add(1, std::memory_order_acq_rel) + 1; }
  FenceId last_id() const noexcept { return ids_.load(std::memory_order_acquire); }

  // A context synchronisation that began after fence `id` was drawn has completed.
  void resolve_through(FenceId id);

  // The free that drew `id` did not happen (bad pointer): nothing waits on its event.
  void abandon(FenceId id);

  // Pops fences from the front whose events completed, so the ledger stays short in programs that
  // never synchronise the context. Cheap: queries at most a couple of events.
  void poll();

  bool is_resolved(const Fence& fence) override;

  std::size_t pending_count();

 private:
  struct Pending {
    FenceId id = 0;
    CUevent event = nullptr;  // null once known complete (the event went back to the spares)
  };

  // All below with mutex_ held.
  Pending* find_locked(FenceId id);
  void complete_locked(Pending& pending);
  void pop_completed_locked();

  std::atomic<FenceId>& ids_;
  std::atomic<FenceId> synced_through_{0};
  std::mutex mutex_;
  std::vector<Pending> pending_;  // ring buffer: head_ is the oldest, count_ entries
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::vector<CUevent> spare_events_;
};

}  // namespace gpumem::shim
