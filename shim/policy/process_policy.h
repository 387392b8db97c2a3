// The process's memory policy, read from the environment once.
//
// Every part of the shim that needs the policy (the logger, the memory service) asks here, so the
// environment is parsed once and a bad environment is reported exactly once.
#pragma once

#include "policy/policy.h"

namespace gpumem::shim {

// Evaluated on first use (thread-safe; never during library load) from getenv. Each bad variable's
// error line has already been written to stderr, and the policy holds what applies instead (callers
// must not report them again). `policy` is empty only when the environment could not be read at all
// (no host memory): the shim then stays inert.
const PolicyResult& process_policy();

// True when the shim manages device memory: a policy whose mode is not `off`, not refused.
bool policy_is_active();

// True when a variable is invalid and GPUMEM_STRICT is set: every hook answers
// CUDA_ERROR_NOT_INITIALIZED, so the program fails at its first CUDA call.
bool policy_refuses_cuda();

// Fork: the child starts from the parent's environment, so the cached policy stays valid there.

}  // namespace gpumem::shim
