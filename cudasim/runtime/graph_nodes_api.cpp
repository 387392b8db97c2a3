// The generic node calls through the runtime API (cudaGraphAddNode, cudaGraphNodeSetParams,
// cudaGraphExecNodeSetParams): the runtime's cudaGraphNodeParams in the driver's form, then the
// driver's calls of the same names (graph_nodes.cpp there), whose checks and codes apply. Types the
// driver does not simulate go through with their type only and are refused there.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "graph_nodes.h"
#include "operations.h"

namespace cudasim::runtime {
namespace {

static_assert(static_cast<int>(cudaGraphNodeTypeConditional) == CU_GRAPH_NODE_TYPE_CONDITIONAL);
static_assert(static_cast<int>(cudaGraphNodeTypeMemFree) == CU_GRAPH_NODE_TYPE_MEM_FREE);
static_assert(static_cast<int>(cudaGraphCondTypeSwitch) == CU_GRAPH_COND_TYPE_SWITCH);
static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData));

cudaError_t driver_node_params(const cudaGraphNodeParams* p, CUgraphNodeParams* out) {
  if (p == nullptr) return cudaErrorInvalidValue;
  *out = CUgraphNodeParams{};
  out->type = static_cast<CUgraphNodeType>(p->type);
  for (int i = 0; i < 3; ++i) out->reserved0[i] = p->reserved0[i];
  out->reserved2 = p->reserved2;
  switch (p->type) {
    case cudaGraphNodeTypeKernel: {
      const cudaKernelNodeParamsV2& k = p->kernel;
      const cudaKernelNodeParams given{k.func, k.gridDim, k.blockDim, k.sharedMemBytes, k.kernelParams, k.extra};
      CUDA_KERNEL_NODE_PARAMS driver{};
      if (cudaError_t status = driver_kernel_params(&given, &driver); status != cudaSuccess) return status;
      out->kernel = CUDA_KERNEL_NODE_PARAMS_v3{driver.func,         driver.gridDimX,  driver.gridDimY,
                                               driver.gridDimZ,     driver.blockDimX, driver.blockDimY,
                                               driver.blockDimZ,    driver.sharedMemBytes,
                                               driver.kernelParams, driver.extra,     driver.kern,
                                               nullptr};
      return cudaSuccess;
    }
    case cudaGraphNodeTypeMemcpy: {
      const cudaMemcpyNodeParams& c = p->memcpy;
      if (c.flags != 0 || c.reserved[0] != 0 || c.reserved[1] != 0 || c.reserved[2] != 0) return cudaErrorInvalidValue;
      out->memcpy.copyCtx = current_context_handle();
      return driver_copy_3d(&c.copyParams, &out->memcpy.copyParams);
    }
    case cudaGraphNodeTypeMemset: {
      const cudaMemsetParamsV2& m = p->memset;
      const CUDA_MEMSET_NODE_PARAMS driver =
          driver_memset_params(cudaMemsetParams{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height});
      out->memset = CUDA_MEMSET_NODE_PARAMS_v2{driver.dst,   driver.pitch,  driver.value, driver.elementSize,
                                               driver.width, driver.height, current_context_handle()};
      return cudaSuccess;
    }
    case cudaGraphNodeTypeHost: out->host = CUDA_HOST_NODE_PARAMS_v2{p->host.fn, p->host.userData}; return cudaSuccess;
    case cudaGraphNodeTypeGraph:
      out->graph = CUDA_CHILD_GRAPH_NODE_PARAMS{p->graph.graph,
                                                static_cast<CUgraphChildGraphNodeOwnership>(p->graph.ownership)};
      return cudaSuccess;
    case cudaGraphNodeTypeWaitEvent: out->eventWait.event = p->eventWait.event; return cudaSuccess;
    case cudaGraphNodeTypeEventRecord: out->eventRecord.event = p->eventRecord.event; return cudaSuccess;
    case cudaGraphNodeTypeMemAlloc: {
      const cudaMemAllocNodeParamsV2& a = p->alloc;
      out->alloc.poolProps = driver_pool_properties(a.poolProps);
      out->alloc.accessDescs = reinterpret_cast<const CUmemAccessDesc*>(a.accessDescs);
      out->alloc.accessDescCount = a.accessDescCount;
      out->alloc.bytesize = a.bytesize;
      return cudaSuccess;
    }
    case cudaGraphNodeTypeMemFree: out->free.dptr = reinterpret_cast<CUdeviceptr>(p->free.dptr); return cudaSuccess;
    case cudaGraphNodeTypeConditional: {
      // The runtime's node runs in the current context, the one its handle was created in.
      const cudaConditionalNodeParams& c = p->conditional;
      out->conditional = CUDA_CONDITIONAL_NODE_PARAMS{c.handle, static_cast<CUgraphConditionalNodeType>(c.type), c.size,
                                                      nullptr, current_context_handle()};
      return cudaSuccess;
    }
    default: return cudaSuccess;  // the driver refuses the type
  }
}

}  // namespace
}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaGraphAddNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph, const cudaGraphNode_t* pDependencies,
                             const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                             struct cudaGraphNodeParams* nodeParams) {
  return api_call([&] {
    return with_context([&] {
      CUgraphNodeParams driver{};
      if (cudaError_t status = driver_node_params(nodeParams, &driver); status != cudaSuccess) return status;
      const cudaError_t status = call_driver<&DriverTable::cuGraphAddNode>(
          pGraphNode, graph, pDependencies, reinterpret_cast<const CUgraphEdgeData*>(dependencyData),
          numDependencies, &driver);
      if (status == cudaSuccess && nodeParams->type == cudaGraphNodeTypeMemAlloc)
        nodeParams->alloc.dptr = reinterpret_cast<void*>(driver.alloc.dptr);
      if (status == cudaSuccess && nodeParams->type == cudaGraphNodeTypeConditional)
        nodeParams->conditional.phGraph_out = driver.conditional.phGraph_out;  // the node's bodies
      return status;
    });
  });
}

cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams* nodeParams) {
  return api_call([&] {
    CUgraphNodeParams driver{};
    if (cudaError_t status = driver_node_params(nodeParams, &driver); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphNodeSetParams>(node, &driver);
  });
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                       struct cudaGraphNodeParams* nodeParams) {
  return api_call([&] {
    CUgraphNodeParams driver{};
    if (cudaError_t status = driver_node_params(nodeParams, &driver); status != cudaSuccess) return status;
    return call_driver<&DriverTable::cuGraphExecNodeSetParams>(graphExec, node, &driver);
  });
}

}  // extern "C"
