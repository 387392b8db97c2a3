// CHECK_CUDA(call): for test programs over the CUDA runtime, ends the program with status 3 and one
// line naming the call and its error when `call` does not return cudaSuccess.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t check_status = (call);                                               \
    if (check_status != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,                 \
                   cudaGetErrorName(check_status));                                        \
      std::exit(3);                                                                        \
    }                                                                                      \
  } while (0)
