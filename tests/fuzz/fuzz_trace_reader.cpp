// gpumem-replay's trace reader over arbitrary text, and what it accepts replayed through the
// arena. Checks: a parse gives a trace or one error naming a line, never both; every record of a
// trace is on a line the text has, its time finite and not negative, and absent columns read as
// device 0 and no reserved/limit value; the trace written out again in gpumem's form (every column)
// reads back the same; the replay of an accepted trace, preallocated and growing, at 1 MiB and
// 64 MiB, keeps its own books (arena calls = allocations + refusals + frees, frees <= allocations,
// a first refused line exactly when something was refused, peaks ordered: requested <= in use <=
// reserved <= the limit, utilisation = peak requested / peak reserved, replays_without_failure
// agreeing); for short traces, find_min_limit's answer is a multiple of 1 MiB, at least the trace's
// own peak, and replays without a refusal.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "replay.h"
#include "trace_reader.h"

using gpumem::fuzz::check;
namespace replay = gpumem::replay;

namespace {

void check_replay(const std::vector<replay::TraceRecord>& rows, const replay::ReplayOptions& options) {
  std::size_t allocate_rows = 0, free_rows = 0;
  for (const auto& row : rows) {
    allocate_rows += row.action == replay::TraceAction::allocate;
    free_rows += row.action == replay::TraceAction::free;
  }
  const replay::ReplayResult result = replay::replay(rows, options);
  check(result.allocations + result.failed + result.zero_size_allocations == allocate_rows);
  check(result.skipped_failures == rows.size() - allocate_rows - free_rows);
  check(result.operations == result.allocations + result.failed + result.frees);
  check(result.frees <= result.allocations && result.unmatched_frees <= free_rows);
  check(result.duplicate_allocations <= result.frees);
  check(result.first_failed_line.has_value() == (result.failed > 0));
  if (result.first_failed_line) {
    check(std::any_of(rows.begin(), rows.end(), [&](const replay::TraceRecord& row) {
      return row.line == *result.first_failed_line && row.action == replay::TraceAction::allocate;
    }));
  }
  check(result.peak_requested <= result.peak_in_use);
  check(result.peak_in_use <= result.peak_reserved);
  check(result.peak_reserved <= options.limit);
  check(result.driver_releases <= result.driver_calls);
  check(result.utilisation >= 0.0 && result.utilisation <= 1.0);
  check(result.peak_reserved == 0 ? result.utilisation == 0.0
                                  : result.utilisation == static_cast<double>(result.peak_requested) /
                                                              static_cast<double>(result.peak_reserved));
  check(replay::replays_without_failure(rows, options) == (result.failed == 0));  // the same run, cut short
}

// The trace in gpumem's own form, every column present: what the reader must read back as it was.
std::string render(const replay::Trace& trace) {
  std::string text = "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit\n";
  char row[1024];  // a time of up to 309 digits, and the rest
  for (const auto& record : trace.records) {
    std::snprintf(row, sizeof row, "%llu,%.6f,%s,0x%llx,%llu,%llu,%d,", static_cast<unsigned long long>(record.thread),
                  record.time, std::string(replay::to_string(record.action)).c_str(),
                  static_cast<unsigned long long>(record.pointer), static_cast<unsigned long long>(record.size),
                  static_cast<unsigned long long>(record.stream), record.device);
    text += row;
    if (record.reserved) text += std::to_string(*record.reserved);
    text += ',';
    if (record.limit) text += std::to_string(*record.limit);
    text += '\n';
  }
  return text;
}

void check_round_trip(const replay::Trace& trace) {
  const replay::TraceParseResult again = replay::parse_trace(render(trace));
  check(again.trace.has_value() && again.trace->records.size() == trace.records.size());
  for (std::size_t i = 0; i < trace.records.size(); ++i) {
    const replay::TraceRecord& a = trace.records[i];
    const replay::TraceRecord& b = again.trace->records[i];
    check(b.line == i + 2 && a.thread == b.thread && a.action == b.action && a.pointer == b.pointer &&
          a.size == b.size && a.stream == b.stream && a.device == b.device && a.reserved == b.reserved &&
          a.limit == b.limit);
    check(std::abs(a.time - b.time) <= 1e-6 + a.time * 1e-12);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const replay::TraceParseResult parsed = replay::parse_trace(text);
  check(parsed.trace.has_value() != !parsed.error.empty());
  if (!parsed.trace) {
    check(parsed.error.rfind("line ", 0) == 0);  // "line N: ..."
    check(parsed.error.find('\n') == std::string::npos);
    return 0;
  }
  const replay::Trace& trace = *parsed.trace;
  const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (const auto& record : trace.records) {
    check(record.line >= 2 && record.line <= lines);  // line 1 at the earliest is the header
    check(trace.has_device_column || record.device == 0);
    check(trace.has_reserved_column || !record.reserved);
    check(trace.has_limit_column || !record.limit);
    check(std::isfinite(record.time) && record.time >= 0.0);
  }
  check_round_trip(trace);
  const int device = trace.records.empty() ? 0 : trace.records.front().device;
  const auto rows = replay::rows_of_device(trace.records, device);
  for (const std::size_t limit : {std::size_t{1} << 20, std::size_t{64} << 20}) {
    for (const bool preallocate : {true, false}) {
      replay::ReplayOptions options;
      options.limit = limit;
      options.preallocate = preallocate;
      check_replay(rows, options);
    }
  }
  if (rows.size() <= 16) {
    replay::ReplayOptions options;
    options.preallocate = rows.size() % 2 == 0;
    const std::optional<std::size_t> min_limit = replay::find_min_limit(rows, options);
    if (min_limit) {
      check(*min_limit % replay::kMinLimitStep == 0 && *min_limit >= replay::kMinLimitStep &&
            *min_limit <= replay::kMinLimitCap);
      check(*min_limit >= replay::trace_peak_requested(rows));
      options.limit = *min_limit;
      check(replay::replays_without_failure(rows, options));
    } else {
      options.limit = replay::kMinLimitCap;
      check(!replay::replays_without_failure(rows, options));
    }
  }
  return 0;
}
