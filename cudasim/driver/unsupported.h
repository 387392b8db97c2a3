// What every driver entry point the simulator does not simulate does: the stubs generated from the
// toolkit's prototypes (cudasim/stubs/generate_stubs.py) all call unsupported_call.
#pragma once

#include "cuda_api.h"

namespace cudasim {

// CUDA_ERROR_NOT_INITIALIZED before a successful cuInit, else CUDA_ERROR_NOT_SUPPORTED; the first
// call of `name` in the process (`said` is its flag) says so in one line on stderr.
CUresult unsupported_call(const char* name, bool* said);

}  // namespace cudasim
