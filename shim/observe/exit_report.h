// GPUMEM_STATS / GPUMEM_STATS_FILE: the process's memory figures per device, written once when it
// exits (a table on stderr, a JSON file), and the aggregation gpumem_get_stats shares with them.
//
// A device's figures combine every context the process had on it, retired ones included: counters
// are summed; "now" figures are those of the live contexts, summed; peaks are the largest single
// context's peak (contexts on one device rarely overlap; when they do, the true combined peak lies
// between that and the sum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <array>
#include <optional>
#include <vector>

#include "managers/memory_manager.h"

namespace gpumem::shim::observe {

struct DeviceFigures {
  int device = 0;
  std::string mode;              // the mode of its first context
  std::size_t contexts = 0;      // contexts seen (live and retired)
  std::size_t live_contexts = 0;
  bool partial = false;          // a manager was busy at exit: its memory figures are missing
  ManagerStats stats;            // combined as described above
  // The device's budget (every path's charges, the limit): empty when the shim has none for it.
  struct PathCharge {
    std::size_t charged = 0;
    std::size_t peak_charged = 0;
    std::uint64_t charges = 0;
    std::uint64_t bytes_charged_in_total = 0;
  };
  bool has_budget = false;
  std::size_t budget_limit = 0;
  std::size_t charged = 0;
  std::size_t peak_charged = 0;
  std::array<PathCharge, kBudgetPaths> paths_charged{};
  std::string uuid;              // "GPU-..." when the shim read it (budget::device_uuid)
  unsigned ranks_sharing = 1;    // ranks splitting the GPU (GPUMEM_PER_RANK), this one included
  // A GPU shared with other processes (docs/sharing.md): this process's figures in its ledger.
  std::optional<share::MemberFigures> share;

  // Allocations served without a device allocation of their own.
  std::uint64_t driver_allocs_avoided() const noexcept {
    return stats.counters.allocs > stats.counters.driver_allocs ? stats.counters.allocs - stats.counters.driver_allocs
                                                                : 0;
  }
};

// The budget path of a gpumem.h path number (enum gpumem_path), or nullopt for the graph's memory,
// which is not charged, and for numbers out of range.
std::optional<BudgetPath> budget_path_of(int path) noexcept;

// The figures of every device the process's managers served, by device ordinal. With `never_wait`
// (at exit) a manager another thread holds contributes its counters only. Calls no CUDA function.
std::vector<DeviceFigures> collect_device_figures(bool never_wait);

// The table GPUMEM_STATS prints (lines prefixed "gpumem: "), and the JSON GPUMEM_STATS_FILE holds
// (with the host, the launcher and the ranks, which gpumem-report merges per job).
std::string render_table(const std::vector<DeviceFigures>& devices, long pid);
std::string render_json(const std::vector<DeviceFigures>& devices, long pid);

}  // namespace gpumem::shim::observe
