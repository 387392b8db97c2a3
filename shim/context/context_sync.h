// Waiting for work that contexts other than the current one have queued: the shim frees memory on
// the program's behalf (an imported block at its last close) only once every context that may still
// read it is done with it, as the driver's own call would wait.
#pragma once

#include <cuda.h>

namespace gpumem::shim {

// The device's primary context if it is active (naming it leaves its reference count as it was),
// else null.
CUcontext active_primary_context(CUdevice device) noexcept;

// Whether the driver says if the device's primary context is active: true with `primary` set to it
// (null when inactive); false when it cannot (no cuDevicePrimaryCtxGetState or Retain, or they
// fail), so that a teardown falls back to every context of the device instead of none.
bool name_primary_context(CUdevice device, CUcontext& primary) noexcept;

// `context`'s queued work has completed: cuCtxSynchronize_v2 where the driver has it, else the
// context made current for one cuCtxSynchronize and the current one restored.
CUresult synchronize_context(CUcontext context) noexcept;

// Every context that may reach memory of `owner` (a context of `device`) has finished its queued
// work: `owner`, the contexts that enabled peer access to it, and the active primary contexts of the
// devices able to access `device` (a legacy IPC mapping is opened to all of them). What the driver's
// close of an IPC mapping waits for before it unmaps. Each is waited for; the first failure is
// returned. Never call it while a graph capture is under way (capture_state.h): the driver refuses a
// context synchronisation then, and invalidates the capture.
CUresult synchronize_contexts_reaching(CUcontext owner, CUdevice device) noexcept;

}  // namespace gpumem::shim
