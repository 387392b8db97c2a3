// The one status type of the allocation core. The core never throws and never exits; the shim maps a
// Status to a CUDA error code at the hook boundary, and nowhere else.
#pragma once

#include <cstdint>

namespace gpumem {

enum class Status : std::uint8_t {
  ok,
  zero_size,       // a zero-byte request: refused explicitly, the caller decides what it means
  out_of_memory,   // nothing fits under the limit, even after growth and garbage collection
  fences_pending,  // no fit now, but fenced (possibly in-use) chunks exist: resolve fences, then retry
  not_owned,       // the pointer is not the start of a chunk this arena handed out
  double_free,     // the pointer names a chunk that is already free
  invalid_argument,
};

// A short, stable, lower-case name ("ok", "out_of_memory", ...) for logs and tests.
const char* to_string(Status status) noexcept;

}  // namespace gpumem
