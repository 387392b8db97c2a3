// CALL(library, expression): every call of the library programs goes through it. It prints the call
// and the status it returned ("cublasCreate(&handle) -> 0"), and ends the program with status 1 at
// the first call that did not return success, naming it and its status on stderr. The programs run
// no device code of their own and print no results (the simulator computes none): their output is
// the list of calls and statuses, which a run under gpumem must repeat exactly.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace library_calls {

inline void report(const char* library, const char* call, long long status, long long success) {
  std::printf("%s: %s -> %lld\n", library, call, status);
  std::fflush(stdout);
  if (status != success) {
    std::fprintf(stderr, "%s: %s returned %lld\n", library, call, status);
    std::exit(1);
  }
}

}  // namespace library_calls

#define CALL(library, expression) \
  library_calls::report(library, #expression, static_cast<long long>(expression), 0)
