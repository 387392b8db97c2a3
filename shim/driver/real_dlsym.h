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

extern "C" {
// Used by the exported dlsym's assembly entry (dlsym_trampoline.S); hidden.
// The real dlsym once resolved, else null. Written once, read without a lock (an aligned pointer).
extern void* gpumem_real_dlsym_pointer;
// Resolves (if needed) and returns the real dlsym; null when libc has none we recognise.
GPUMEM_UNINSTRUMENTED void* gpumem_resolve_real_dlsym();
}

namespace gpumem::shim {

using DlsymFunction = void* (*)(void* handle, const char* name);

// The real dlsym (GLIBC_2.34, else GLIBC_2.2.5). Null only in a process without a usable libc dl
// API.
DlsymFunction real_dlsym() noexcept;

// real_dlsym()(handle, name), or null when there is no real dlsym.
void* real_symbol(void* handle, const char* name) noexcept;

}  // namespace gpumem::shim
