// The real driver's entry points (entry_points.def), resolved once, lazily.
#include "driver/real_driver.h"

#include <atomic>
#include <string>

#include "driver/driver_object.h"
#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "driver/resolution_guard.h"

namespace gpumem::shim {
namespace {

// Invariant: g_table is written only under ProcessLock::real_driver before g_ready is set, and never after; it is
// leaked with the process (static storage, trivially destructible), so hooks running during exit
// can still read it.
RealDriver g_table;
const RealDriver g_unavailable;
std::atomic<bool> g_ready{false};

// `missing` collects the names the driver did not provide (an older driver lacks the newest ones).
template <typename Function>
void resolve(Function& slot, std::string& missing, const char* versioned_name,
             const char* base_name, int version, cuuint64_t flags) {
  slot = reinterpret_cast<Function>(driver_entry_point(versioned_name, base_name, version, flags));
  if (slot == nullptr) (missing += ' ') += versioned_name;
}

void resolve_table(RealDriver& table, std::string& missing) {
  table.cuGetProcAddress_v2 = driver_proc_address_v2(/*load=*/true);
  if (table.cuGetProcAddress_v2 == nullptr && driver_handle(/*load=*/true) == nullptr) return;
  // Every entry but cuGetProcAddress_v2, which was found above.
#define GPUMEM_DRIVER_ENTRY(symbol, base, version, stream, use) \
  if (table.symbol == nullptr) resolve(table.symbol, missing, #symbol, #base, version, \
                                            GPUMEM_STREAM_FLAGS(stream));
#include "driver/entry_points.def"
  table.available = true;
}

}  // namespace

const RealDriver& real_driver() {
  if (g_ready.load(std::memory_order_acquire)) return g_table;
  // Re-entered from inside our own resolution on this thread: the table is not there yet.
  if (ResolutionGuard::active()) return g_unavailable;
  const ResolutionGuard guard;
  log::Pending message;
  try {
    const auto lock = lock_fork_safely(ProcessLock::real_driver);
    if (!g_ready.load(std::memory_order_relaxed)) {
      RealDriver table;
      std::string missing;
      resolve_table(table, missing);
      if (!table.available) return g_unavailable;  // no driver yet: try again on the next call
      g_table = table;
      g_ready.store(true, std::memory_order_release);
      message.add(LogLevel::debug, "real driver resolved; entry points it lacks:{}",
                  missing.empty() ? " none" : missing);
    }
  } catch (...) {  // std::mutex failing: report "no driver" rather than throw into a C caller
    return g_unavailable;
  }
  message.flush();
  return g_table;
}

const char* driver_error_name(CUresult result) {
  const RealDriver& driver = real_driver();
  const char* name = nullptr;
  if (driver.cuGetErrorName == nullptr || driver.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return "unknown error";
  }
  return name;
}

}  // namespace gpumem::shim
