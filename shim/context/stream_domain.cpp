// Maps the stream handle a program passes to a fence domain of the arena.
#include "context/stream_domain.h"

#include <atomic>

namespace gpumem::shim {

std::uint64_t this_thread_stream_serial() noexcept {
  static std::atomic<std::uint64_t> next_serial{1};
  // A serial number rather than the thread's id: ids are reused after a thread exits, while work it
  // queued on its default stream may still be running.
  thread_local const std::uint64_t serial = next_serial.fetch_add(1, std::memory_order_relaxed);
  return serial;
}

}  // namespace gpumem::shim
