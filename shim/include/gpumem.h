/* gpumem: the public C API of libgpumem.so.
 *
 * A program that may run without the shim calls these through dlsym, so it needs no link against
 * libgpumem.so and learns whether the shim is there (the symbols exist only when it is loaded):
 *
 *     #include <dlfcn.h>
 *     #include <gpumem.h>
 *     typedef long long (*trim_fn)(int);
 *     trim_fn trim = (trim_fn)dlsym(RTLD_DEFAULT, "gpumem_trim");
 *     if (trim != NULL) trim(0);                       // under gpumem: give back what is unused
 *
 * (link with -ldl on glibc older than 2.34). A program that always runs under the shim may link
 * libgpumem.so directly (`pkg-config --libs gpumem`). Every function is thread-safe, never throws
 * and never ends the process; -1 (or NULL) means "not available" as each one says. */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". Never null. */
const char* gpumem_version(void);

/* 1 when the shim manages this process's device memory: its environment is valid, its mode is not
 * "off", and the program's CUDA calls have reached its hooks (so it is 0 before the first CUDA call);
 * else 0. */
int gpumem_is_active(void);

/* What the shim's memory manager for one device holds, in bytes unless named otherwise. Fields that
 * a mode does not track are 0: platform mode tracks what it holds from the driver (in use and
 * reserved are the same there; allocations from the program's own pools and graph memory aside),
 * cuda_async mode the counters, bytes_limit and the bytes in use (the live blocks', now and at their
 * peak; what the driver's pool reserves is the driver's). Until version 1.0 the struct may grow
 * between releases: build against the gpumem.h of the library you load. */
typedef struct gpumem_stats {
  unsigned long long allocs;               /* successful allocations served */
  unsigned long long frees;                /* successful frees */
  unsigned long long failed_allocs;        /* allocations refused (out of memory, bad arguments) */
  unsigned long long passed_through;       /* requests handed to the driver untouched */
  unsigned long long bytes_limit;          /* the device's limit under the policy */
  unsigned long long bytes_in_use;
  unsigned long long peak_bytes_in_use;
  unsigned long long bytes_reserved;       /* held from the driver now */
  unsigned long long peak_bytes_reserved;
  unsigned long long largest_free_block;
  unsigned long long bytes_fenced;         /* freed, waiting until the device is done with them */
  unsigned long long regions;
  unsigned long long driver_allocs;        /* device allocations made through the driver (bfc: one per
                                              classic region, or per piece of virtual memory created
                                              and mapped; plus requests passed through) */
} gpumem_stats;

/* Fills *out for the shim's manager of `device` (the device's first managed context). Returns 0 on
 * success, -1 when out is null or the shim manages no context on that device (yet). */
int gpumem_get_stats(int device, gpumem_stats* out);

/* Where a request's memory came from. Every path but GPUMEM_PATH_GRAPH is charged to the device's
 * budget (the limit), which caps them all together. */
enum gpumem_path {
  GPUMEM_PATH_ARENA = 0,        /* bfc arena chunks (charged: the arena's regions) */
  GPUMEM_PATH_DRIVER = 1,       /* the driver's own allocation on the program's behalf (platform mode,
                                   or a request the arena passed on) */
  GPUMEM_PATH_ASYNC_POOL = 2,   /* cuda_async mode: the device's stream-ordered pool */
  GPUMEM_PATH_PROGRAM_POOL = 3, /* cuMemAllocFromPoolAsync from a pool the program created */
  GPUMEM_PATH_GRAPH = 4,        /* a stream-ordered allocation captured into a CUDA graph (the graph's
                                   memory, not charged) */
  GPUMEM_PATH_VMM = 5,          /* cuMemCreate physical allocations on the device */
  GPUMEM_PATH_MANAGED = 6,      /* cuMemAllocManaged, charged to the device current at the call */
  GPUMEM_PATH_ARRAYS = 7,       /* CUDA arrays and mipmapped arrays */
  GPUMEM_PATH_POOL_RESERVE = 8, /* what stream-ordered pools keep after their blocks were freed (charged
                                   until the pool gives it back; no allocations of its own) */
  GPUMEM_PATH_COUNT = 9
};

/* What one path served on one device since the process started, and what it holds of the budget. */
typedef struct gpumem_path_stats {
  unsigned long long allocs;        /* successful allocations (arena: requests it served) */
  unsigned long long bytes;         /* the bytes they asked for, summed */
  unsigned long long charged;       /* bytes charged to the device's budget now (arena: its regions) */
  unsigned long long peak_charged;  /* the most it held at once */
} gpumem_path_stats;

/* Fills *out for `path` (an enum gpumem_path) on `device`. Returns 0, or -1 when out is null, the
 * path is unknown or the shim has no budget for that device (it is inactive, or nothing there has
 * reached it yet). */
int gpumem_get_path_stats(int device, int path, gpumem_path_stats* out);

/* Gives back to the driver the memory the shim holds on `device` that is wholly unused: bfc mode
 * returns its free regions (synchronising the device's contexts first when freed blocks still wait
 * for the device, unless a CUDA graph is being captured). Returns the bytes given back (0 when
 * nothing could be), or -1 when the shim manages no live context on that device. The next request
 * that needs the memory takes it from the driver again, up to the limit. */
long long gpumem_trim(int device);

/* Writes to `stream` the state of the shim's memory on `device`, one block per live context, as the
 * out-of-memory report shows it (bfc: bins, in-use chunks by size, statistics, an occupancy bar).
 * Returns 0, or -1 when stream is null, nothing is managed on that device, or the write failed. */
int gpumem_dump(int device, FILE* stream);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_H */
