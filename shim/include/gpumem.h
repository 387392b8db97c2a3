/* gpumem: the public C API of libgpumem.so.
 *
 * A program may call these through dlsym(RTLD_DEFAULT, "gpumem_...") to learn whether it runs under
 * the shim (the symbols exist only when libgpumem.so is loaded), or link libgpumem.so directly. */
#ifndef GPUMEM_H
#define GPUMEM_H

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
 * cuda_async mode only the counters and bytes_limit. Until version 1.0 the struct may grow between
 * releases: build against the gpumem.h of the library you load. */
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
                                              region, plus requests passed through) */
} gpumem_stats;

/* Fills *out for the shim's manager of `device` (the device's first managed context). Returns 0 on
 * success, -1 when out is null or the shim manages no context on that device (yet). */
int gpumem_get_stats(int device, gpumem_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_H */
