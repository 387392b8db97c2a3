#include "driver_table.h"

#include <dlfcn.h>
#include <pthread.h>

namespace cudasim::runtime {
namespace {

// The CUDA version this runtime asks the driver's entry points for (CUDART_VERSION of the headers).
constexpr int kRequestedCudaVersion = 13000;

using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

// Invariant: written only by load_driver(), under pthread_once; read-only afterwards.
struct LoadedDriver {
  DriverTable table;
  cudaError_t status = cudaErrorInsufficientDriver;
  int version = 0;
};

// Constant-initialised and trivially destructible: no constructor or destructor runs at load or
// exit, and (like NVIDIA's) the static archive needs only libc, libdl and libpthread.
constinit LoadedDriver loaded_driver{};
pthread_once_t load_once = PTHREAD_ONCE_INIT;

LoadedDriver& loaded() { return loaded_driver; }

// One cuGetProcAddress request, through whichever of the two exported forms the driver has.
CUresult request_entry(GetProcAddressV2 v2, GetProcAddressV1 v1, const char* name, void** out) {
  *out = nullptr;
  if (v2 != nullptr) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return v2(name, out, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found);
  }
  return v1(name, out, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT);
}

void load_driver() {
  LoadedDriver& state = loaded_driver;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return;  // no driver installed: cudaErrorInsufficientDriver
  auto v2 = reinterpret_cast<GetProcAddressV2>(dlsym(library, "cuGetProcAddress_v2"));
  GetProcAddressV1 v1 = nullptr;
  if (v2 == nullptr) v1 = reinterpret_cast<GetProcAddressV1>(dlsym(library, "cuGetProcAddress"));
  if (v2 == nullptr && v1 == nullptr) return;
  state.table.get_proc_address_v2 = v2;
  state.table.get_proc_address_v1 = v1;

  bool stub = false;
#define CUDASIM_RUNTIME_RESOLVE_ENTRY(name, version)                                  \
  {                                                                                   \
    void* entry = nullptr;                                                            \
    if (request_entry(v2, v1, #name, &entry) == CUDA_ERROR_STUB_LIBRARY) stub = true; \
    state.table.name = reinterpret_cast<decltype(state.table.name)>(entry);           \
  }
  CUDASIM_RUNTIME_DRIVER_ENTRIES(CUDASIM_RUNTIME_RESOLVE_ENTRY)
#undef CUDASIM_RUNTIME_RESOLVE_ENTRY

  if (state.table.cuInit == nullptr || state.table.cuDriverGetVersion == nullptr) {
    state.status = stub ? cudaErrorStubLibrary : cudaErrorInsufficientDriver;
    return;
  }
  const CUresult init = state.table.cuInit(0);
  if (init != CUDA_SUCCESS) {
    state.status = translate(init);
    return;
  }
  if (state.table.cuDriverGetVersion(&state.version) != CUDA_SUCCESS) state.version = 0;
  if (state.version < kRequestedCudaVersion) {
    state.status = cudaErrorInsufficientDriver;
    return;
  }
  state.status = cudaSuccess;
}

}  // namespace

cudaError_t driver_status() {
  pthread_once(&load_once, load_driver);
  return loaded().status;
}

const DriverTable& driver() { return loaded().table; }

int loaded_driver_version() {
  driver_status();
  return loaded().version;
}

cudaError_t translate(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_STUB_LIBRARY: return cudaErrorStubLibrary;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return cudaErrorDevicesUnavailable;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_CONTEXT_ALREADY_IN_USE: return cudaErrorDeviceAlreadyInUse;
    case CUDA_ERROR_OPERATING_SYSTEM: return cudaErrorOperatingSystem;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_INVALID_IMAGE: return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return cudaErrorNoKernelImageForDevice;
    case CUDA_ERROR_FILE_NOT_FOUND: return cudaErrorFileNotFound;
    case CUDA_ERROR_INVALID_PTX: return cudaErrorInvalidPtx;
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: return cudaErrorCooperativeLaunchTooLarge;
    case CUDA_ERROR_INVALID_CLUSTER_SIZE: return cudaErrorInvalidClusterSize;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return cudaErrorPeerAccessUnsupported;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return cudaErrorPeerAccessAlreadyEnabled;
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return cudaErrorPeerAccessNotEnabled;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_LAUNCH_TIMEOUT: return cudaErrorLaunchTimeout;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_ASSERT: return cudaErrorAssert;
    case CUDA_ERROR_HARDWARE_STACK_ERROR: return cudaErrorHardwareStackError;
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: return cudaErrorIllegalInstruction;
    case CUDA_ERROR_MISALIGNED_ADDRESS: return cudaErrorMisalignedAddress;
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: return cudaErrorInvalidAddressSpace;
    case CUDA_ERROR_INVALID_PC: return cudaErrorInvalidPc;
    case CUDA_ERROR_LAUNCH_FAILED: return cudaErrorLaunchFailure;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_UNSUPPORTED_LIMIT: return cudaErrorUnsupportedLimit;
    case CUDA_ERROR_MAP_FAILED: return cudaErrorMapBufferObjectFailed;
    case CUDA_ERROR_ALREADY_MAPPED: return cudaErrorAlreadyMapped;
    case CUDA_ERROR_TOO_MANY_PEERS: return cudaErrorTooManyPeers;
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return cudaErrorSystemDriverMismatch;
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: return cudaErrorCompatNotSupportedOnDevice;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: return cudaErrorGraphExecUpdateFailure;
    default: return cudaErrorUnknown;
  }
}

}  // namespace cudasim::runtime
