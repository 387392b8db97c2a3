// The answer of every driver entry point that is exported but not simulated (see unsupported.h).
#include "unsupported.h"

#include "state.h"

#include <cstdio>

namespace cudasim {

CUresult unsupported_call(const char* name, bool* said) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  }
  if (!__atomic_exchange_n(said, true, __ATOMIC_RELAXED)) {
    std::fprintf(stderr, "cudasim: %s is not simulated; it returns CUDA_ERROR_NOT_SUPPORTED\n", name);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace cudasim
