// libgpumem.so itself: the preloaded library, C with no dependency but libc, which loads the core at
// the first CUDA call (api/core_interface.h). Its entry points are written by preload_stubs.py.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/core_interface.h"
#include "gpumem.h"

#ifndef GPUMEM_VERSION
#error "GPUMEM_VERSION must be defined by the build"
#endif

#define GPUMEM_HIDDEN __attribute__((visibility("hidden")))
// A sanitizer's runtime looks up the functions it intercepts with dlsym(RTLD_NEXT, ...) while it
// starts, before its own state exists: code on that path must carry none of its instrumentation.
#if defined(__clang__)
#define GPUMEM_UNINSTRUMENTED __attribute__((disable_sanitizer_instrumentation))
#else
#define GPUMEM_UNINSTRUMENTED __attribute__((no_sanitize_thread, no_sanitize_address, no_sanitize_undefined))
#endif
#define GPUMEM_PUBLIC __attribute__((visibility("default")))

// The names of the exported stubs, in preload_stubs.py's order: every hook of entry_points.def in
// the file's order, then NVML's two memory queries.
#define GPUMEM_NAME_CALL(symbol)
#define GPUMEM_NAME_HOOK(symbol) #symbol,
#define GPUMEM_DRIVER_ENTRY(symbol, base, version, stream, use) GPUMEM_NAME_##use(symbol)
#define GPUMEM_DRIVER_HOOK_ONLY(symbol, function, base, version, stream) #symbol,
static const char* const kStubNames[] = {
#include "driver/entry_points.def"
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
};
enum { kStubs = sizeof kStubNames / sizeof kStubNames[0], kDlsymSlot = kStubs, kSlots = kStubs + 1 };

// Written by preload_stubs.py: each slot starts at gpumem_preload_lazy; the stubs, in order.
extern void* gpumem_preload_slots[];
extern void* const gpumem_preload_stub_addresses[];
void gpumem_preload_lazy(void);
// The real dlsym once resolved, else null (read by the exported dlsym's assembly).
GPUMEM_HIDDEN void* gpumem_preload_real_dlsym = NULL;

typedef void* (*dlsym_function)(void*, const char*);
typedef void (*any_function)(void);

// ISO C has no cast between object and function pointers; POSIX's dlsym guarantees they convert.
static void* address_of(any_function function) {
  void* address;
  memcpy(&address, &function, sizeof address);
  return address;
}
#define FUNCTION_AT(type, address) \
  __extension__({                  \
    type function_;                \
    void* address_ = (address);    \
    memcpy(&function_, &address_, sizeof function_); \
    function_;                     \
  })

// Where the core is: libgpumem-core.so beside this library.
static const char kCoreName[] = "libgpumem-core.so";

// Binding the core: 0 not yet, 1 under way (by `g_binder`), 2 done (slots final).
static atomic_int g_state = 0;
static atomic_ulong g_binder = 0;
static atomic_long g_binder_pid = 0;
static gpumem_core_api g_api;  // written before g_state becomes 2
static atomic_int g_api_ready = 0;

GPUMEM_HIDDEN GPUMEM_UNINSTRUMENTED void* gpumem_preload_resolve_real_dlsym(void) {
  void* found = __atomic_load_n(&gpumem_preload_real_dlsym, __ATOMIC_ACQUIRE);
  if (found != NULL) return found;
  // RTLD_NEXT from here means "after libgpumem.so": libc's definition, or the next interposer's.
  found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == NULL) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (found != NULL) __atomic_store_n(&gpumem_preload_real_dlsym, found, __ATOMIC_RELEASE);
  return found;
}

static void* real_dlsym(void* handle, const char* name) {
  const dlsym_function function = FUNCTION_AT(dlsym_function, gpumem_preload_resolve_real_dlsym());
  return function == NULL ? NULL : function(handle, name);
}

// The next definition of `name` after this library (what the hooks' RTLD_NEXT means). Called from
// here, so that the real dlsym sees this library as its caller.
__attribute__((noinline)) static void* next_symbol(const char* name) {
  const dlsym_function function = FUNCTION_AT(dlsym_function, gpumem_preload_resolve_real_dlsym());
  return function == NULL ? NULL : function(RTLD_NEXT, name);
}

// Whether a dlsym on a real handle looks up a name the shim hooks (then the core answers it).
GPUMEM_HIDDEN GPUMEM_UNINSTRUMENTED long gpumem_preload_is_hooked_name(void* handle, const char* name) {
  (void)handle;
  if (name == NULL || !((name[0] == 'c' && name[1] == 'u') || name[0] == 'n')) return 0;
  for (int i = 0; i < kStubs; ++i) {
    if (strcmp(name, kStubNames[i]) == 0) return 1;
  }
  return 0;
}

// Without the core the program runs as if gpumem were absent: each stub goes to the next definition
// of its name (found at its first call, since the program may load the driver after this library:
// RTLD_NEXT, else the loaded driver or NVML itself), and dlsym on a handle to the real dlsym. A name
// defined nowhere else answers as a driver that is not there.
static int g_core_missing = 0;  // written before g_state becomes 2

static int cuda_not_initialized(void) { return 3; }  // CUDA_ERROR_NOT_INITIALIZED
static int nvml_uninitialized(void) { return 1; }    // NVML_ERROR_UNINITIALIZED

static void* fallback_target(unsigned index) {
  if (index == kDlsymSlot) return address_of((any_function)&real_dlsym);
  const char* name = kStubNames[index];
  const int nvml = name[0] == 'n';
  void* found = next_symbol(name);
  if (found == NULL) {
    void* library = dlopen(nvml ? "libnvidia-ml.so.1" : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (library != NULL) {
      found = real_dlsym(library, name);
      dlclose(library);
    }
  }
  if (found == NULL || found == gpumem_preload_stub_addresses[index]) {
    return address_of(nvml ? (any_function)&nvml_uninitialized : (any_function)&cuda_not_initialized);
  }
  __atomic_store_n(&gpumem_preload_slots[index], found, __ATOMIC_RELEASE);  // found for good
  return found;
}

static int core_path(char* path, size_t size) {
  Dl_info self;
  if (dladdr(address_of((any_function)&gpumem_preload_resolve_real_dlsym), &self) == 0 || self.dli_fname == NULL) return -1;
  const char* slash = strrchr(self.dli_fname, '/');
  const size_t directory = slash == NULL ? 0 : (size_t)(slash - self.dli_fname) + 1;
  if (directory + sizeof kCoreName > size) return -1;
  memcpy(path, self.dli_fname, directory);
  memcpy(path + directory, kCoreName, sizeof kCoreName);
  return 0;
}

static void bind_core(void) {
  char path[4096];
  void* targets[kSlots];
  const char* why = "cannot find where libgpumem.so is";
  if (core_path(path, sizeof path) == 0) {
    void* core = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    gpumem_core_attach_function attach =
        core == NULL ? NULL : FUNCTION_AT(gpumem_core_attach_function, real_dlsym(core, "gpumem_core_attach"));
    const gpumem_preload_side side = {GPUMEM_VERSION, kStubs, gpumem_preload_stub_addresses, &real_dlsym,
                                      &next_symbol};
    gpumem_core_api api;
    if (attach != NULL && attach(&side, targets, &api) == 0) {
      g_api = api;
      atomic_store_explicit(&g_api_ready, 1, memory_order_release);
      for (int i = 0; i < kSlots; ++i) {
        __atomic_store_n(&gpumem_preload_slots[i], targets[i], __ATOMIC_RELEASE);
      }
      return;
    }
    why = core == NULL ? dlerror() : "it is of another gpumem version";
  }
  fprintf(stderr, "gpumem: cannot load %s (%s); the program runs without gpumem\n",
          core_path(path, sizeof path) == 0 ? path : kCoreName, why != NULL ? why : "unknown error");
  g_core_missing = 1;
}

// Where stub `index` goes: binds the core first (once, whichever thread comes first). A call that
// reaches a stub again on the binding thread itself (the loader running something that calls CUDA or
// dlsym) goes to the next definition of its name, as without gpumem.
GPUMEM_HIDDEN void* gpumem_preload_target(unsigned index) {
  const unsigned long self = (unsigned long)pthread_self();
  if (atomic_load_explicit(&g_state, memory_order_acquire) != 2) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_state, &expected, 1)) {
      atomic_store(&g_binder, self);
      atomic_store(&g_binder_pid, (long)getpid());
      bind_core();
      atomic_store_explicit(&g_state, 2, memory_order_release);
    } else if (atomic_load(&g_binder) == self && atomic_load(&g_binder_pid) == (long)getpid()) {
      return fallback_target(index);
    } else {
      while (atomic_load_explicit(&g_state, memory_order_acquire) != 2) {
        // A child forked while another thread of its parent was binding: that thread is not here.
        if (atomic_load(&g_binder_pid) != (long)getpid()) {
          atomic_store(&g_binder, self);
          atomic_store(&g_binder_pid, (long)getpid());
          bind_core();
          atomic_store_explicit(&g_state, 2, memory_order_release);
          break;
        }
        sched_yield();
      }
    }
  }
  return g_core_missing ? fallback_target(index) : __atomic_load_n(&gpumem_preload_slots[index], __ATOMIC_ACQUIRE);
}

// The C API (gpumem.h). Until the core is loaded nothing reached the shim, and each answers so
// without loading it.
static const gpumem_core_api* core_api(void) {
  return atomic_load_explicit(&g_api_ready, memory_order_acquire) ? &g_api : NULL;
}

GPUMEM_PUBLIC const char* gpumem_version(void) { return GPUMEM_VERSION; }

GPUMEM_PUBLIC int gpumem_is_active(void) {
  const gpumem_core_api* api = core_api();
  return api == NULL ? 0 : api->is_active();
}

GPUMEM_PUBLIC int gpumem_get_stats(int device, gpumem_stats* out) {
  const gpumem_core_api* api = core_api();
  return api == NULL ? -1 : api->get_stats(device, out);
}

GPUMEM_PUBLIC int gpumem_get_path_stats(int device, int path, gpumem_path_stats* out) {
  const gpumem_core_api* api = core_api();
  return api == NULL ? -1 : api->get_path_stats(device, path, out);
}

GPUMEM_PUBLIC long long gpumem_trim(int device) {
  const gpumem_core_api* api = core_api();
  return api == NULL ? -1 : api->trim(device);
}

GPUMEM_PUBLIC int gpumem_dump(int device, FILE* stream) {
  const gpumem_core_api* api = core_api();
  return api == NULL ? -1 : api->dump(device, stream);
}
