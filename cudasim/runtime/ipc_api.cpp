// Legacy interprocess memory and event sharing: cudaIpcGetMemHandle, cudaIpcOpenMemHandle,
// cudaIpcCloseMemHandle, cudaIpcGetEventHandle, cudaIpcOpenEventHandle, each the driver's call with
// the runtime's handle type (the same 64 bytes) and error codes.
#include <cstring>

#include "context.h"
#include "driver_table.h"
#include "entry_point.h"

namespace cudasim::runtime {
namespace {

CUdeviceptr device_address(const void* ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle));

cudaError_t export_memory(cudaIpcMemHandle_t* handle, void* ptr) {
  if (handle == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUipcMemHandle exported{};
    const cudaError_t result = call_driver<&DriverTable::cuIpcGetMemHandle>(&exported, device_address(ptr));
    if (result == cudaSuccess) std::memcpy(handle, &exported, sizeof exported);
    return result;
  });
}

cudaError_t open_memory(void** ptr, const cudaIpcMemHandle_t& handle, unsigned int flags) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUipcMemHandle opened{};
    std::memcpy(&opened, &handle, sizeof opened);
    CUdeviceptr address = 0;
    // cudaIpcMemLazyEnablePeerAccess is the driver's CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
    const cudaError_t result = call_driver<&DriverTable::cuIpcOpenMemHandle>(&address, opened, flags);
    if (result == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
    return result;
  });
}

cudaError_t close_memory(void* ptr) {
  return with_context([&] { return call_driver<&DriverTable::cuIpcCloseMemHandle>(device_address(ptr)); });
}

static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CUipcEventHandle));

cudaError_t export_event(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  if (handle == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUipcEventHandle exported{};
    const cudaError_t result = call_driver<&DriverTable::cuIpcGetEventHandle>(&exported, event);
    if (result == cudaSuccess) std::memcpy(handle, &exported, sizeof exported);
    return result;
  });
}

cudaError_t open_event(cudaEvent_t* event, const cudaIpcEventHandle_t& handle) {
  if (event == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUipcEventHandle opened{};
    std::memcpy(&opened, &handle, sizeof opened);
    return call_driver<&DriverTable::cuIpcOpenEventHandle>(event, opened);
  });
}

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  return api_call([&] { return export_memory(handle, devPtr); });
}
cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  return api_call([&] { return open_memory(devPtr, handle, flags); });
}
cudaError_t cudaIpcCloseMemHandle(void* devPtr) { return api_call([&] { return close_memory(devPtr); }); }
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  return api_call([&] { return export_event(handle, event); });
}
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  return api_call([&] { return open_event(event, handle); });
}

}  // extern "C"
