// Graph node parameters through the runtime API: event nodes, 3D copy nodes, the parameters of
// kernel, memset and copy nodes read back and replaced, and executable graphs changed in place
// (cudaGraphExec*SetParams, cudaGraphExecUpdate), nodes disabled and enabled again, and kernel node
// attributes, over the driver's (graph_update.cpp and graph_params.cpp there).
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "graph_nodes.h"
#include "operations.h"

namespace cudasim::runtime {
namespace {

static_assert(sizeof(cudaGraphExecUpdateResultInfo) == sizeof(CUgraphExecUpdateResultInfo));
// The runtime's launch attributes are the driver's: the same identifiers, values of the same layout.
static_assert(sizeof(cudaKernelNodeAttrValue) == sizeof(CUkernelNodeAttrValue));
static_assert(static_cast<int>(cudaLaunchAttributePriority) == CU_LAUNCH_ATTRIBUTE_PRIORITY);
static_assert(static_cast<int>(cudaLaunchAttributeNvlinkUtilCentricScheduling) ==
              CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING);

// One side of a 3D copy: an array, or a pitched pointer of the memory type the copy's kind gives.
void copy_side(cudaArray_t array, const cudaPitchedPtr& ptr, const cudaPos& pos, CUmemorytype type, CUarray* array_out,
               CUmemorytype* type_out, const void** host, CUdeviceptr* device, size_t* x, size_t* y, size_t* z,
               size_t* pitch, size_t* height) {
  *x = pos.x, *y = pos.y, *z = pos.z;
  if (array != nullptr) {
    *type_out = CU_MEMORYTYPE_ARRAY;
    *array_out = reinterpret_cast<CUarray>(array);
    return;
  }
  *type_out = type;
  *host = ptr.ptr;
  *device = reinterpret_cast<CUdeviceptr>(ptr.ptr);
  *pitch = ptr.pitch;
  *height = ptr.ysize;
}

cudaMemcpyKind copy_kind(CUmemorytype src, CUmemorytype dst) {
  const bool src_host = src == CU_MEMORYTYPE_HOST, dst_host = dst == CU_MEMORYTYPE_HOST;
  const bool src_device = src == CU_MEMORYTYPE_DEVICE, dst_device = dst == CU_MEMORYTYPE_DEVICE;
  if (src_host && dst_host) return cudaMemcpyHostToHost;
  if (src_host && dst_device) return cudaMemcpyHostToDevice;
  if (src_device && dst_host) return cudaMemcpyDeviceToHost;
  if (src_device && dst_device) return cudaMemcpyDeviceToDevice;
  return cudaMemcpyDefault;
}

// The driver's copy back in the runtime's form (the pitched pointers' xsize: the width copied; an
// array's positions and the width in elements).
cudaMemcpy3DParms runtime_copy_3d(const CUDA_MEMCPY3D& c) {
  cudaMemcpy3DParms p{};
  p.srcArray = reinterpret_cast<cudaArray_t>(c.srcArray);
  p.dstArray = reinterpret_cast<cudaArray_t>(c.dstArray);
  p.srcPos = cudaPos{c.srcXInBytes, c.srcY, c.srcZ};
  p.dstPos = cudaPos{c.dstXInBytes, c.dstY, c.dstZ};
  void* src = c.srcMemoryType == CU_MEMORYTYPE_HOST ? const_cast<void*>(c.srcHost) : reinterpret_cast<void*>(c.srcDevice);
  void* dst = c.dstMemoryType == CU_MEMORYTYPE_HOST ? c.dstHost : reinterpret_cast<void*>(c.dstDevice);
  if (c.srcMemoryType != CU_MEMORYTYPE_ARRAY) p.srcPtr = cudaPitchedPtr{src, c.srcPitch, c.WidthInBytes, c.srcHeight};
  if (c.dstMemoryType != CU_MEMORYTYPE_ARRAY) p.dstPtr = cudaPitchedPtr{dst, c.dstPitch, c.WidthInBytes, c.dstHeight};
  p.extent = cudaExtent{c.WidthInBytes, c.Height, c.Depth};
  p.kind = copy_kind(c.srcMemoryType, c.dstMemoryType);
  array_positions_in_elements(&p);
  return p;
}

// The kernel node's parameters, func naming the host stub the kernel was registered for.
cudaError_t kernel_node_params(cudaGraphNode_t node, cudaKernelNodeParams* params) {
  if (params == nullptr) return cudaErrorInvalidValue;
  CUDA_KERNEL_NODE_PARAMS driver{};
  if (cudaError_t status = call_driver<&DriverTable::cuGraphKernelNodeGetParams>(node, &driver); status != cudaSuccess)
    return status;
  CUkernel kernel = driver.func != nullptr ? reinterpret_cast<CUkernel>(driver.func) : driver.kern;
  *params = cudaKernelNodeParams{};
  params->func = const_cast<void*>(host_function_of(kernel));
  params->gridDim = dim3(driver.gridDimX, driver.gridDimY, driver.gridDimZ);
  params->blockDim = dim3(driver.blockDimX, driver.blockDimY, driver.blockDimZ);
  params->sharedMemBytes = driver.sharedMemBytes;
  params->kernelParams = driver.kernelParams;
  params->extra = driver.extra;
  return cudaSuccess;
}

}  // namespace

// cudaMemcpy3DParms in the driver's form: each side an array or a pointer, not both.
cudaError_t driver_copy_3d(const cudaMemcpy3DParms* p, CUDA_MEMCPY3D* copy) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if ((p->srcArray != nullptr && p->srcPtr.ptr != nullptr) || (p->dstArray != nullptr && p->dstPtr.ptr != nullptr))
    return cudaErrorInvalidValue;
  CUmemorytype src = CU_MEMORYTYPE_HOST, dst = CU_MEMORYTYPE_HOST;
  if (!memory_types(p->kind, &src, &dst)) return cudaErrorInvalidMemcpyDirection;
  *copy = CUDA_MEMCPY3D{};
  const void* dst_host = nullptr;
  copy_side(p->srcArray, p->srcPtr, p->srcPos, src, &copy->srcArray, &copy->srcMemoryType, &copy->srcHost,
            &copy->srcDevice, &copy->srcXInBytes, &copy->srcY, &copy->srcZ, &copy->srcPitch, &copy->srcHeight);
  copy_side(p->dstArray, p->dstPtr, p->dstPos, dst, &copy->dstArray, &copy->dstMemoryType, &dst_host,
            &copy->dstDevice, &copy->dstXInBytes, &copy->dstY, &copy->dstZ, &copy->dstPitch, &copy->dstHeight);
  copy->dstHost = const_cast<void*>(dst_host);
  copy->WidthInBytes = p->extent.width;
  copy->Height = p->extent.height;
  copy->Depth = p->extent.depth;
  return array_positions_in_bytes(p, copy);
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

// cudaEvent_t is the driver's CUevent.
cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                        cudaEvent_t event) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphAddEventRecordNode>(pGraphNode, graph, pDependencies, numDependencies,
                                                                event);
  });
}
cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                      const cudaGraphNode_t* pDependencies, size_t numDependencies, cudaEvent_t event) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphAddEventWaitNode>(pGraphNode, graph, pDependencies, numDependencies, event);
  });
}
cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphEventRecordNodeGetEvent>(node, event_out); });
}
cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphEventRecordNodeSetEvent>(node, event); });
}
cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphEventWaitNodeGetEvent>(node, event_out); });
}
cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphEventWaitNodeSetEvent>(node, event); });
}

cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                   size_t numDependencies, const struct cudaMemcpy3DParms* pCopyParams) {
  return api_call([&] {
    CUDA_MEMCPY3D copy{};
    if (cudaError_t status = driver_copy_3d(pCopyParams, &copy); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphAddMemcpyNode>(pGraphNode, graph, pDependencies, numDependencies, &copy,
                                                           current_context_handle());
  });
}
cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms* pNodeParams) {
  return api_call([&] {
    if (pNodeParams == nullptr) return cudaErrorInvalidValue;
    CUDA_MEMCPY3D copy{};
    const cudaError_t status = call_driver<&DriverTable::cuGraphMemcpyNodeGetParams>(node, &copy);
    if (status == cudaSuccess) *pNodeParams = runtime_copy_3d(copy);
    return status;
  });
}
cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms* pNodeParams) {
  return api_call([&] {
    CUDA_MEMCPY3D copy{};
    if (cudaError_t status = driver_copy_3d(pNodeParams, &copy); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphMemcpyNodeSetParams>(node, &copy);
  });
}
cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                           enum cudaMemcpyKind kind) {
  return api_call([&] {
    CUDA_MEMCPY3D copy{};
    if (cudaError_t status = driver_copy_1d(dst, src, count, kind, &copy); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphMemcpyNodeSetParams>(node, &copy);
  });
}

cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams* pNodeParams) {
  return api_call([&] {
    if (pNodeParams == nullptr) return cudaErrorInvalidValue;
    CUDA_MEMSET_NODE_PARAMS driver{};
    const cudaError_t status = call_driver<&DriverTable::cuGraphMemsetNodeGetParams>(node, &driver);
    if (status != cudaSuccess) return status;
    *pNodeParams = cudaMemsetParams{};
    pNodeParams->dst = reinterpret_cast<void*>(driver.dst);
    pNodeParams->pitch = driver.pitch;
    pNodeParams->value = driver.value;
    pNodeParams->elementSize = driver.elementSize;
    pNodeParams->width = driver.width;
    pNodeParams->height = driver.height;
    return cudaSuccess;
  });
}
cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams* pNodeParams) {
  return api_call([&] {
    if (pNodeParams == nullptr) return cudaErrorInvalidValue;
    const CUDA_MEMSET_NODE_PARAMS driver = driver_memset_params(*pNodeParams);
    return call_driver<&DriverTable::cuGraphMemsetNodeSetParams>(node, &driver);
  });
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams* pNodeParams) {
  return api_call([&] { return kernel_node_params(node, pNodeParams); });
}
cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams* pNodeParams) {
  return api_call([&] {
    CUDA_KERNEL_NODE_PARAMS driver{};
    if (cudaError_t status = driver_kernel_params(pNodeParams, &driver); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphKernelNodeSetParams>(node, &driver);
  });
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaKernelNodeParams* pNodeParams) {
  return api_call([&] {
    CUDA_KERNEL_NODE_PARAMS driver{};
    if (cudaError_t status = driver_kernel_params(pNodeParams, &driver); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphExecKernelNodeSetParams>(hGraphExec, node, &driver);
  });
}
cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaMemcpy3DParms* pNodeParams) {
  return api_call([&] {
    CUDA_MEMCPY3D copy{};
    if (cudaError_t status = driver_copy_3d(pNodeParams, &copy); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphExecMemcpyNodeSetParams>(hGraphExec, node, &copy,
                                                                     current_context_handle());
  });
}
cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void* dst,
                                               const void* src, size_t count, enum cudaMemcpyKind kind) {
  return api_call([&] {
    CUDA_MEMCPY3D copy{};
    if (cudaError_t status = driver_copy_1d(dst, src, count, kind, &copy); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphExecMemcpyNodeSetParams>(hGraphExec, node, &copy,
                                                                     current_context_handle());
  });
}
cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaMemsetParams* pNodeParams) {
  return api_call([&] {
    if (pNodeParams == nullptr) return cudaErrorInvalidValue;
    const CUDA_MEMSET_NODE_PARAMS driver = driver_memset_params(*pNodeParams);
    return call_driver<&DriverTable::cuGraphExecMemsetNodeSetParams>(hGraphExec, node, &driver,
                                                                     current_context_handle());
  });
}
// cudaHostNodeParams is the driver's CUDA_HOST_NODE_PARAMS (graph_api.cpp checks it).
cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                           const struct cudaHostNodeParams* pNodeParams) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphExecHostNodeSetParams>(
        hGraphExec, node, reinterpret_cast<const CUDA_HOST_NODE_PARAMS*>(pNodeParams));
  });
}
cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, cudaEvent_t event) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphExecEventRecordNodeSetEvent>(hGraphExec, hNode, event); });
}
cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, cudaEvent_t event) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphExecEventWaitNodeSetEvent>(hGraphExec, hNode, event); });
}
cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                 cudaGraph_t childGraph) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphExecChildGraphNodeSetParams>(hGraphExec, node, childGraph);
  });
}

// cudaGraphExecUpdateResultInfo is the driver's CUgraphExecUpdateResultInfo, with the same values.
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                cudaGraphExecUpdateResultInfo* resultInfo) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphExecUpdate>(hGraphExec, hGraph,
                                                        reinterpret_cast<CUgraphExecUpdateResultInfo*>(resultInfo));
  });
}

cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int isEnabled) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphNodeSetEnabled>(hGraphExec, hNode, isEnabled); });
}
cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int* isEnabled) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphNodeGetEnabled>(hGraphExec, hNode, isEnabled); });
}

cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t hNode, cudaKernelNodeAttrID attr,
                                            cudaKernelNodeAttrValue* value_out) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphKernelNodeGetAttribute>(
        hNode, static_cast<CUkernelNodeAttrID>(attr), reinterpret_cast<CUkernelNodeAttrValue*>(value_out));
  });
}
cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t hNode, cudaKernelNodeAttrID attr,
                                            const cudaKernelNodeAttrValue* value) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphKernelNodeSetAttribute>(
        hNode, static_cast<CUkernelNodeAttrID>(attr), reinterpret_cast<const CUkernelNodeAttrValue*>(value));
  });
}
cudaError_t cudaGraphKernelNodeCopyAttributes(cudaGraphNode_t hDst, cudaGraphNode_t hSrc) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphKernelNodeCopyAttributes>(hDst, hSrc); });
}

cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long* flags) {
  return api_call([&] {
    if (flags == nullptr) return cudaErrorInvalidValue;
    cuuint64_t driver = 0;
    const cudaError_t status = call_driver<&DriverTable::cuGraphExecGetFlags>(graphExec, &driver);
    if (status == cudaSuccess) *flags = driver;
    return status;
  });
}

}  // extern "C"
