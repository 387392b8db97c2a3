// The allocation-trace reader of gpumem-replay: RMM's replay-log CSV (logging_resource_adaptor) and
// the superset gpumem's shim writes.
//
// Format: the first non-blank line is a header; columns are found by name (any order, names matched
// without regard to case or surrounding blanks, unknown columns ignored). Required: Thread, Time,
// Action, Pointer, Size, Stream. Optional: Device, Reserved, Limit. Every later non-blank line is one
// row with as many comma-separated fields as the header. Values may carry surrounding blanks; lines
// may end in CRLF. A last line without its newline that cannot be read is a row cut short (a process
// killed while writing it, as RMM's readers allow for): it is skipped and counted, not an error.
//
//   Thread    decimal
//   Time      seconds since the epoch with a fraction ("1764047045.123456", gpumem) or a time of day
//             "HH:MM:SS[.ffffff]" (RMM); kept as seconds, only for information (rows replay in file order)
//   Action    "allocate", "free" or "deallocate", "allocate failure" (a refused request)
//   Pointer   hex, with or without 0x (may be empty on an "allocate failure" row)
//   Size      decimal bytes
//   Stream    decimal or 0x-hex
//   Device    decimal device ordinal; 0 when the column is absent
//   Reserved  decimal bytes, or empty
//   Limit     decimal bytes, or empty
//
// Pure: no I/O, nothing thrown but std::bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::replay {

enum class TraceAction : std::uint8_t { allocate, free, allocate_failure };

std::string_view to_string(TraceAction action);

// Fields ordered so that nothing is padded: a large trace holds millions of these.
struct TraceRecord {
  std::size_t line = 0;  // 1-based line number in the file
  std::uint64_t thread = 0;
  double time = 0.0;     // seconds (since the epoch, or since midnight for RMM's time of day)
  std::uintptr_t pointer = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;
  int device = 0;
  TraceAction action = TraceAction::allocate;
  std::optional<std::size_t> reserved;  // absent column or empty field: nullopt
  std::optional<std::size_t> limit;
};

struct Trace {
  std::vector<TraceRecord> records;
  bool has_device_column = false;
  bool has_reserved_column = false;
  bool has_limit_column = false;
  std::size_t torn_rows = 0;  // 0 or 1: the last line, cut short and skipped
  std::size_t torn_line = 0;  // its line number
};

// Either a trace, or one error of the form `line N: column Size: expected ..., got "..."`.
struct TraceParseResult {
  std::optional<Trace> trace;
  std::string error;
};

TraceParseResult parse_trace(std::string_view text);

}  // namespace gpumem::replay
