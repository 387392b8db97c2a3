// gpumem_get_stats (include/gpumem.h): the memory managers' figures for a program that asks.
#include "context_registry.h"
#include "gpumem.h"
#include "hooks.h"

namespace {

// Reads only the registry: never calls the driver, so it is safe whenever the program calls it.
int fill(int device, gpumem_stats* out) {
  using gpumem::shim::ContextRegistry;
  using gpumem::shim::ManagerStats;
  if (out == nullptr) return -1;
  const gpumem::shim::MemoryManager* manager = ContextRegistry::instance().first_on_device(device);
  if (manager == nullptr) return -1;
  const ManagerStats stats = manager->stats();
  *out = gpumem_stats{stats.counters.allocs, stats.counters.frees, stats.counters.failed_allocs,
                      stats.counters.passed_through, stats.bytes_limit, stats.bytes_in_use,
                      stats.peak_bytes_in_use, stats.bytes_reserved, stats.peak_bytes_reserved,
                      stats.largest_free_block, stats.bytes_fenced, stats.regions,
                      stats.counters.driver_allocs};
  return 0;
}

}  // namespace

extern "C" GPUMEM_EXPORT int gpumem_get_stats(int device, gpumem_stats* out) {
  try {
    return fill(device, out);
  } catch (...) {  // nothing may cross the C boundary
    return -1;
  }
}
