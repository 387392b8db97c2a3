// gpumem-replay's trace reader over arbitrary text, and what it accepts replayed through the
// arena. Checks: a parse gives a trace or one error naming a line, never both; every record of a
// trace is on a line the text has; the replay of an accepted trace keeps its own books (allocations
// and frees no more than the rows, peaks ordered: requested <= in use <= reserved <= the limit).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "replay.h"
#include "trace_reader.h"

using gpumem::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const gpumem::replay::TraceParseResult parsed = gpumem::replay::parse_trace(text);
  check(parsed.trace.has_value() != !parsed.error.empty());
  if (!parsed.trace) {
    check(parsed.error.rfind("line ", 0) == 0);  // "line N: ..."
    check(parsed.error.find('\n') == std::string::npos);
    return 0;
  }
  const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (const auto& record : parsed.trace->records) check(record.line >= 1 && record.line <= lines);
  const auto rows = gpumem::replay::rows_of_device(parsed.trace->records, 0);
  for (const bool preallocate : {true, false}) {
    gpumem::replay::ReplayOptions options;
    options.limit = std::size_t{64} << 20;
    options.preallocate = preallocate;
    const gpumem::replay::ReplayResult result = gpumem::replay::replay(rows, options);
    check(result.allocations + result.failed + result.zero_size_allocations + result.skipped_failures <= rows.size());
    check(result.frees <= result.allocations);
    check(result.peak_requested <= result.peak_in_use);
    check(result.peak_in_use <= result.peak_reserved);
    check(result.peak_reserved <= options.limit);
    check(result.utilisation >= 0.0 && result.utilisation <= 1.0);
  }
  return 0;
}
