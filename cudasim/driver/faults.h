// Fault injection for tests of programs (and the gpumem shim) running on the simulator:
//
//   CUDASIM_FAULTS=NAME@N[+][=CODE][,NAME@N[+][=CODE]...]
//
// The Nth call (counted from 1, per rule) of the entry point NAME returns CODE (a CUresult number,
// CUDA_ERROR_OUT_OF_MEMORY when left out) without doing anything; with "+", that call and every one
// after it do. Only the entry points that carry CUDASIM_FAULT_POINT take part (the README lists
// them). A malformed value is reported on stderr and ignored. Not part of NVIDIA's API.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace cudasim {

// The code the next call of `entry_point` is made to fail with, or CUDA_SUCCESS (the common case:
// one relaxed load when CUDASIM_FAULTS is unset).
CUresult injected_fault(const char* entry_point) noexcept;

// How many calls injected_fault() has made fail so far (for the report).
std::uint64_t faults_injected() noexcept;

}  // namespace cudasim

#define CUDASIM_FAULT_POINT(name)                                                  \
  do {                                                                             \
    if (const CUresult injected = ::cudasim::injected_fault(name); injected != CUDA_SUCCESS) \
      return injected;                                                             \
  } while (0)
