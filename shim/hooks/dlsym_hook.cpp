// dlsym on a real handle for a name the shim hooks (every other look-up goes straight to the real
// dlsym: see preload/preload_stubs.py, which writes the exported dlsym).
//
// The CUDA runtimes (shared and static) dlopen the driver and look its entry points up by handle:
// cuGetProcAddress_v2 first, or every name when the driver's cuGetProcAddress fails (NVIDIA's
// stub). When such a lookup finds a hooked entry point in the driver, the answer is our hook
// instead.
#include <dlfcn.h>

#include "driver/driver_object.h"
#include "hooks/hook_table.h"
#include "base/log.h"
#include "driver/real_dlsym.h"
#include "driver/resolution_guard.h"

namespace gpumem::shim {

void* dlsym_with_handle(void* handle, const char* name) noexcept {
  void* found = real_symbol(handle, name);
  if (found == nullptr || name == nullptr || ResolutionGuard::active()) return found;
  if (is_nvml_hooked_name(name)) return nvml_hook_for(handle, name, found);
  const HookEntry* hook = find_hook_by_name(name);
  if (hook == nullptr || found == hook->hook) return found;
  bool adopted = false;
  {
    const ResolutionGuard guard;  // our probes below call the real dlsym and dladdr
    adopted = adopt_driver_object(object_containing(found));
  }
  dlerror();  // the program's lookup succeeded: leave no error from our probes behind
  if (!adopted) return found;
  log::at(gpumem::LogLevel::debug, "dlsym(\"{}\") -> hook in libgpumem.so", name);
  return hook->hook;
}

}  // namespace gpumem::shim
