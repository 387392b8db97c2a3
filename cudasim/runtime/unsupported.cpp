// The answer of every runtime entry point that is exported but not simulated (see unsupported.h).
#include "unsupported.h"

#include "entry_point.h"

#include <cstdio>

namespace cudasim::runtime {

cudaError_t unsupported_call(const char* name, bool* said) {
  return api_call([&] {
    if (!__atomic_exchange_n(said, true, __ATOMIC_RELAXED)) {
      std::fprintf(stderr, "cudasim: %s is not simulated; it returns cudaErrorNotSupported\n", name);
    }
    return cudaErrorNotSupported;
  });
}

}  // namespace cudasim::runtime
