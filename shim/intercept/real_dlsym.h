// libc's own dlsym, found with dlvsym so the shim never calls the dlsym it exports itself.
#pragma once

extern "C" {
// Used by the exported dlsym's assembly entry (dlsym_trampoline.S); hidden.
// The real dlsym once resolved, else null. Written once, read without a lock (an aligned pointer).
extern void* gpumem_real_dlsym_pointer;
// Resolves (if needed) and returns the real dlsym; null when libc has none we recognise.
void* gpumem_resolve_real_dlsym();
}

namespace gpumem::shim {

using DlsymFunction = void* (*)(void* handle, const char* name);

// The real dlsym (GLIBC_2.34, else GLIBC_2.2.5). Null only in a process without a usable libc dl
// API.
DlsymFunction real_dlsym() noexcept;

// real_dlsym()(handle, name), or null when there is no real dlsym.
void* real_symbol(void* handle, const char* name) noexcept;

}  // namespace gpumem::shim
