// Function attributes and occupancy of the runtime API, for the kernels nvcc's host code registers
// (a host stub names its library kernel; launch_api.cpp), over the driver's kernel attributes and
// occupancy calls (functions.cpp there) on the current device.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

using namespace cudasim::runtime;

namespace {

// Runs body(kernel, device) for the kernel of a registered host stub on the current device.
template <typename Body>
cudaError_t with_kernel(const void* func, Body body) {
  if (func == nullptr) return cudaErrorInvalidDeviceFunction;
  return with_context([&] {
    CUkernel kernel = nullptr;
    int device = 0;
    if (cudaError_t status = kernel_of(func, &kernel); status != cudaSuccess) return status;
    if (cudaError_t status = current_device(&device); status != cudaSuccess) return status;
    return body(kernel, static_cast<CUdevice>(device));
  });
}

cudaError_t get_attributes(cudaFuncAttributes* attributes, const void* func) {
  if (attributes == nullptr) return cudaErrorInvalidValue;
  return with_kernel(func, [&](CUkernel kernel, CUdevice device) {
    cudaFuncAttributes out{};
    cudaError_t status = cudaSuccess;
    auto read = [&](CUfunction_attribute which) {
      int value = 0;
      if (status == cudaSuccess) status = call_driver<&DriverTable::cuKernelGetAttribute>(&value, which, kernel, device);
      return value;
    };
    out.sharedSizeBytes = static_cast<size_t>(read(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
    out.constSizeBytes = static_cast<size_t>(read(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
    out.localSizeBytes = static_cast<size_t>(read(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
    out.maxThreadsPerBlock = read(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    out.numRegs = read(CU_FUNC_ATTRIBUTE_NUM_REGS);
    out.ptxVersion = read(CU_FUNC_ATTRIBUTE_PTX_VERSION);
    out.binaryVersion = read(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
    out.cacheModeCA = read(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA);
    out.maxDynamicSharedSizeBytes = read(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
    out.preferredShmemCarveout = read(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
    out.clusterDimMustBeSet = read(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET);
    out.requiredClusterWidth = read(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH);
    out.requiredClusterHeight = read(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT);
    out.requiredClusterDepth = read(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH);
    out.clusterSchedulingPolicyPreference = read(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE);
    out.nonPortableClusterSizeAllowed = read(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
    if (status == cudaSuccess) *attributes = out;
    return status;
  });
}

}  // namespace

extern "C" {

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  return api_call([&] { return get_attributes(attr, func); });
}

// cudaFuncAttribute and CUfunction_attribute number the settable attributes alike.
// The parameter layout the driver reads from the kernel's PTX.
cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  return api_call([&] {
    return with_kernel(func, [&](CUkernel kernel, CUdevice) {
      return call_driver<&DriverTable::cuKernelGetParamInfo>(kernel, paramIndex, paramOffset, paramSize);
    });
  });
}

// Cluster occupancy of a registered kernel (the driver's model, functions.cpp there).
cudaError_t cudaOccupancyMaxPotentialClusterSize(int* clusterSize, const void* func, const cudaLaunchConfig_t* config) {
  return api_call([&] {
    if (config == nullptr) return cudaErrorInvalidValue;
    return with_kernel(func, [&](CUkernel kernel, CUdevice) {
      const CUlaunchConfig driver_config = driver_launch_config(*config, config->stream);
      return call_driver<&DriverTable::cuOccupancyMaxPotentialClusterSize>(
          clusterSize, reinterpret_cast<CUfunction>(kernel), &driver_config);
    });
  });
}

cudaError_t cudaOccupancyMaxActiveClusters(int* numClusters, const void* func, const cudaLaunchConfig_t* config) {
  return api_call([&] {
    if (config == nullptr) return cudaErrorInvalidValue;
    return with_kernel(func, [&](CUkernel kernel, CUdevice) {
      const CUlaunchConfig driver_config = driver_launch_config(*config, config->stream);
      return call_driver<&DriverTable::cuOccupancyMaxActiveClusters>(numClusters, reinterpret_cast<CUfunction>(kernel),
                                                                      &driver_config);
    });
  });
}

// cudaSharedMemConfig and CUsharedconfig number the bank sizes alike; the driver keeps the setting.
cudaError_t cudaFuncSetSharedMemConfig(const void* func, enum cudaSharedMemConfig config) {
  return api_call([&] {
    return with_kernel(func, [&](CUkernel kernel, CUdevice) {
      return call_driver<&DriverTable::cuFuncSetSharedMemConfig>(reinterpret_cast<CUfunction>(kernel),
                                                                 static_cast<CUsharedconfig>(config));
    });
  });
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  return api_call([&] {
    return with_kernel(func, [&](CUkernel kernel, CUdevice device) {
      return call_driver<&DriverTable::cuKernelSetAttribute>(static_cast<CUfunction_attribute>(attr), value, kernel,
                                                             device);
    });
  });
}

cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache cacheConfig) {
  return api_call([&] {
    return with_kernel(func, [&](CUkernel kernel, CUdevice device) {
      return call_driver<&DriverTable::cuKernelSetCacheConfig>(kernel, static_cast<CUfunc_cache>(cacheConfig), device);
    });
  });
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func, int blockSize,
                                                                   size_t dynamicSMemSize, unsigned int flags) {
  return api_call([&] {
    if (numBlocks == nullptr) return cudaErrorInvalidValue;
    return with_kernel(func, [&](CUkernel kernel, CUdevice) {
      return call_driver<&DriverTable::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags>(
          numBlocks, reinterpret_cast<CUfunction>(kernel), blockSize, dynamicSMemSize, flags);
    });
  });
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                          size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
                                                                cudaOccupancyDefault);
}

cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func, int numBlocks,
                                                      int blockSize) {
  return api_call([&] {
    if (dynamicSmemSize == nullptr) return cudaErrorInvalidValue;
    return with_kernel(func, [&](CUkernel kernel, CUdevice) {
      return call_driver<&DriverTable::cuOccupancyAvailableDynamicSMemPerBlock>(
          dynamicSmemSize, reinterpret_cast<CUfunction>(kernel), numBlocks, blockSize);
    });
  });
}

}  // extern "C"
