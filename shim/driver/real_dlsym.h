// libc's own dlsym, found with dlvsym so the shim never calls the dlsym it exports itself.
#pragma once

// A sanitizer's runtime looks up the functions it intercepts with dlsym(RTLD_NEXT, ...) while it
// starts, before its own state exists: code on that path must carry none of its instrumentation
// (ThreadSanitizer's function-entry hook would crash there).
#if defined(__clang__)
#define GPUMEM_UNINSTRUMENTED __attribute__((disable_sanitizer_instrumentation))
#elif defined(__GNUC__)
#define GPUMEM_UNINSTRUMENTED __attribute__((no_sanitize_thread, no_sanitize_address, no_sanitize_undefined))
#else
#define GPUMEM_UNINSTRUMENTED
#endif

namespace gpumem::shim {

using DlsymFunction = void* (*)(void* handle, const char* name);
using NextSymbolFunction = void* (*)(const char* name);

// Behind the preloaded library (api/core_interface.h): its real dlsym, and its look-up of the next
// definition of a name after it, which is what RTLD_NEXT must mean for the hooks (from a library loaded
// with dlopen, RTLD_NEXT would search only that library's own dependencies).
void use_preload_dlsym(DlsymFunction real, NextSymbolFunction next_symbol) noexcept;

// The real dlsym (the preloaded library's, else GLIBC_2.34's, else GLIBC_2.2.5's). Null only in a
// process without a usable libc dl API.
GPUMEM_UNINSTRUMENTED DlsymFunction real_dlsym() noexcept;

// real_dlsym()(handle, name) (RTLD_NEXT: the next definition after the preloaded library), or null
// when there is no real dlsym.
void* real_symbol(void* handle, const char* name) noexcept;

}  // namespace gpumem::shim
