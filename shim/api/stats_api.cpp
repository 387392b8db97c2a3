// The statistics part of the public C API (include/gpumem.h): gpumem_get_stats,
// gpumem_get_path_stats, gpumem_trim and gpumem_dump.
#include <cstdio>
#include <string>

#include "managers/context_registry.h"
#include "gpumem.h"
#include "hooks/hooks.h"
#include "observe/exit_report.h"

namespace {

using gpumem::shim::AllocationPath;
using gpumem::shim::ContextRegistry;
using gpumem::shim::kAllocationPaths;
using gpumem::shim::ManagerStats;
using gpumem::shim::MemoryManager;

static_assert(GPUMEM_PATH_COUNT == kAllocationPaths + 4,
              "gpumem.h names the managers' paths, then VMM, managed, arrays and the pools' reserve");
static_assert(GPUMEM_PATH_ARENA == static_cast<int>(AllocationPath::arena) &&
              GPUMEM_PATH_DRIVER == static_cast<int>(AllocationPath::driver) &&
              GPUMEM_PATH_ASYNC_POOL == static_cast<int>(AllocationPath::async_pool) &&
              GPUMEM_PATH_PROGRAM_POOL == static_cast<int>(AllocationPath::program_pool) &&
              GPUMEM_PATH_GRAPH == static_cast<int>(AllocationPath::graph));

// The device's figures over all its contexts (see observe/exit_report.h); false if it has none.
bool device_figures(int device, gpumem::shim::observe::DeviceFigures& out) {
  for (auto& figures : gpumem::shim::observe::collect_device_figures(/*never_wait=*/false)) {
    if (figures.device == device) {
      out = std::move(figures);
      return true;
    }
  }
  return false;
}

// Reads only the registry: never calls the driver, so it is safe whenever the program calls it.
int fill(int device, gpumem_stats* out) {
  if (out == nullptr) return -1;
  const MemoryManager* manager = ContextRegistry::instance().first_on_device(device);
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

extern "C" {

GPUMEM_EXPORT int gpumem_get_stats(int device, gpumem_stats* out) {
  try {
    return fill(device, out);
  } catch (...) {  // nothing may cross the C boundary
    return -1;
  }
}

GPUMEM_EXPORT int gpumem_get_path_stats(int device, int path, gpumem_path_stats* out) {
  try {
    if (out == nullptr || path < 0 || path >= GPUMEM_PATH_COUNT) return -1;
    const gpumem::shim::DeviceBudget* budget = gpumem::shim::budget::existing(device);
    if (budget == nullptr) return -1;
    *out = gpumem_path_stats{};
    const auto charged_path = gpumem::shim::observe::budget_path_of(path);
    if (charged_path) {
      out->charged = budget->charged(*charged_path);
      out->peak_charged = budget->peak_charged(*charged_path);
    }
    if (static_cast<std::size_t>(path) < kAllocationPaths) {  // served by the memory managers
      gpumem::shim::observe::DeviceFigures figures;
      if (device_figures(device, figures)) {
        const auto& counters = figures.stats.counters.paths[static_cast<std::size_t>(path)];
        out->allocs = counters.allocs;
        out->bytes = counters.bytes;
      }
    } else if (charged_path && *charged_path != gpumem::shim::BudgetPath::pool_reserve) {
      // charged on the way to the driver: one charge per allocation (the pools' reserve has none)
      out->allocs = budget->charges(*charged_path);
      out->bytes = budget->bytes_charged_in_total(*charged_path);
    }
    return 0;
  } catch (...) {
    return -1;
  }
}

GPUMEM_EXPORT long long gpumem_trim(int device) {
  try {
    bool found = false;
    long long released = 0;
    ContextRegistry& registry = ContextRegistry::instance();
    registry.for_each_manager([&](MemoryManager& manager, bool live) {
      if (!live || static_cast<int>(manager.device()) != device) return;
      found = true;
      released += static_cast<long long>(manager.trim());
    });
    return found ? released : -1;
  } catch (...) {
    return -1;
  }
}

GPUMEM_EXPORT int gpumem_dump(int device, FILE* stream) {
  try {
    if (stream == nullptr) return -1;
    std::string text;
    ContextRegistry::instance().for_each_manager([&](const MemoryManager& manager, bool live) {
      if (live && static_cast<int>(manager.device()) == device) text += manager.dump();
    });
    if (text.empty()) return -1;
    if (std::fputs(text.c_str(), stream) < 0 || std::fflush(stream) != 0) return -1;
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
