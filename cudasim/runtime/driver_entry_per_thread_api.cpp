// The per-thread-default-stream forms of the driver entry-point queries (cudaGetDriverEntryPoint_ptsz,
// cudaGetDriverEntryPointByVersion_ptsz): there cudaEnableDefault selects the driver's per-thread
// (_ptds/_ptsz) entry points. With the macro defined the toolkit header renames the declarations,
// so each definition below is checked against its signature.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1

#include "api_headers.h"
#include "driver_entry.h"
#include "entry_point.h"

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return api_call(
      [&] { return driver_entry_point(symbol, funcPtr, kRuntimeCudaVersion, flags, true, driverStatus); });
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return api_call([&] { return driver_entry_point(symbol, funcPtr, cudaVersion, flags, true, driverStatus); });
}

}  // extern "C"
