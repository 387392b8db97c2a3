// The exit-time JSON report: the simulator's only side channel to tests and benchmarks.
#include "report.h"

#include "faults.h"

#include "export_tables/export_tables.h"

#include "state.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace cudasim {
namespace {

// The process that writes the report: the one that loaded the driver, or a forked child once it
// calls cuInit itself. 0 when CUDASIM_REPORT is unset at load.
pid_t g_report_pid = 0;

__attribute__((constructor)) void remember_report_owner() {
  if (std::getenv("CUDASIM_REPORT") != nullptr) g_report_pid = getpid();
}

__attribute__((destructor)) void write_report_at_exit() {
  const char* path = std::getenv("CUDASIM_REPORT");
  if (path == nullptr || *path == '\0' || g_report_pid != getpid()) return;
  // A process that never called cuInit still reports its configured devices.
  if (!state().initialized) cuInit(0);
  if (!write_report(state(), path))
    std::fprintf(stderr, "cudasim: cannot write the report to %s\n", path);
}

}  // namespace

void claim_report() {
  if (std::getenv("CUDASIM_REPORT") != nullptr) g_report_pid = getpid();
}

void note_requested_name(State& st, const char* name) {
  if (st.requested_set.insert(name).second) st.requested_names.emplace_back(name);
}

bool write_report(State& st, const char* path) {
  nlohmann::json report;
  {
    std::lock_guard lock(st.mu);
    report["devices"] = nlohmann::json::array();
    for (const Device& dev : st.devices) {
      const DeviceStats& s = dev.stats;
      report["devices"].push_back({
          {"ordinal", dev.ordinal},
          {"total_bytes", dev.total},
          {"driver_allocs", s.driver_allocs},
          {"driver_frees", s.driver_frees},
          {"bytes_reserved", s.bytes_reserved},
          {"peak_bytes_reserved", s.peak_bytes_reserved},
          {"largest_alloc", s.largest_alloc},
          {"context_syncs", s.context_syncs},
          {"stream_syncs", s.stream_syncs},
          {"contexts_created", s.contexts_created},
          {"pool",
           {{"async_allocs", s.pool_async_allocs},
            {"async_frees", s.pool_async_frees},
            {"bytes_reserved", s.pool_bytes_reserved},
            {"peak_bytes_reserved", s.pool_peak_bytes_reserved},
            {"bytes_used", s.pool_bytes_used},
            {"peak_bytes_used", s.pool_peak_bytes_used}}},
          {"graph",
           {{"allocs", s.graph_allocs},
            {"frees", s.graph_frees},
            {"bytes", s.graph_bytes},
            {"peak_bytes", s.graph_peak_bytes}}},
          {"arrays",
           {{"creates", s.array_creates},
            {"destroys", s.array_destroys},
            {"bytes", s.array_bytes},
            {"peak_bytes", s.array_peak_bytes}}},
          {"vmm",
           {{"creates", s.vmm_creates},
            {"releases", s.vmm_releases},
            {"bytes", s.vmm_bytes},
            {"peak_bytes", s.vmm_peak_bytes},
            {"maps", s.vmm_maps},
            {"unmaps", s.vmm_unmaps},
            {"reserved_va_bytes", s.vmm_reserved_va_bytes}}},
          {"managed",
           {{"allocs", s.managed_allocs},
            {"frees", s.managed_frees},
            {"bytes", s.managed_bytes},
            {"peak_bytes", s.managed_peak_bytes}}},
          {"kernel_launches", s.kernel_launches},
      });
    }
    const PinnedStats& pinned = st.pinned_stats;
    report["pinned_host"] = {{"allocs", pinned.allocs},         {"frees", pinned.frees},
                             {"registers", pinned.registers},   {"unregisters", pinned.unregisters},
                             {"bytes", pinned.bytes},           {"peak_bytes", pinned.peak_bytes}};
    report["proc_address_requests"] = st.requested_names;
    report["faults_injected"] = faults_injected();
  }
  // The private tables asked for and the entries called (export_tables/), outside State::mu: they
  // keep counts of their own.
  report["export_table_requests"] = nlohmann::json::array();
  for (const export_tables::TableRequest& r : export_tables::requests())
    report["export_table_requests"].push_back({{"uuid", r.uuid}, {"table", r.name}, {"count", r.count}});
  report["export_table_calls"] = nlohmann::json::array();
  for (const export_tables::SlotCalls& c : export_tables::calls()) {
    report["export_table_calls"].push_back({{"table", c.table},
                                            {"index", c.index},
                                            {"knowledge", export_tables::knowledge_name(c.knowledge)},
                                            {"calls", c.calls}});
  }
  std::ofstream out(path, std::ios::trunc);
  out << report.dump(2) << '\n';
  return static_cast<bool>(out);
}

}  // namespace cudasim
