// The other paths that take device memory (VMM, managed memory, arrays) and cuDeviceTotalMem, each
// charged to the device's budget (services/other_paths.cpp). Same contract as memory_service.h.
#pragma once

#include <cuda.h>

namespace gpumem::shim {

// The other paths that take device memory, charged to the device's budget.
CUresult device_total_mem(size_t* bytes, CUdevice device);  // the budget's limit when the shim is active
CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                    unsigned long long flags);
CUresult mem_release(CUmemGenericAllocationHandle handle);
CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                 unsigned long long flags);
CUresult mem_unmap(CUdeviceptr ptr, size_t size);
CUresult mem_retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr);
CUresult mem_alloc_managed(CUdeviceptr* dptr, size_t bytes, unsigned int flags);
CUresult array_create(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* descriptor);
CUresult array_3d_create(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor);
CUresult array_destroy(CUarray handle);
CUresult mipmapped_array_create(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor,
                                unsigned int levels);
CUresult mipmapped_array_destroy(CUmipmappedArray handle);

}  // namespace gpumem::shim
