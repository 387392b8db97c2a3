// What the three legacy IPC hooks call (services/ipc_service.cpp, docs/ipc.md). Same contract as
// memory_service.h: the semantics and return codes of the driver call each is named after.
#pragma once

#include <cuda.h>

namespace gpumem::shim {

// Blocks inside pooled regions are exported as gpumem handles
// that the open and close below resolve (docs/ipc.md); everything else is the driver's.
CUresult ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr);
CUresult ipc_open_mem_handle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags);
CUresult ipc_close_mem_handle(CUdeviceptr dptr);

}  // namespace gpumem::shim
