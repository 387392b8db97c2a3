// The events behind stream-ordered frees: recorded, polled and reused.
#include "context/stream_fences.h"

#include "driver/real_driver.h"

namespace gpumem::shim {

FenceId StreamFences::record_on_stream(CUstream stream) {
  const RealDriver& driver = real_driver();
  if (driver.cuEventCreate == nullptr || driver.cuEventRecord == nullptr) return 0;
  std::lock_guard lock(mutex_);
  CUevent event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else if (driver.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return 0;
  }
  if (driver.cuEventRecord(event, stream) != CUDA_SUCCESS) {
    spare_events_.push_back(event);
    return 0;
  }
  if (count_ == pending_.size()) {  // grow the ring, oldest first
    std::vector<Pending> grown;
    grown.reserve(pending_.empty() ? 64 : pending_.size() * 2);
    for (std::size_t i = 0; i < count_; ++i) grown.push_back(pending_[(head_ + i) % pending_.size()]);
    grown.resize(grown.capacity());
    pending_ = std::move(grown);
    head_ = 0;
  }
  const FenceId id = next_unordered_id();
  pending_[(head_ + count_) % pending_.size()] = Pending{id, event};
  ++count_;
  return id;
}

void StreamFences::resolve_through(FenceId id) {
  FenceId seen = synced_through_.load(std::memory_order_acquire);
  while (seen < id && !synced_through_.compare_exchange_weak(seen, id, std::memory_order_acq_rel)) {
  }
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < count_; ++i) {
    Pending& pending = pending_[(head_ + i) % pending_.size()];
    if (pending.id > id) break;
    complete_locked(pending);
  }
  pop_completed_locked();
}

void StreamFences::abandon(FenceId id) {
  std::lock_guard lock(mutex_);
  if (Pending* pending = find_locked(id)) complete_locked(*pending);
  pop_completed_locked();
}

void StreamFences::poll() {
  std::lock_guard lock(mutex_);
  const RealDriver& driver = real_driver();
  for (int queried = 0; queried < 2 && count_ > 0; ++queried) {
    Pending& oldest = pending_[head_];
    if (oldest.event != nullptr && driver.cuEventQuery(oldest.event) != CUDA_SUCCESS) break;
    complete_locked(oldest);
    pop_completed_locked();
  }
}

bool StreamFences::is_resolved(const Fence& fence) {
  if (fence.empty() || fence.id <= synced_through_.load(std::memory_order_acquire)) return true;
  if (fence.stream == 0) return false;  // a deferred synchronous free: only a context sync resolves it
  std::lock_guard lock(mutex_);
  Pending* pending = find_locked(fence.id);
  if (pending == nullptr || pending->event == nullptr) return true;  // already seen complete
  if (real_driver().cuEventQuery(pending->event) != CUDA_SUCCESS) return false;
  complete_locked(*pending);
  pop_completed_locked();
  return true;
}

std::size_t StreamFences::pending_count() {
  std::lock_guard lock(mutex_);
  return count_;
}

StreamFences::Pending* StreamFences::find_locked(FenceId id) {
  // Binary search: ids increase from the head of the ring.
  std::size_t low = 0;
  std::size_t high = count_;
  while (low < high) {
    const std::size_t mid = low + (high - low) / 2;
    Pending& candidate = pending_[(head_ + mid) % pending_.size()];
    if (candidate.id == id) return &candidate;
    if (candidate.id < id) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return nullptr;
}

void StreamFences::complete_locked(Pending& pending) {
  if (pending.event != nullptr) {
    spare_events_.push_back(pending.event);
    pending.event = nullptr;
  }
}

void StreamFences::pop_completed_locked() {
  while (count_ > 0 && pending_[head_].event == nullptr) {
    head_ = (head_ + 1) % pending_.size();
    --count_;
  }
}

}  // namespace gpumem::shim
