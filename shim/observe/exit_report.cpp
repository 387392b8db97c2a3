// The exit statistics: the GPUMEM_STATS table and the GPUMEM_STATS_FILE JSON, written once at exit.
#include "observe/exit_report.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "budget/budgets.h"
#include "managers/context_registry.h"
#include "base/log.h"
#include "base/output_file.h"
#include "base/trace_log.h"
#include "policy/process_policy.h"

namespace gpumem::shim::observe {
namespace {

std::string human_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

void combine(DeviceFigures& into, const ManagerStats& s, bool live) {
  ManagerStats& t = into.stats;
  t.counters.allocs += s.counters.allocs;
  t.counters.frees += s.counters.frees;
  t.counters.failed_allocs += s.counters.failed_allocs;
  t.counters.passed_through += s.counters.passed_through;
  t.counters.driver_allocs += s.counters.driver_allocs;
  t.counters.fence_syncs += s.counters.fence_syncs;
  t.counters.call_ns += s.counters.call_ns;
  for (std::size_t i = 0; i < kAllocationPaths; ++i) {
    t.counters.paths[i].allocs += s.counters.paths[i].allocs;
    t.counters.paths[i].bytes += s.counters.paths[i].bytes;
  }
  t.bytes_limit = std::max(t.bytes_limit, s.bytes_limit);
  t.peak_bytes_in_use = std::max(t.peak_bytes_in_use, s.peak_bytes_in_use);
  t.peak_bytes_reserved = std::max(t.peak_bytes_reserved, s.peak_bytes_reserved);
  if (!live) return;  // a retired context's memory went with it
  t.bytes_in_use += s.bytes_in_use;
  t.bytes_reserved += s.bytes_reserved;
  t.bytes_fenced += s.bytes_fenced;
  t.regions += s.regions;
  if (s.largest_free_block > t.largest_free_block) {
    t.largest_free_block = s.largest_free_block;
    t.fragmentation = s.fragmentation;  // that of the context holding the largest free block
  }
}

// 0 until the exit report has been written (or given up) in this process.
std::atomic<bool> g_exit_report_done{false};
bool g_forked_child = false;

void note_forked_child() { g_forked_child = true; }

void write_stderr(const std::string& text) noexcept { write_output(STDERR_FILENO, text.data(), text.size()); }

void write_stats_file(const Policy& policy, const std::vector<DeviceFigures>& devices, long pid) {
  // A forked child writes its own file only when the name has %p; else the file is its parent's.
  if (g_forked_child && !path_is_per_process(policy.stats_file)) {
    log::at(LogLevel::debug, "GPUMEM_STATS_FILE has no %p: a forked child leaves it to its parent");
    return;
  }
  PathFields fields = this_process_fields();
  fields.pid = pid;
  const std::string path = expand_path(policy.stats_file, fields);
  std::string why;
  const int fd = open_output_file(path, why);
  if (fd < 0) {
    write_stderr(fmt::format("gpumem: [error] GPUMEM_STATS_FILE: {}; the statistics are not written\n", why));
    return;
  }
  const std::string json = render_json(devices, pid) + "\n";
  if (!write_output(fd, json.data(), json.size())) {
    // Half a JSON document is no statistics: the file is left empty (a device has no length).
    const int error = errno;
    [[maybe_unused]] const int cut = ::ftruncate(fd, 0);
    write_stderr(fmt::format("gpumem: [error] GPUMEM_STATS_FILE: cannot write to \"{}\" ({}); the statistics are "
                             "not written\n", path, std::strerror(error)));
  }
  ::close(fd);
}

// What the program wrote to stdout and left in its buffer, written out before the table: libc would
// flush it only after this exit function, so through a pipe (2>&1 | less) the table came first.
// Never waits: a stream another thread holds (blocked on a full pipe) is left to libc's own flush.
void flush_program_stdout() noexcept {
  if (::ftrylockfile(stdout) != 0) return;
  ::fflush_unlocked(stdout);
  ::funlockfile(stdout);
}

// At exit, after the program's own exit handlers (the runtime's among them, which release the
// primary contexts: their managers are retired by then, with their figures kept). Calls no CUDA
// function and never waits for a manager another thread holds.
__attribute__((destructor)) void report_at_exit() {
  flush_trace();
  const ContextRegistry* registry = ContextRegistry::existing();
  if (registry == nullptr && !budget::any()) return;  // CUDA never reached the shim: nothing to say
  if (registry != nullptr) registry->log_live_summaries();
  if (g_exit_report_done.exchange(true)) return;
  try {
    const PolicyResult& result = process_policy();
    if (!policy_is_active() || (!result.policy->stats && result.policy->stats_file.empty())) return;
    const long pid = static_cast<long>(::getpid());
    const std::vector<DeviceFigures> devices = collect_device_figures(/*never_wait=*/true);
    if (g_forked_child && devices.empty()) return;  // a child that never used CUDA: its parent reports
    if (result.policy->stats) {
      flush_program_stdout();
      write_stderr(render_table(devices, pid));
    }
    if (!result.policy->stats_file.empty()) write_stats_file(*result.policy, devices, pid);
  } catch (...) {  // no host memory at exit: the statistics are lost, the exit is not
  }
}

__attribute__((constructor)) void register_fork_handler() {
  // Only marks a flag: safe during load, and needed before any fork the program makes.
  pthread_atfork(nullptr, nullptr, note_forked_child);
}

}  // namespace

std::optional<BudgetPath> budget_path_of(int path) noexcept {
  static constexpr std::array<std::optional<BudgetPath>, kAllocationPaths + 4> kCharged{
      BudgetPath::arena,    BudgetPath::driver, BudgetPath::async_pool, BudgetPath::program_pool,
      std::nullopt /* graph */, BudgetPath::vmm, BudgetPath::managed,   BudgetPath::arrays,
      BudgetPath::pool_reserve};
  if (path < 0 || static_cast<std::size_t>(path) >= kCharged.size()) return std::nullopt;
  return kCharged[static_cast<std::size_t>(path)];
}

std::vector<DeviceFigures> collect_device_figures(bool never_wait) {
  std::map<int, DeviceFigures> by_device;
  const ContextRegistry* registry = ContextRegistry::existing();
  if (registry == nullptr) return {};
  registry->for_each_manager([&](const MemoryManager& manager, bool live) {
    DeviceFigures& figures = by_device[static_cast<int>(manager.device())];
    figures.device = static_cast<int>(manager.device());
    figures.uuid = budget::device_uuid(manager.device());
    figures.ranks_sharing = budget::ranks_sharing(manager.device());
    if (figures.mode.empty()) figures.mode = manager.mode_name();
    ++figures.contexts;
    if (live) ++figures.live_contexts;
    ManagerStats stats;
    if (!manager.stats_snapshot(stats, never_wait)) figures.partial = true;
    combine(figures, stats, live);
  });
  // Devices whose memory only other paths took (VMM, managed, arrays) have a budget and no manager.
  for (int device = 0; device < budget::kMaxDevices; ++device) {
    const DeviceBudget* budget = budget::existing(device);
    if (budget == nullptr) continue;
    DeviceFigures& figures = by_device[device];
    figures.device = device;
    figures.uuid = budget::device_uuid(device);
    figures.ranks_sharing = budget::ranks_sharing(device);
    if (figures.mode.empty()) {
      const PolicyResult& policy = process_policy();
      figures.mode = policy.policy ? std::string(to_string(policy.policy->mode)) : "?";
      figures.stats.bytes_limit = budget->limit();
    }
    figures.has_budget = true;
    if (const share::Member* member = budget::shared(device)) figures.share = member->figures();
    figures.budget_limit = budget->limit();
    figures.charged = budget->charged();
    figures.peak_charged = budget->peak_charged();
    for (std::size_t i = 0; i < kBudgetPaths; ++i) {
      const auto path = static_cast<BudgetPath>(i);
      figures.paths_charged[i] = DeviceFigures::PathCharge{budget->charged(path), budget->peak_charged(path),
                                                           budget->charges(path), budget->bytes_charged_in_total(path)};
    }
  }
  std::vector<DeviceFigures> devices;
  for (auto& [device, figures] : by_device) devices.push_back(std::move(figures));
  return devices;
}

std::string render_table(const std::vector<DeviceFigures>& devices, long pid) {
  const PolicyResult& policy = process_policy();
  std::string launcher;
  if (policy.policy && policy.policy->ranks.launcher != Launcher::none) {
    launcher = fmt::format(", {}", policy.policy->ranks.describe());
  }
  std::string out = fmt::format("gpumem: memory statistics at exit (process {}{})\n", pid, launcher);
  if (devices.empty()) return out + "gpumem:   no device memory was allocated\n";
  auto row = [&](std::string_view name, auto&& cell) {
    out += fmt::format("gpumem:   {:<28}", name);
    for (const DeviceFigures& d : devices) out += fmt::format(" {:>26}", cell(d));
    out += '\n';
  };
  auto bytes = [](std::size_t value) { return fmt::format("{} ({})", value, human_bytes(value)); };
  row("", [](const DeviceFigures& d) { return fmt::format("device {}", d.device); });
  row("mode", [](const DeviceFigures& d) { return d.mode + (d.partial ? " (busy: partial)" : ""); });
  row("contexts (live)", [](const DeviceFigures& d) { return fmt::format("{} ({})", d.contexts, d.live_contexts); });
  row("limit", [&](const DeviceFigures& d) { return bytes(d.stats.bytes_limit); });
  row("reserved now", [&](const DeviceFigures& d) { return bytes(d.stats.bytes_reserved); });
  row("reserved at peak", [&](const DeviceFigures& d) { return bytes(d.stats.peak_bytes_reserved); });
  row("in use now", [&](const DeviceFigures& d) { return bytes(d.stats.bytes_in_use); });
  row("in use at peak", [&](const DeviceFigures& d) { return bytes(d.stats.peak_bytes_in_use); });
  // Freed by the program, not yet reusable: the device may still be using them (GPUMEM_FREE_SYNC).
  row("freed, awaiting the device", [&](const DeviceFigures& d) { return bytes(d.stats.bytes_fenced); });
  row("allocations served", [](const DeviceFigures& d) { return fmt::format("{}", d.stats.counters.allocs); });
  row("frees", [](const DeviceFigures& d) { return fmt::format("{}", d.stats.counters.frees); });
  row("refused", [](const DeviceFigures& d) { return fmt::format("{}", d.stats.counters.failed_allocs); });
  row("driver allocations made", [](const DeviceFigures& d) { return fmt::format("{}", d.stats.counters.driver_allocs); });
  // cuda_async mode asks the driver's pool for every block: what the pool reuses, it counts itself.
  row("driver allocations avoided", [](const DeviceFigures& d) {
    return d.mode == "cuda_async" ? std::string("n/a (driver's pool)") : fmt::format("{}", d.driver_allocs_avoided());
  });
  row("largest free block", [&](const DeviceFigures& d) { return bytes(d.stats.largest_free_block); });
  row("fragmentation", [](const DeviceFigures& d) { return fmt::format("{:.3f}", d.stats.fragmentation); });
  row("syncs for freed memory", [](const DeviceFigures& d) { return fmt::format("{}", d.stats.counters.fence_syncs); });
  row("time in allocation calls", [](const DeviceFigures& d) {
    return fmt::format("{:.3f} ms", static_cast<double>(d.stats.counters.call_ns) / 1e6);
  });
  for (std::size_t i = 0; i < kAllocationPaths; ++i) {
    const auto path = static_cast<AllocationPath>(i);
    row(fmt::format("path {}", to_string(path)), [&](const DeviceFigures& d) {
      const PathCounters& p = d.stats.counters.paths[i];
      return fmt::format("{} x, {}", p.allocs, human_bytes(p.bytes));
    });
  }
  row("budget charged now (peak)", [&](const DeviceFigures& d) {
    return d.has_budget ? fmt::format("{} ({})", human_bytes(d.charged), human_bytes(d.peak_charged)) : "-";
  });
  for (std::size_t i = 0; i < kBudgetPaths; ++i) {
    row(fmt::format("  charged by {}", to_string(static_cast<BudgetPath>(i))), [&](const DeviceFigures& d) {
      const auto& p = d.paths_charged[i];
      return d.has_budget ? fmt::format("{} (peak {})", human_bytes(p.charged), human_bytes(p.peak_charged)) : "-";
    });
  }
  const bool any_shared = std::any_of(devices.begin(), devices.end(), [](const DeviceFigures& d) { return d.share.has_value(); });
  if (!any_shared) return out;
  const auto shared_row = [&](std::string_view name, auto&& cell) {
    row(name, [&](const DeviceFigures& d) { return d.share ? cell(*d.share) : std::string("-"); });
  };
  shared_row("shared: guarantee at exit", [](const share::MemberFigures& s) { return human_bytes(s.terms.guarantee); });
  shared_row("shared: borrowed at peak", [](const share::MemberFigures& s) { return human_bytes(s.peak_borrowed); });
  shared_row("shared: given back on request", [](const share::MemberFigures& s) { return human_bytes(s.given_back); });
  shared_row("shared: waits (refused after)", [](const share::MemberFigures& s) {
    return fmt::format("{} ({})", s.waits, s.refusals_after_wait);
  });
  return out;
}

namespace {

nlohmann::ordered_json budget_json(const DeviceFigures& d) {
  if (!d.has_budget) return nullptr;
  nlohmann::ordered_json paths = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kBudgetPaths; ++i) {
    const auto& p = d.paths_charged[i];
    paths[std::string(to_string(static_cast<BudgetPath>(i)))] = {{"charged", p.charged},
                                                                 {"peak_charged", p.peak_charged},
                                                                 {"charges", p.charges},
                                                                 {"bytes_charged_in_total", p.bytes_charged_in_total}};
  }
  return {{"limit", d.budget_limit}, {"charged", d.charged}, {"peak_charged", d.peak_charged}, {"paths", paths}};
}

nlohmann::ordered_json share_json(const DeviceFigures& d) {
  if (!d.share) return nullptr;
  const share::MemberFigures& s = *d.share;
  return {{"guarantee", s.terms.guarantee},
          {"allowance", s.terms.allowance},
          {"held", s.terms.held},
          {"capacity", s.terms.capacity},
          {"peak_borrowed", s.peak_borrowed},
          {"given_back", s.given_back},
          {"waits", s.waits},
          {"refusals_after_wait", s.refusals_after_wait},
          {"ledger_updates", s.ledger_updates},
          {"members_at_join", s.members_at_join},
          {"join_us", s.join_ns / 1000.0}};
}

}  // namespace

std::string render_json(const std::vector<DeviceFigures>& devices, long pid) {
  nlohmann::ordered_json out;
  out["gpumem_version"] = GPUMEM_VERSION;
  out["pid"] = pid;
  // Who this process is in its job, for gpumem-report: the launcher's values (null when it gave none).
  const PathFields fields = this_process_fields();
  out["host"] = fields.host;
  const PolicyResult& policy = process_policy();
  const LaunchRanks ranks = policy.policy ? policy.policy->ranks : LaunchRanks{};
  const auto value_or_null = [](const RankValue& value) -> nlohmann::ordered_json {
    if (!value.value) return nullptr;
    return *value.value;
  };
  out["launcher"] = ranks.launcher == Launcher::none ? nlohmann::ordered_json(nullptr)
                                                     : nlohmann::ordered_json(std::string(to_string(ranks.launcher)));
  out["rank"] = value_or_null(ranks.rank);
  out["local_rank"] = value_or_null(ranks.local_rank);
  out["local_ranks"] = value_or_null(ranks.local_ranks);
  out["devices"] = nlohmann::ordered_json::array();
  for (const DeviceFigures& d : devices) {
    const ManagerStats& s = d.stats;
    nlohmann::ordered_json paths = nlohmann::ordered_json::object();
    for (std::size_t i = 0; i < kAllocationPaths; ++i) {
      paths[std::string(to_string(static_cast<AllocationPath>(i)))] = {{"allocations", s.counters.paths[i].allocs},
                                                                      {"bytes", s.counters.paths[i].bytes}};
    }
    // One object per device, its fields grouped: which device, its limit and memory, its counters.
    out["devices"].push_back(
        {{"device", d.device}, {"uuid", d.uuid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(d.uuid)},
         {"ranks_sharing", d.ranks_sharing}, {"mode", d.mode}, {"contexts", d.contexts},
         {"live_contexts", d.live_contexts}, {"partial", d.partial},
         {"limit", s.bytes_limit}, {"reserved", s.bytes_reserved}, {"peak_reserved", s.peak_bytes_reserved},
         {"in_use", s.bytes_in_use}, {"peak_in_use", s.peak_bytes_in_use}, {"fenced", s.bytes_fenced},
         {"regions", s.regions}, {"allocations", s.counters.allocs}, {"frees", s.counters.frees},
         {"refusals", s.counters.failed_allocs}, {"passed_through", s.counters.passed_through},
         {"driver_allocations", s.counters.driver_allocs}, {"driver_allocations_avoided", d.driver_allocs_avoided()},
         {"largest_free_block", s.largest_free_block}, {"fragmentation", s.fragmentation},
         {"fence_syncs", s.counters.fence_syncs}, {"call_ns", s.counters.call_ns}, {"paths", paths}, {"budget", budget_json(d)},
         {"share", share_json(d)}});
  }
  return out.dump(2);
}

}  // namespace gpumem::shim::observe
