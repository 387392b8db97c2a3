// libc's own dlsym, found through dlvsym, or the preloaded library's.
#include "driver/real_dlsym.h"

#include <dlfcn.h>

#include <atomic>

namespace gpumem::shim {
namespace {

// Invariant: each is null or set once (racing resolvers store the same value); read without a lock.
std::atomic<DlsymFunction> g_real_dlsym{nullptr};
std::atomic<NextSymbolFunction> g_next_symbol{nullptr};

GPUMEM_UNINSTRUMENTED DlsymFunction resolve_real_dlsym() noexcept {
  // RTLD_NEXT from here means "after this library": libc's definition, or the next interposer's.
  void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  return reinterpret_cast<DlsymFunction>(found);
}

}  // namespace

void use_preload_dlsym(DlsymFunction real, NextSymbolFunction next_symbol) noexcept {
  if (real != nullptr) g_real_dlsym.store(real, std::memory_order_release);
  if (next_symbol != nullptr) g_next_symbol.store(next_symbol, std::memory_order_release);
}

GPUMEM_UNINSTRUMENTED DlsymFunction real_dlsym() noexcept {
  DlsymFunction found = g_real_dlsym.load(std::memory_order_acquire);
  if (found != nullptr) return found;
  found = resolve_real_dlsym();
  if (found != nullptr) g_real_dlsym.store(found, std::memory_order_release);
  return found;
}

void* real_symbol(void* handle, const char* name) noexcept {
  if (handle == RTLD_NEXT) {
    if (const NextSymbolFunction next = g_next_symbol.load(std::memory_order_acquire)) return next(name);
  }
  const DlsymFunction dlsym_function = real_dlsym();
  return dlsym_function == nullptr ? nullptr : dlsym_function(handle, name);
}

}  // namespace gpumem::shim
