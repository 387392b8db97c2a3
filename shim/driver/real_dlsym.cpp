// libc's own dlsym, found through dlvsym.
#include "driver/real_dlsym.h"

#include <dlfcn.h>

#include <atomic>

extern "C" {

// Invariant: null or libc's dlsym; set at most once per value (racing resolvers store the same
// one).
void* gpumem_real_dlsym_pointer = nullptr;

GPUMEM_UNINSTRUMENTED void* gpumem_resolve_real_dlsym() {
  void* found = __atomic_load_n(&gpumem_real_dlsym_pointer, __ATOMIC_ACQUIRE);
  if (found != nullptr) return found;
  // RTLD_NEXT from here means "after libgpumem.so": libc's definition, or the next interposer's.
  found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (found != nullptr) __atomic_store_n(&gpumem_real_dlsym_pointer, found, __ATOMIC_RELEASE);
  return found;
}
}

namespace gpumem::shim {

DlsymFunction real_dlsym() noexcept {
  return reinterpret_cast<DlsymFunction>(gpumem_resolve_real_dlsym());
}

void* real_symbol(void* handle, const char* name) noexcept {
  const DlsymFunction dlsym_function = real_dlsym();
  return dlsym_function == nullptr ? nullptr : dlsym_function(handle, name);
}

}  // namespace gpumem::shim
