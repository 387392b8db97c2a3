// GPUMEM_TRACE: every allocation, free and refusal the memory managers see, as a CSV file in RMM's
// replay-log format (Thread,Time,Action,Pointer,Size,Stream) with four columns of gpumem's own
// after it (Device,Reserved,Limit,Mode), which readers that pick RMM's columns by name ignore.
//
// Model: events are appended as fixed-size binary records to an in-memory buffer under one lock and
// turned into text only when the buffer fills, at exit and when a fatal signal arrives, so an event
// costs a clock read, a hash-map update (the size of each live block, so a free row carries it) and
// a copy. Formatting is allocation-free and async-signal-safe. The file is opened at the first event
// (non-blocking, no symbolic links, regular files only, close-on-exec).
//
// Columns: Thread (kernel thread id), Time (seconds since the epoch, microseconds), Action
// (`allocate`, `free`, `allocate failure`), Pointer (hex; 0x0 for a refusal), Size (bytes asked for;
// on a free, those of the block freed), Stream (0 for synchronous calls, the handle otherwise; 2 is
// the per-thread default stream), Device (ordinal), Reserved (bytes the device's manager held from
// the driver after the event; empty when its mode does not track them), Limit (the device's limit),
// Mode (on a device's first row: `bfc preallocated`, `bfc growth`, `platform` or `cuda_async`, the
// policy's; empty on the others).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpumem::shim::observe {

struct TraceEvent {
  std::uintptr_t pointer = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;
  int device = 0;
  std::size_t reserved = 0;  // MemoryManager::kUnknownBytes: not tracked
  std::size_t limit = 0;
};

// The process's trace, or null when GPUMEM_TRACE is unset or its file cannot be opened (said once,
// at error level). Cheap after the first call.
class TraceLog;
TraceLog* trace_log() noexcept;

// Each call is thread-safe and never throws; a record that cannot be kept (no host memory) is dropped.
void trace_allocate(TraceLog& log, const TraceEvent& event) noexcept;
void trace_refusal(TraceLog& log, const TraceEvent& event) noexcept;
// A free about to be made: records it now (before the address can be handed out again) with the
// size the trace saw allocated, and returns a ticket for trace_free_failed (0: nothing recorded,
// the block was not traced).
std::uint64_t trace_free(TraceLog& log, std::uintptr_t pointer, std::uintptr_t stream, int device,
                         std::size_t reserved, std::size_t limit) noexcept;
// The free of `ticket` failed: its row is withdrawn (when still buffered) and the block stays live.
void trace_free_failed(TraceLog& log, std::uint64_t ticket) noexcept;

// Writes out what is buffered (at exit). Safe to call when no trace exists.
void flush_trace() noexcept;

}  // namespace gpumem::shim::observe
