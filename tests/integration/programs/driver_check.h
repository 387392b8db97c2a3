// CHECK_CU(call): for test programs over the CUDA driver API, ends the program with status 3 and one
// line naming the call and its error when `call` does not return CUDA_SUCCESS. cu_error_name(status):
// the error's name, "?" for a code the driver does not know.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

inline const char* cu_error_name(CUresult status) {
  const char* name = nullptr;
  return cuGetErrorName(status, &name) == CUDA_SUCCESS && name != nullptr ? name : "?";
}

#define CHECK_CU(call)                                                                              \
  do {                                                                                              \
    const CUresult check_status = (call);                                                           \
    if (check_status != CUDA_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cu_error_name(check_status)); \
      std::exit(3);                                                                                 \
    }                                                                                               \
  } while (0)
