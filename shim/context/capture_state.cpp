// Whether the program may be capturing a stream into a CUDA graph (then the shim never synchronises).
#include "context/capture_state.h"

#include <atomic>

namespace gpumem::shim::capture_state {
namespace {

// Captures begun and not yet seen to end, over all streams and threads. Never below 0.
std::atomic<long> g_active{0};

}  // namespace

void began() noexcept { g_active.fetch_add(1, std::memory_order_acq_rel); }

void ended() noexcept {
  long current = g_active.load(std::memory_order_acquire);
  while (current > 0 && !g_active.compare_exchange_weak(current, current - 1, std::memory_order_acq_rel)) {
  }
}

bool active() noexcept { return g_active.load(std::memory_order_acquire) > 0; }

}  // namespace gpumem::shim::capture_state
