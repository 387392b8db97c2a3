/* How the preloaded library (preload/) and the core (libgpumem-core.so, every other layer) meet.
 *
 * libgpumem.so itself is a small C library with no dependency but libc: preloading it into a process
 * that never uses CUDA costs almost nothing. It exports every hook as a stub that jumps through a
 * table; the first call of any of them loads the core with dlopen and asks it, through its one export
 * gpumem_core_attach, for the functions that fill the table. C, so that both sides read it. */
#ifndef GPUMEM_CORE_INTERFACE_H
#define GPUMEM_CORE_INTERFACE_H

#include <stdio.h>

#include "gpumem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The C API functions the preloaded library forwards to once the core is loaded (before that it
 * answers "nothing managed yet" itself, without loading the core). */
typedef struct gpumem_core_api {
  int (*is_active)(void);
  int (*get_stats)(int device, gpumem_stats* out);
  int (*get_path_stats)(int device, int path, gpumem_path_stats* out);
  long long (*trim)(int device);
  int (*dump)(int device, FILE* stream);
} gpumem_core_api;

/* What the preloaded library gives the core: its exported stubs, in the order preload_stubs.py
 * writes them (every hook of driver/entry_points.def in the file's order, then NVML's two memory
 * queries), which the core hands out as its hooks, so that the address a program gets for a hook is
 * the same whichever way it asked; its real dlsym (the next definition after it); and a look-up of
 * the next definition of a name after it (what RTLD_NEXT means for the hooks). */
typedef struct gpumem_preload_side {
  const char* version;            /* GPUMEM_VERSION of the preloaded library */
  unsigned stub_count;
  void* const* stubs;
  void* (*real_dlsym)(void* handle, const char* name);
  void* (*next_symbol)(const char* name);
} gpumem_preload_side;

/* Fills `targets` (stub_count + 1 entries: each stub's function in the core, then the core's dlsym for
 * a hooked name on a real handle) and `api`. Returns 0, or -1 when the preloaded library is of another
 * version or another list of hooks (then nothing is filled). */
int gpumem_core_attach(const gpumem_preload_side* preload, void** targets, gpumem_core_api* api);
typedef int (*gpumem_core_attach_function)(const gpumem_preload_side* preload, void** targets,
                                           gpumem_core_api* api);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_CORE_INTERFACE_H */
