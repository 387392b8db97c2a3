// The generic node calls: cuGraphAddNode (+ _v2 with edge data), cuGraphNodeSetParams and
// cuGraphExecNodeSetParams. A CUgraphNodeParams names a node type and holds that type's parameters;
// each type simulated is served by the call of its own (graph_exec.cpp, graph_params.cpp,
// graph_update.cpp, stream_memops.cpp), so its checks, codes and effects are the same. Types not
// simulated (external-semaphore nodes), the parameters of conditional nodes changed, and the changes cuda.h
// documents as unsupported (memory nodes' parameters) answer CUDA_ERROR_NOT_SUPPORTED.
#include "state.h"

#include <cstring>

using namespace cudasim;

namespace {

// "All unused bytes (reserved, padding) zeroed": the reserved fields around the union.
bool reserved_clear(const CUgraphNodeParams& p) {
  return p.reserved0[0] == 0 && p.reserved0[1] == 0 && p.reserved0[2] == 0 && p.reserved2 == 0;
}

CUDA_KERNEL_NODE_PARAMS kernel_params(const CUDA_KERNEL_NODE_PARAMS_v3& p) {
  CUDA_KERNEL_NODE_PARAMS out = kernel_params_as<CUDA_KERNEL_NODE_PARAMS>(p);
  out.kern = p.kern;
  out.ctx = p.ctx;
  return out;
}

// The v2 layout is the v1 layout (cuda.h); the node calls take v1.
CUDA_BATCH_MEM_OP_NODE_PARAMS batch_params(const CUDA_BATCH_MEM_OP_NODE_PARAMS_v2& p) {
  return CUDA_BATCH_MEM_OP_NODE_PARAMS{p.ctx, p.count, p.paramArray, p.flags};
}

CUDA_MEMSET_NODE_PARAMS memset_params(const CUDA_MEMSET_NODE_PARAMS_v2& p) {
  return CUDA_MEMSET_NODE_PARAMS{p.dst, p.pitch, p.value, p.elementSize, p.width, p.height};
}

// The copy node's own fields: "must be zero".
bool copy_flags_clear(const CUDA_MEMCPY_NODE_PARAMS& p) { return p.flags == 0 && p.reserved == 0; }

CUresult add_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                  CUgraphNodeParams* p) {
  if (p == nullptr || !reserved_clear(*p)) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS kernel = kernel_params(p->kernel);
      return cuGraphAddKernelNode_v2(out, graph, dependencies, count, &kernel);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (!copy_flags_clear(p->memcpy)) return CUDA_ERROR_INVALID_VALUE;
      return cuGraphAddMemcpyNode(out, graph, dependencies, count, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS set = memset_params(p->memset);
      return cuGraphAddMemsetNode(out, graph, dependencies, count, &set, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS host{p->host.fn, p->host.userData};
      return cuGraphAddHostNode(out, graph, dependencies, count, &host);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
      // The node embeds a clone; moving the graph into the node is not simulated.
      if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) return CUDA_ERROR_NOT_SUPPORTED;
      return cuGraphAddChildGraphNode(out, graph, dependencies, count, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY: return cuGraphAddEmptyNode(out, graph, dependencies, count);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuGraphAddEventRecordNode(out, graph, dependencies, count, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return cuGraphAddEventWaitNode(out, graph, dependencies, count, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2));
      CUDA_MEM_ALLOC_NODE_PARAMS alloc{p->alloc.poolProps, p->alloc.accessDescs, p->alloc.accessDescCount,
                                       p->alloc.bytesize, 0};
      const CUresult rc = cuGraphAddMemAllocNode(out, graph, dependencies, count, &alloc);
      if (rc == CUDA_SUCCESS) p->alloc.dptr = alloc.dptr;  // "out: address of the allocation"
      return rc;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return cuGraphAddMemFreeNode(out, graph, dependencies, count, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      const CUDA_BATCH_MEM_OP_NODE_PARAMS batch = batch_params(p->memOp);
      return cuGraphAddBatchMemOpNode(out, graph, dependencies, count, &batch);
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return add_conditional_node(out, graph, dependencies, count, &p->conditional);
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// The node's type must be the one the parameters name.
CUresult check_type(CUgraphNode node, const CUgraphNodeParams* p) {
  if (p == nullptr || !reserved_clear(*p)) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  if (CUresult rc = cuGraphNodeGetType(node, &type); rc != CUDA_SUCCESS) return rc;
  return type == p->type ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUDASIM_EXPORT CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                       size_t numDependencies, CUgraphNodeParams* nodeParams) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

// Edges carry default data only (as cuGraphAddDependencies_v2 takes them): other edge data is
// CUDA_ERROR_NOT_SUPPORTED.
CUDASIM_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                          CUgraphNodeParams* nodeParams) {
  static constexpr CUgraphEdgeData kDefault{};
  for (size_t i = 0; dependencyData != nullptr && i < numDependencies; ++i) {
    if (std::memcmp(&dependencyData[i], &kDefault, sizeof kDefault) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

// A child graph node's graph is replaced through the graph cuGraphChildGraphNodeGetGraph returns;
// memory nodes' parameters cannot be changed (cuda.h).
CUDASIM_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams* nodeParams) {
  if (CUresult rc = check_type(hNode, nodeParams); rc != CUDA_SUCCESS) return rc;
  CUgraphNodeParams& p = *nodeParams;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS kernel = kernel_params(p.kernel);
      return cuGraphKernelNodeSetParams_v2(hNode, &kernel);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (!copy_flags_clear(p.memcpy)) return CUDA_ERROR_INVALID_VALUE;
      return cuGraphMemcpyNodeSetParams(hNode, &p.memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS set = memset_params(p.memset);
      return cuGraphMemsetNodeSetParams(hNode, &set);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS host{p.host.fn, p.host.userData};
      return cuGraphHostNodeSetParams(hNode, &host);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return cuGraphEventRecordNodeSetEvent(hNode, p.eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphEventWaitNodeSetEvent(hNode, p.eventWait.event);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      const CUDA_BATCH_MEM_OP_NODE_PARAMS batch = batch_params(p.memOp);
      return cuGraphBatchMemOpNodeSetParams(hNode, &batch);
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// The changes cuda.h allows per type are those of the type's own cuGraphExec*SetParams call.
CUDASIM_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 CUgraphNodeParams* nodeParams) {
  if (CUresult rc = check_type(hNode, nodeParams); rc != CUDA_SUCCESS) return rc;
  CUgraphNodeParams& p = *nodeParams;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS kernel = kernel_params(p.kernel);
      return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &kernel);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (!copy_flags_clear(p.memcpy)) return CUDA_ERROR_INVALID_VALUE;
      return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &p.memcpy.copyParams, p.memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS set = memset_params(p.memset);
      return cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &set, p.memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS host{p.host.fn, p.host.userData};
      return cuGraphExecHostNodeSetParams(hGraphExec, hNode, &host);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: return cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, p.graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY: {
      Locked l;
      return l.st.graph_execs.contains(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, p.eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, p.eventWait.event);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
      const CUDA_BATCH_MEM_OP_NODE_PARAMS batch = batch_params(p.memOp);
      return cuGraphExecBatchMemOpNodeSetParams(hGraphExec, hNode, &batch);
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}
