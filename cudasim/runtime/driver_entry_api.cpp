// cudaGetDriverEntryPoint / cudaGetDriverEntryPointByVersion: the driver's cuGetProcAddress answers
// (the runtime adds the version and flag rules of cuda_runtime_api.h). A symbol the driver does not
// have, or not at that version, is a success with a NULL function and the reason in driverStatus.
#include "driver_entry.h"

#include "driver_table.h"
#include "entry_point.h"

namespace cudasim::runtime {

cudaError_t driver_entry_point(const char* symbol, void** function, unsigned int cuda_version,
                               unsigned long long flags, bool per_thread_default,
                               cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr) return cudaErrorInvalidValue;
  cuuint64_t driver_flags = 0;
  switch (flags) {
    case cudaEnableDefault:
      driver_flags = per_thread_default ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
      break;
    case cudaEnableLegacyStream: driver_flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM; break;
    case cudaEnablePerThreadDefaultStream: driver_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM; break;
    default: return cudaErrorInvalidValue;
  }
  *function = nullptr;
  // "If the specified CUDA version is greater than the driver version": cudaErrorInvalidValue.
  if (cuda_version > static_cast<unsigned int>(loaded_driver_version())) return cudaErrorInvalidValue;
  const DriverTable& table = driver();
  const int version = static_cast<int>(cuda_version);
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult result = CUDA_ERROR_NOT_FOUND;
  if (table.get_proc_address_v2 != nullptr) {
    result = table.get_proc_address_v2(symbol, function, version, driver_flags, &found);
  } else if (table.get_proc_address_v1 != nullptr) {
    result = table.get_proc_address_v1(symbol, function, version, driver_flags);
    found = result == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  if (result != CUDA_SUCCESS && result != CUDA_ERROR_NOT_FOUND) return translate(result);
  if (result != CUDA_SUCCESS) *function = nullptr;
  if (status != nullptr) {
    switch (found) {
      case CU_GET_PROC_ADDRESS_SUCCESS: *status = cudaDriverEntryPointSuccess; break;
      case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: *status = cudaDriverEntryPointVersionNotSufficent; break;
      default: *status = cudaDriverEntryPointSymbolNotFound; break;
    }
  }
  return cudaSuccess;
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return api_call(
      [&] { return driver_entry_point(symbol, funcPtr, kRuntimeCudaVersion, flags, false, driverStatus); });
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return api_call([&] { return driver_entry_point(symbol, funcPtr, cudaVersion, flags, false, driverStatus); });
}

}  // extern "C"
