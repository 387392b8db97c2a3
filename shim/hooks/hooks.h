// Declarations of the exported hooks that cuda.h does not declare under these names (the _ptsz
// variants are only declared there for per-thread-stream builds; the old 4-argument
// cuGetProcAddress is hidden behind a macro), plus the export attribute.
#pragma once

#include <cuda.h>

#define GPUMEM_EXPORT __attribute__((visibility("default")))

extern "C" {
// The exported symbol "cuGetProcAddress" (the CUDA 11.3 signature; cuda.h maps the name to _v2).
CUresult CUDAAPI cuGetProcAddress_v11030_hook(const char* symbol, void** pfn, int cuda_version,
                                              cuuint64_t flags) __asm__("cuGetProcAddress");
// The exported symbol "cuDevicePrimaryCtxRelease" (pre-11.0 name; cuda.h maps the name to _v2).
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v7000_hook(CUdevice dev) __asm__("cuDevicePrimaryCtxRelease");
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream stream);
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph);
}
