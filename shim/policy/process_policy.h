// The process's memory policy, read from the environment once.
//
// Every part of the shim that needs the policy (the logger, the memory service) asks here, so the
// environment is parsed once and a bad environment is reported exactly once.
#pragma once

#include "policy/policy.h"

namespace gpumem::shim {

// Evaluated on first use (thread-safe; never during library load) from getenv. When the environment
// is invalid, `policy` is empty and the one error line has already been written to stderr (so
// callers only decide to go inert; they must not report it again).
const PolicyResult& process_policy();

// True when the environment is valid and the mode is not `off`: the shim manages device memory.
bool policy_is_active();

// True when the environment is invalid and GPUMEM_STRICT is set: every hook answers
// CUDA_ERROR_NOT_INITIALIZED, so the program fails at its first CUDA call.
bool policy_refuses_cuda();

// Fork: the child starts from the parent's environment, so the cached policy stays valid there.

}  // namespace gpumem::shim
