// What every runtime entry point the simulator does not simulate does: the stubs generated from the
// toolkit's prototypes (cudasim/stubs/generate_stubs.py) all call unsupported_call.
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// The runtime's initialisation error when it has one, else cudaErrorNotSupported (recorded as the
// thread's last error); the first call of `name` in the process (`said` is its flag) says so in one
// line on stderr.
cudaError_t unsupported_call(const char* name, bool* said);

}  // namespace cudasim::runtime
