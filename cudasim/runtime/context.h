// Device selection and lazy primary contexts, as NVIDIA's runtime manages them: each host thread has
// a current device (0 until cudaSetDevice); the first call that needs a context retains that
// device's primary context (once per process and device) and makes it current on the thread. A
// context the application made current through the driver API is used as it is.
#pragma once

#include "api_headers.h"
#include "entry_point.h"

namespace cudasim::runtime {

// Makes sure the calling thread has a usable current context (creating the primary context of its
// device on first use) and returns cudaSuccess, or the reason it cannot.
cudaError_t ensure_context();

// Runs `operation` (which returns a cudaError_t) once the thread has a usable context.
cudaError_t with_context(auto&& operation) {
  const cudaError_t status = ensure_context();
  if (status != cudaSuccess) return status;
  return operation();
}

// The device ordinal the calling thread works on: that of its current context, else its selected
// device (0 by default). Creates nothing.
cudaError_t current_device(int* device);

// cudaSetDevice: validates the ordinal, selects it for the thread, and (as the runtime has done
// since CUDA 12.0) initialises and makes current its primary context.
cudaError_t select_device(int device);

// cudaSetValidDevices: the device threads that select none work on becomes the list's first (every
// simulated device works); an empty list restores device 0. Validates the list as documented.
cudaError_t set_valid_devices(const int* devices, int count);

// cudaDeviceReset: resets the primary context of the thread's device; the next call that needs it
// creates it afresh.
cudaError_t reset_current_device();

// The device's primary context, retained once per process (as the first call needing it does),
// without making it current.
cudaError_t primary_context(int device, CUcontext* context);

// The number of devices (after loading the driver).
cudaError_t device_count(int* count);

// The driver's handle for a device ordinal, validating it (cudaErrorInvalidDevice).
cudaError_t device_handle(int device, CUdevice* handle);

}  // namespace cudasim::runtime
