// Include the toolkit's cuda.h the way the driver itself sees it: with the internal API-version
// switch, every exported name (v1, _v2, _ptds, _ptsz) is declared under its real spelling and the
// redirecting macros (cuMemAlloc -> cuMemAlloc_v2) are gone, so each definition here is checked
// against NVIDIA's own prototype.
#pragma once

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cudaProfiler.h>

// Exported from the shared object; everything else is hidden (see libcuda.map).
#define CUDASIM_EXPORT extern "C" __attribute__((visibility("default")))
