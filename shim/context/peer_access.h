// Peer access the program enabled (cuCtxEnablePeerAccess, cudaDeviceEnablePeerAccess), as far as the
// arenas need to know it. The driver opens a context's cuMemAlloc memory to every context that enabled
// peer access to it; memory from cuMemCreate is open only to the devices cuMemSetAccess names, so an
// arena over virtual memory names them itself. This table says which devices may access each
// context's memory now: a device keeps that access while any of its contexts has it enabled.
#pragma once

#include <cuda.h>

#include <vector>

namespace gpumem::shim::peer_access {

// `accessor`, a context of `accessor_device`, may now access the memory of `peer`.
void enabled(CUcontext accessor, CUdevice accessor_device, CUcontext peer);
// That access ended.
void disabled(CUcontext accessor, CUcontext peer);
// `context` is gone, and with it every access to and from it (the driver ends peer access with either
// context). Returns the contexts whose memory it could access: their arenas must follow the table again.
std::vector<CUcontext> forget(CUcontext context);
// The contexts that enabled peer access to `peer`, each once.
std::vector<CUcontext> contexts_with_access(CUcontext peer);
// The devices that may access `peer`'s memory now, each once.
std::vector<CUdevice> devices_with_access(CUcontext peer);
// The other devices that can access `device`'s memory at all (cuDeviceCanAccessPeer): where memory
// opened with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS must be reachable from, as the driver's own would be.
std::vector<CUdevice> devices_able_to_access(CUdevice device);

}  // namespace gpumem::shim::peer_access
