// cudaGetErrorName / cudaGetErrorString with NVIDIA's texts for every code this runtime can return.
#include <array>

#include "api_headers.h"

namespace {

// Invariant: one row per code; `name` is the enumerator's spelling, `text` NVIDIA's message.
struct ErrorDescription {
  cudaError_t code;
  const char* text;
  const char* name;
};

#define CUDASIM_RUNTIME_ERROR(code, text) ErrorDescription{code, text, #code}

constexpr std::array kErrorDescriptions{
    CUDASIM_RUNTIME_ERROR(cudaSuccess, "no error"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidValue, "invalid argument"),
    CUDASIM_RUNTIME_ERROR(cudaErrorMemoryAllocation, "out of memory"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInitializationError, "initialization error"),
    CUDASIM_RUNTIME_ERROR(cudaErrorCudartUnloading, "driver shutting down"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidSymbol, "invalid device symbol"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStubLibrary, "CUDA driver is a stub library"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    CUDASIM_RUNTIME_ERROR(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"),
    CUDASIM_RUNTIME_ERROR(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidDevice, "invalid device ordinal"),
    CUDASIM_RUNTIME_ERROR(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
    CUDASIM_RUNTIME_ERROR(cudaErrorDeviceUninitialized, "invalid device context"),
    CUDASIM_RUNTIME_ERROR(cudaErrorDeviceAlreadyInUse, "exclusive-thread device already in use by a different thread"),
    CUDASIM_RUNTIME_ERROR(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    CUDASIM_RUNTIME_ERROR(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    CUDASIM_RUNTIME_ERROR(cudaErrorSymbolNotFound, "named symbol not found"),
    CUDASIM_RUNTIME_ERROR(cudaErrorNotReady, "device not ready"),
    CUDASIM_RUNTIME_ERROR(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    CUDASIM_RUNTIME_ERROR(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    CUDASIM_RUNTIME_ERROR(cudaErrorContextIsDestroyed, "context is destroyed"),
    CUDASIM_RUNTIME_ERROR(cudaErrorAssert, "device-side assert triggered"),
    CUDASIM_RUNTIME_ERROR(cudaErrorHardwareStackError, "hardware stack error"),
    CUDASIM_RUNTIME_ERROR(cudaErrorIllegalInstruction, "an illegal instruction was encountered"),
    CUDASIM_RUNTIME_ERROR(cudaErrorMisalignedAddress, "misaligned address"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidPc, "invalid program counter"),
    CUDASIM_RUNTIME_ERROR(cudaErrorLaunchFailure, "unspecified launch failure"),
    CUDASIM_RUNTIME_ERROR(cudaErrorNotPermitted, "operation not permitted"),
    CUDASIM_RUNTIME_ERROR(cudaErrorNotSupported, "operation not supported"),
    CUDASIM_RUNTIME_ERROR(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed"),
    CUDASIM_RUNTIME_ERROR(cudaErrorAlreadyMapped, "resource already mapped"),
    CUDASIM_RUNTIME_ERROR(cudaErrorTooManyPeers, "peer mapping resources exhausted"),
    CUDASIM_RUNTIME_ERROR(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination"),
    CUDASIM_RUNTIME_ERROR(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream"),
    CUDASIM_RUNTIME_ERROR(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread"),
    CUDASIM_RUNTIME_ERROR(cudaErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    CUDASIM_RUNTIME_ERROR(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidDeviceFunction, "invalid device function"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    CUDASIM_RUNTIME_ERROR(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"),
    CUDASIM_RUNTIME_ERROR(cudaErrorFileNotFound, "file not found"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidPtx, "a PTX JIT compilation failed"),
    CUDASIM_RUNTIME_ERROR(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch"),
    CUDASIM_RUNTIME_ERROR(cudaErrorInvalidClusterSize, "a kernel launch error has occurred due to cluster misconfiguration"),
    CUDASIM_RUNTIME_ERROR(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices"),
    CUDASIM_RUNTIME_ERROR(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
    CUDASIM_RUNTIME_ERROR(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
    CUDASIM_RUNTIME_ERROR(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    CUDASIM_RUNTIME_ERROR(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    CUDASIM_RUNTIME_ERROR(cudaErrorUnknown, "unknown error"),
};

#undef CUDASIM_RUNTIME_ERROR

constexpr const char* kUnrecognized = "unrecognized error code";

const ErrorDescription* describe(cudaError_t error) {
  for (const ErrorDescription& row : kErrorDescriptions) {
    if (row.code == error) return &row;
  }
  return nullptr;
}

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorDescription* row = describe(error);
  return row != nullptr ? row->name : kUnrecognized;
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorDescription* row = describe(error);
  return row != nullptr ? row->text : kUnrecognized;
}

}  // extern "C"
