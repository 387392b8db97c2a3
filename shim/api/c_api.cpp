// The public C API (include/gpumem.h).
#include "gpumem.h"
#include "hooks/hook_table.h"
#include "hooks/hooks.h"
#include "policy/process_policy.h"

#ifndef GPUMEM_VERSION
#error "GPUMEM_VERSION must be defined by the build"
#endif

extern "C" {

GPUMEM_EXPORT const char* gpumem_version(void) { return GPUMEM_VERSION; }

GPUMEM_EXPORT int gpumem_is_active(void) {
  return gpumem::shim::g_hook_reached.load(std::memory_order_relaxed) &&
                 gpumem::shim::policy_is_active()
             ? 1
             : 0;
}

}  // extern "C"
