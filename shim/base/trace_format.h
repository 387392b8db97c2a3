// The GPUMEM_TRACE CSV, shared by its writer (base/trace_log.cpp) and its reader (tools/trace_reader.cpp):
// RMM's replay-log columns, then gpumem's own. One row per event; Time in seconds with microseconds,
// Pointer in hex, Mode a word or two, the rest in decimal.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace gpumem::trace_format {

enum Column : std::size_t {
  kThread, kTime, kAction, kPointer, kSize, kStream, kDevice, kReserved, kLimit, kMode, kColumns
};

inline constexpr std::array<std::string_view, kColumns> kColumnNames{
    "Thread", "Time", "Action", "Pointer", "Size", "Stream", "Device", "Reserved", "Limit", "Mode"};
// RMM's replay log has the first six; Device, Reserved, Limit and Mode are optional to a reader (traces
// written before Mode existed have the first nine).
inline constexpr std::size_t kRequiredColumns = kDevice;

// The header line the writer puts first, and the part of it every reader needs.
inline constexpr std::string_view kHeader = "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit,Mode\n";

// The Mode column: how the process serves the device's memory, on the device's first row only (empty
// on the others): one of these words.
inline constexpr std::string_view kModePreallocated = "bfc preallocated";
inline constexpr std::string_view kModeGrowth = "bfc growth";
inline constexpr std::string_view kRequiredHeader = kHeader.substr(0, kHeader.find(",Device"));

// The Action column's words.
inline constexpr std::string_view kAllocate = "allocate";
inline constexpr std::string_view kFree = "free";
inline constexpr std::string_view kAllocateFailure = "allocate failure";

// The header is the column names joined by commas.
constexpr bool header_names_columns() {
  std::size_t at = 0;
  for (std::size_t column = 0; column < kColumns; ++column) {
    const std::string_view name = kColumnNames[column];
    if (kHeader.substr(at, name.size()) != name) return false;
    at += name.size();
    if (kHeader[at] != (column + 1 == kColumns ? '\n' : ',')) return false;
    ++at;
  }
  return at == kHeader.size();
}
static_assert(header_names_columns(), "kHeader must name kColumnNames in order");

}  // namespace gpumem::trace_format
