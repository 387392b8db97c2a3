// Graphs through the runtime API: building them node by node, querying them, instantiating and
// launching them, over the driver's graphs (cudaGraph_t, cudaGraphNode_t and cudaGraphExec_t are the
// driver's handles). Capture is in stream_api.cpp.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "graph_nodes.h"
#include "operations.h"

namespace cudasim::runtime {

static_assert(sizeof(cudaGraphInstantiateParams) == sizeof(CUDA_GRAPH_INSTANTIATE_PARAMS));
static_assert(sizeof(cudaHostNodeParams) == sizeof(CUDA_HOST_NODE_PARAMS));
static_assert(sizeof(cudaMemAccessDesc) == sizeof(CUmemAccessDesc));  // same fields, same values
static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData));

CUcontext current_context_handle() {
  CUcontext ctx = nullptr;
  return call_driver<&DriverTable::cuCtxGetCurrent>(&ctx) == cudaSuccess ? ctx : nullptr;
}

cudaError_t driver_kernel_params(const cudaKernelNodeParams* params, CUDA_KERNEL_NODE_PARAMS* driver) {
  if (params == nullptr) return cudaErrorInvalidValue;
  CUkernel kernel = nullptr;
  if (params->func == nullptr) return cudaErrorInvalidDeviceFunction;
  if (cudaError_t status = kernel_of(params->func, &kernel); status != cudaSuccess) return status;
  *driver = CUDA_KERNEL_NODE_PARAMS{};
  driver->func = reinterpret_cast<CUfunction>(kernel);
  driver->gridDimX = params->gridDim.x;
  driver->gridDimY = params->gridDim.y;
  driver->gridDimZ = params->gridDim.z;
  driver->blockDimX = params->blockDim.x;
  driver->blockDimY = params->blockDim.y;
  driver->blockDimZ = params->blockDim.z;
  driver->sharedMemBytes = params->sharedMemBytes;
  driver->kernelParams = params->kernelParams;
  driver->extra = params->extra;
  return cudaSuccess;
}

CUDA_MEMSET_NODE_PARAMS driver_memset_params(const cudaMemsetParams& params) {
  CUDA_MEMSET_NODE_PARAMS driver{};
  driver.dst = reinterpret_cast<CUdeviceptr>(params.dst);
  driver.pitch = params.pitch;
  driver.value = params.value;
  driver.elementSize = params.elementSize;
  driver.width = params.width;
  driver.height = params.height;
  return driver;
}

bool memory_types(cudaMemcpyKind kind, CUmemorytype* src, CUmemorytype* dst) {
  switch (kind) {
    case cudaMemcpyHostToHost: *src = *dst = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyHostToDevice: *src = CU_MEMORYTYPE_HOST, *dst = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDeviceToHost: *src = CU_MEMORYTYPE_DEVICE, *dst = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyDeviceToDevice: *src = *dst = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDefault: *src = *dst = CU_MEMORYTYPE_UNIFIED; return true;
  }
  return false;
}

cudaError_t driver_copy_1d(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, CUDA_MEMCPY3D* copy) {
  *copy = CUDA_MEMCPY3D{};
  if (!memory_types(kind, &copy->srcMemoryType, &copy->dstMemoryType)) return cudaErrorInvalidMemcpyDirection;
  copy->srcHost = src;
  copy->srcDevice = reinterpret_cast<CUdeviceptr>(src);
  copy->dstHost = dst;
  copy->dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  copy->WidthInBytes = bytes;
  copy->Height = 1;
  copy->Depth = 1;
  return cudaSuccess;
}

namespace {

cudaError_t add_kernel_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                            size_t count, const cudaKernelNodeParams* params) {
  CUDA_KERNEL_NODE_PARAMS driver{};
  if (cudaError_t status = driver_kernel_params(params, &driver); status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuGraphAddKernelNode>(node, graph, dependencies, count, &driver);
}

cudaError_t add_memset_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                            size_t count, const cudaMemsetParams* params) {
  if (params == nullptr) return cudaErrorInvalidValue;
  const CUDA_MEMSET_NODE_PARAMS driver = driver_memset_params(*params);
  return call_driver<&DriverTable::cuGraphAddMemsetNode>(node, graph, dependencies, count, &driver,
                                                         current_context_handle());
}

cudaError_t add_memcpy_node_1d(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                               size_t count, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  CUDA_MEMCPY3D copy{};
  if (cudaError_t status = driver_copy_1d(dst, src, bytes, kind, &copy); status != cudaSuccess) return status;
  return call_driver<&DriverTable::cuGraphAddMemcpyNode>(node, graph, dependencies, count, &copy,
                                                         current_context_handle());
}

cudaError_t add_mem_alloc_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                               size_t count, cudaMemAllocNodeParams* params) {
  if (params == nullptr) return cudaErrorInvalidValue;
  CUDA_MEM_ALLOC_NODE_PARAMS driver{};
  driver.poolProps = driver_pool_properties(params->poolProps);
  driver.accessDescs = reinterpret_cast<const CUmemAccessDesc*>(params->accessDescs);
  driver.accessDescCount = params->accessDescCount;
  driver.bytesize = params->bytesize;
  const cudaError_t status = call_driver<&DriverTable::cuGraphAddMemAllocNode>(node, graph, dependencies, count, &driver);
  if (status == cudaSuccess) params->dptr = reinterpret_cast<void*>(driver.dptr);
  return status;
}

cudaError_t mem_alloc_node_params(cudaGraphNode_t node, cudaMemAllocNodeParams* params) {
  if (params == nullptr) return cudaErrorInvalidValue;
  CUDA_MEM_ALLOC_NODE_PARAMS driver{};
  const cudaError_t status = call_driver<&DriverTable::cuGraphMemAllocNodeGetParams>(node, &driver);
  if (status != cudaSuccess) return status;
  *params = cudaMemAllocNodeParams{};
  const CUmemPoolProps& props = driver.poolProps;
  params->poolProps.allocType = static_cast<cudaMemAllocationType>(props.allocType);
  params->poolProps.handleTypes = static_cast<cudaMemAllocationHandleType>(props.handleTypes);
  params->poolProps.location.type = static_cast<cudaMemLocationType>(props.location.type);
  params->poolProps.location.id = props.location.id;
  params->poolProps.win32SecurityAttributes = props.win32SecurityAttributes;
  params->poolProps.maxSize = props.maxSize;
  params->poolProps.usage = props.usage;
  params->accessDescs = reinterpret_cast<const cudaMemAccessDesc*>(driver.accessDescs);  // the node's own
  params->accessDescCount = driver.accessDescCount;
  params->bytesize = driver.bytesize;
  params->dptr = reinterpret_cast<void*>(driver.dptr);
  return cudaSuccess;
}

}  // namespace

// Shared with per_thread_api.cpp, whose stream 0 is the per-thread default stream.
cudaError_t graph_launch(cudaGraphExec_t exec, CUstream stream) {
  return with_context([&] { return call_driver<&DriverTable::cuGraphLaunch>(exec, stream); });
}

cudaError_t graph_upload(cudaGraphExec_t exec, CUstream stream) {
  return with_context([&] { return call_driver<&DriverTable::cuGraphUpload>(exec, stream); });
}

cudaError_t graph_instantiate_with_params(cudaGraphExec_t* exec, cudaGraph_t graph, cudaGraphInstantiateParams* params,
                                          bool per_thread) {
  if (params == nullptr) return cudaErrorInvalidValue;
  return with_context([&] {
    CUDA_GRAPH_INSTANTIATE_PARAMS driver{};
    driver.flags = params->flags;
    driver.hUploadStream = per_thread ? per_thread_stream(params->uploadStream) : params->uploadStream;
    const cudaError_t status = call_driver<&DriverTable::cuGraphInstantiateWithParams>(exec, graph, &driver);
    params->errNode_out = driver.hErrNode_out;
    params->result_out = static_cast<cudaGraphInstantiateResult>(driver.result_out);
    return status;
  });
}

// cudaDeviceGetGraphMemAttribute / Set / cudaDeviceGraphMemTrim on the driver's device of `device`.
// The runtime's cudaGraphMemAttributeType has the driver's CUgraphMem_attribute values.
template <auto Entry, typename... Args>
cudaError_t on_device(int device, Args... args) {
  CUdevice handle = 0;
  if (const cudaError_t status = device_handle(device, &handle); status != cudaSuccess) return status;
  return with_context([&] { return call_driver<Entry>(handle, args...); });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) {
  return api_call([&] { return with_context([&] { return call_driver<&DriverTable::cuGraphCreate>(pGraph, flags); }); });
}

cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                  size_t numDependencies) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuGraphAddEmptyNode>(pGraphNode, graph, pDependencies, numDependencies);
    });
  });
}

cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                 size_t numDependencies, const struct cudaHostNodeParams* pNodeParams) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuGraphAddHostNode>(pGraphNode, graph, pDependencies, numDependencies,
                                                           reinterpret_cast<const CUDA_HOST_NODE_PARAMS*>(pNodeParams));
    });
  });
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                   const struct cudaKernelNodeParams* pNodeParams) {
  return api_call([&] {
    return with_context([&] { return add_kernel_node(pGraphNode, graph, pDependencies, numDependencies, pNodeParams); });
  });
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                   const struct cudaMemsetParams* pMemsetParams) {
  return api_call([&] {
    return with_context([&] { return add_memset_node(pGraphNode, graph, pDependencies, numDependencies, pMemsetParams); });
  });
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t* pDependencies, size_t numDependencies, void* dst,
                                     const void* src, size_t count, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_context([&] {
      return add_memcpy_node_1d(pGraphNode, graph, pDependencies, numDependencies, dst, src, count, kind);
    });
  });
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphGetNodes>(graph, nodes, numNodes); });
}

cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* pRootNodes, size_t* pNumRootNodes) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphGetRootNodes>(graph, pRootNodes, pNumRootNodes); });
}

// cudaGraphNodeType and CUgraphNodeType share their values.
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType* pType) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphNodeGetType>(node, reinterpret_cast<CUgraphNodeType*>(pType));
  });
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* pDependencies,
                                         cudaGraphEdgeData* edgeData, size_t* pNumDependencies) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphNodeGetDependencies>(
        node, pDependencies, reinterpret_cast<CUgraphEdgeData*>(edgeData), pNumDependencies);
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return api_call([&] {
    return with_context([&] { return call_driver<&DriverTable::cuGraphInstantiateWithFlags>(pGraphExec, graph, flags); });
  });
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams* instantiateParams) {
  return api_call([&] { return graph_instantiate_with_params(pGraphExec, graph, instantiateParams, false); });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return api_call([&] { return graph_launch(graphExec, stream); });
}

cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return api_call([&] { return graph_upload(graphExec, stream); });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphExecDestroy>(graphExec); });
}

cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                     size_t numDependencies, struct cudaMemAllocNodeParams* nodeParams) {
  return api_call([&] {
    return with_context([&] { return add_mem_alloc_node(pGraphNode, graph, pDependencies, numDependencies, nodeParams); });
  });
}

cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                    size_t numDependencies, void* dptr) {
  return api_call([&] {
    return with_context([&] {
      return call_driver<&DriverTable::cuGraphAddMemFreeNode>(pGraphNode, graph, pDependencies, numDependencies,
                                                              reinterpret_cast<CUdeviceptr>(dptr));
    });
  });
}

cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams* params_out) {
  return api_call([&] { return mem_alloc_node_params(node, params_out); });
}

// dptr_out points to a void*, which the driver's CUdeviceptr fills.
cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void* dptr_out) {
  static_assert(sizeof(void*) == sizeof(CUdeviceptr));
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphMemFreeNodeGetParams>(node, static_cast<CUdeviceptr*>(dptr_out));
  });
}

cudaError_t cudaGraphClone(cudaGraph_t* pGraphClone, cudaGraph_t originalGraph) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphClone>(pGraphClone, originalGraph); });
}

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                                       size_t numDependencies, cudaGraph_t childGraph) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphAddChildGraphNode>(pGraphNode, graph, pDependencies, numDependencies,
                                                               childGraph);
  });
}

cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t* pGraph) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphChildGraphNodeGetGraph>(node, pGraph); });
}

// cudaHostNodeParams is the driver's CUDA_HOST_NODE_PARAMS (checked above).
cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams* pNodeParams) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphHostNodeGetParams>(node, reinterpret_cast<CUDA_HOST_NODE_PARAMS*>(pNodeParams));
  });
}

cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams* pNodeParams) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphHostNodeSetParams>(
        node, reinterpret_cast<const CUDA_HOST_NODE_PARAMS*>(pNodeParams));
  });
}

cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphDestroyNode>(node); });
}

// cudaGraphEdgeData is the driver's CUgraphEdgeData, field for field.
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from, const cudaGraphNode_t* to,
                                     const cudaGraphEdgeData* edgeData, size_t numDependencies) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphAddDependencies>(
        graph, from, to, reinterpret_cast<const CUgraphEdgeData*>(edgeData), numDependencies);
  });
}

cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from, const cudaGraphNode_t* to,
                                        const cudaGraphEdgeData* edgeData, size_t numDependencies) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphRemoveDependencies>(
        graph, from, to, reinterpret_cast<const CUgraphEdgeData*>(edgeData), numDependencies);
  });
}

cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to, cudaGraphEdgeData* edgeData,
                              size_t* numEdges) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphGetEdges>(graph, from, to, reinterpret_cast<CUgraphEdgeData*>(edgeData),
                                                      numEdges);
  });
}

cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  return api_call([&] {
    return on_device<&DriverTable::cuDeviceGetGraphMemAttribute>(device, static_cast<CUgraphMem_attribute>(attr), value);
  });
}

cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  return api_call([&] {
    return on_device<&DriverTable::cuDeviceSetGraphMemAttribute>(device, static_cast<CUgraphMem_attribute>(attr), value);
  });
}

cudaError_t cudaDeviceGraphMemTrim(int device) {
  return api_call([&] { return on_device<&DriverTable::cuDeviceGraphMemTrim>(device); });
}

}  // extern "C"
