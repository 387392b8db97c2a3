// The runtime's library management (cudaLibraryLoadData, cudaLibraryGetKernel, ...), cudaGetKernel,
// cudaGetFuncBySymbol, cudaKernelSetAttributeForDevice and cudaFuncGetName, over the driver's context-independent libraries (kernels.cpp there): the
// runtime's library and kernel handles are the driver's, and its JIT and library options are the
// driver's, value for value.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

using namespace cudasim::runtime;

static_assert(static_cast<int>(cudaJitMaxRegisters) == static_cast<int>(CU_JIT_MAX_REGISTERS) &&
              static_cast<int>(cudaJitLogVerbose) == static_cast<int>(CU_JIT_LOG_VERBOSE) &&
              static_cast<int>(cudaLibraryBinaryIsPreserved) == static_cast<int>(CU_LIBRARY_BINARY_IS_PRESERVED));

namespace {

// The driver's answer, a CUdeviceptr, handed back as a pointer; a NULL dptr or bytes stays NULL for
// the driver, which checks them.
template <auto Query>
cudaError_t library_variable(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  return api_call([&] {
    return with_context([&] {
      CUdeviceptr address = 0;
      const cudaError_t status = call_driver<Query>(dptr != nullptr ? &address : nullptr, bytes, library, name);
      if (status == cudaSuccess && dptr != nullptr) *dptr = reinterpret_cast<void*>(address);
      return status;
    });
  });
}

}  // namespace

extern "C" {

cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption* jitOptions,
                                void** jitOptionsValues, unsigned int numJitOptions,
                                cudaLibraryOption* libraryOptions, void** libraryOptionValues,
                                unsigned int numLibraryOptions) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuLibraryLoadData>(
          library, code, reinterpret_cast<CUjit_option*>(jitOptions), jitOptionsValues, numJitOptions,
          reinterpret_cast<CUlibraryOption*>(libraryOptions), libraryOptionValues, numLibraryOptions);
    });
  });
}

cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* fileName, cudaJitOption* jitOptions,
                                    void** jitOptionsValues, unsigned int numJitOptions,
                                    cudaLibraryOption* libraryOptions, void** libraryOptionValues,
                                    unsigned int numLibraryOptions) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuLibraryLoadFromFile>(
          library, fileName, reinterpret_cast<CUjit_option*>(jitOptions), jitOptionsValues, numJitOptions,
          reinterpret_cast<CUlibraryOption*>(libraryOptions), libraryOptionValues, numLibraryOptions);
    });
  });
}

cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuLibraryUnload>(library); }); });
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library, const char* name) {
  return api_call([&] {
    return with_context([&] { return call_driver<&DriverTable::cuLibraryGetKernel>(pKernel, library, name); });
  });
}

cudaError_t cudaLibraryGetKernelCount(unsigned int* count, cudaLibrary_t lib) {
  return api_call([&] {
    return with_context([&] { return call_driver<&DriverTable::cuLibraryGetKernelCount>(count, lib); });
  });
}

cudaError_t cudaLibraryEnumerateKernels(cudaKernel_t* kernels, unsigned int numKernels, cudaLibrary_t lib) {
  return api_call([&] {
    return with_context([&] { return call_driver<&DriverTable::cuLibraryEnumerateKernels>(kernels, numKernels, lib); });
  });
}

cudaError_t cudaLibraryGetUnifiedFunction(void** fptr, cudaLibrary_t library, const char* symbol) {
  return api_call([&] {
    return with_context([&] { return call_driver<&DriverTable::cuLibraryGetUnifiedFunction>(fptr, library, symbol); });
  });
}

cudaError_t cudaLibraryGetGlobal(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  return library_variable<&DriverTable::cuLibraryGetGlobal>(dptr, bytes, library, name);
}

cudaError_t cudaLibraryGetManaged(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  return library_variable<&DriverTable::cuLibraryGetManaged>(dptr, bytes, library, name);
}

// cudaFuncAttribute and CUfunction_attribute number the settable attributes alike.
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, cudaFuncAttribute attr, int value, int device) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuKernelSetAttribute>(static_cast<CUfunction_attribute>(attr), value, kernel,
                                                             static_cast<CUdevice>(device));
    });
  });
}

// As cuKernelGetFunction: the kernel handle, taken wherever a function is, in every context.
cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  return api_call([&] {
    if (functionPtr == nullptr) return cudaErrorInvalidValue;
    if (symbolPtr == nullptr) return cudaErrorInvalidDeviceFunction;
    return with_context([&] {
      CUkernel kernel = nullptr;
      if (cudaError_t status = kernel_of(symbolPtr, &kernel); status != cudaSuccess) return status;
      *functionPtr = reinterpret_cast<cudaFunction_t>(kernel);
      return cudaSuccess;
    });
  });
}

// The kernel nvcc's host code registered for a host stub (its fat binary loaded on first use).
cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  return api_call([&] {
    if (kernelPtr == nullptr) return cudaErrorInvalidValue;
    if (entryFuncAddr == nullptr) return cudaErrorInvalidDeviceFunction;
    return with_context([&] { return kernel_of(entryFuncAddr, reinterpret_cast<CUkernel*>(kernelPtr)); });
  });
}

// The device-side (mangled) name of a registered host stub's kernel.
cudaError_t cudaFuncGetName(const char** name, const void* func) {
  return api_call([&] {
    if (name == nullptr) return cudaErrorInvalidValue;
    if (func == nullptr) return cudaErrorInvalidDeviceFunction;
    return with_context([&] {
      CUkernel kernel = nullptr;
      if (cudaError_t status = kernel_of(func, &kernel); status != cudaSuccess) return status;
      return call_driver<&DriverTable::cuKernelGetName>(name, kernel);
    });
  });
}

}  // extern "C"
