// Node parameters of graphs built by hand: event-record and event-wait nodes (cuGraphAddEvent*Node,
// their events read and replaced), and the parameters of memset, copy and kernel nodes read back and
// replaced (cuGraph*NodeGetParams / SetParams).
//
// Replacing a node's parameters checks them as adding the node does and changes what later
// instantiations take; executable graphs keep what they took (graph_update.cpp changes those).
// Nodes recorded by stream capture answer the captured call's parameters (copies.cpp, kernels.cpp).
#include "state.h"

using namespace cudasim;

namespace {

// An event the program holds, for an event node.
bool live_event(State& st, CUevent event) { return event != nullptr && st.events.contains(event); }

CUresult add_event_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                        NodeKind kind, CUevent event) {
  return add_graph_node(
      out, graph, dependencies, count, kind,
      [&](State& st, Operation*) { return live_event(st, event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; },
      [&](CUgraphNode_st* node) { node->event = event; });
}

CUresult node_event(CUgraphNode node, NodeKind kind, CUevent* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, node, kind); rc != CUDA_SUCCESS) return rc;
  *out = node->event;
  return CUDA_SUCCESS;
}

CUresult set_node_event(CUgraphNode node, NodeKind kind, CUevent event) {
  Locked l;
  if (CUresult rc = node_of_kind(l, node, kind); rc != CUDA_SUCCESS) return rc;
  if (!live_event(l.st, event)) return CUDA_ERROR_INVALID_VALUE;
  node->event = event;
  return CUDA_SUCCESS;
}

// Reads a node's parameters: the node checked to be of `kind`, then get(node).
template <typename Get>
CUresult read_params(CUgraphNode node, NodeKind kind, const void* out, Get get) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, node, kind); rc != CUDA_SUCCESS) return rc;
  get(*node);
  return CUDA_SUCCESS;
}

// Replaces a node's parameters: make(state, &op) checks them and gives the new work, keep(node)
// stores them.
template <typename Make, typename Keep>
CUresult replace_params(CUgraphNode node, NodeKind kind, Make make, Keep keep) {
  Locked l;
  if (CUresult rc = node_of_kind(l, node, kind); rc != CUDA_SUCCESS) return rc;
  Operation op;
  if (CUresult rc = make(l.st, &op); rc != CUDA_SUCCESS) return rc;
  node->op = std::move(op);
  keep(*node);
  return CUDA_SUCCESS;
}

CUresult set_kernel_params(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  return replace_params(
      node, NodeKind::Kernel, [&](State& st, Operation*) { return kernel_node(st, params); },
      [&](CUgraphNode_st& n) { n.kernel = *params; });
}

}  // namespace

CUDASIM_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                  const CUgraphNode* dependencies, size_t numDependencies,
                                                  CUevent event) {
  return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, NodeKind::EventRecord, event);
}
CUDASIM_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                const CUgraphNode* dependencies, size_t numDependencies,
                                                CUevent event) {
  return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, NodeKind::EventWait, event);
}
CUDASIM_EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  return node_event(hNode, NodeKind::EventRecord, event_out);
}
CUDASIM_EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent* event_out) {
  return node_event(hNode, NodeKind::EventWait, event_out);
}
CUDASIM_EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return set_node_event(hNode, NodeKind::EventRecord, event);
}
CUDASIM_EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event) {
  return set_node_event(hNode, NodeKind::EventWait, event);
}

CUDASIM_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  return read_params(hNode, NodeKind::Memset, nodeParams, [&](const CUgraphNode_st& n) { *nodeParams = n.memset; });
}
CUDASIM_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  return replace_params(
      hNode, NodeKind::Memset, [&](State& st, Operation* op) { return memset_node(st, nodeParams, op); },
      [&](CUgraphNode_st& n) { n.memset = *nodeParams; });
}

CUDASIM_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D* nodeParams) {
  return read_params(hNode, NodeKind::Memcpy, nodeParams, [&](const CUgraphNode_st& n) { *nodeParams = n.copy; });
}
CUDASIM_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D* nodeParams) {
  return replace_params(
      hNode, NodeKind::Memcpy, [&](State& st, Operation* op) { return memcpy_node(st, nodeParams, op); },
      [&](CUgraphNode_st& n) { n.copy = *nodeParams; });
}

// The kernel arguments come back as given (the same array): no device code ever reads them.
CUDASIM_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return read_params(hNode, NodeKind::Kernel, nodeParams, [&](const CUgraphNode_st& n) { *nodeParams = n.kernel; });
}
CUDASIM_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return read_params(hNode, NodeKind::Kernel, nodeParams,
                     [&](const CUgraphNode_st& n) { *nodeParams = kernel_params_as<CUDA_KERNEL_NODE_PARAMS_v1>(n.kernel); });
}
CUDASIM_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return set_kernel_params(hNode, nodeParams);
}
CUDASIM_EXPORT CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_KERNEL_NODE_PARAMS params = kernel_params_as<CUDA_KERNEL_NODE_PARAMS>(*nodeParams);
  return set_kernel_params(hNode, &params);
}
