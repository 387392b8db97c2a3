// CU_CHECK(call): the driver-API counterpart of check.h's CHECK, for the examples that call the
// driver directly: any error ends the program with a message naming the call, the file and line.
#pragma once

#include <cuda.h>

#include "common.h"

namespace examples {

inline void check_driver(CUresult status, const char* call, const char* file, int line) {
  if (status != CUDA_SUCCESS) {
    const char* name = "unknown error";
    cuGetErrorName(status, &name);
    fail("%s:%d: %s returned %s (%d)", file, line, call, name, static_cast<int>(status));
  }
}

}  // namespace examples

#define CU_CHECK(call) ::examples::check_driver((call), #call, __FILE__, __LINE__)
