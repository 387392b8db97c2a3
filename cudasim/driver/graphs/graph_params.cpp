// Node parameters of graphs built by hand: event-record and event-wait nodes (cuGraphAddEvent*Node,
// their events read and replaced), and the parameters of memset, copy and kernel nodes read back and
// replaced (cuGraph*NodeGetParams / SetParams), and the attributes of kernel nodes
// (cuGraphKernelNode{Get,Set,Copy}Attribute*), kept per node and changing nothing a launch does.
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

bool cudasim::launch_attribute_value_valid(CUlaunchAttributeID attr, const CUlaunchAttributeValue& value) {
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
      const CUaccessPolicyWindow& w = value.accessPolicyWindow;
      return w.hitRatio >= 0.0f && w.hitRatio <= 1.0f && w.hitProp >= CU_ACCESS_PROPERTY_NORMAL &&
             w.hitProp <= CU_ACCESS_PROPERTY_PERSISTING &&
             (w.missProp == CU_ACCESS_PROPERTY_NORMAL || w.missProp == CU_ACCESS_PROPERTY_STREAMING);
    }
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      return value.syncPolicy >= CU_SYNC_POLICY_AUTO && value.syncPolicy <= CU_SYNC_POLICY_BLOCKING_SYNC;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return value.clusterSchedulingPolicyPreference <= CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: return value.memSyncDomain <= CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING: return value.nvlinkUtilCentricScheduling <= 1;
    default: return true;
  }
}

namespace {

// The attributes cuda.h marks "Valid for graph nodes", each value checked where cuda.h bounds it.
CUresult check_kernel_attribute(CUkernelNodeAttrID attr, const CUkernelNodeAttrValue& value) {
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
      return launch_attribute_value_valid(attr, value) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default: return CUDA_ERROR_INVALID_VALUE;  // not an attribute of graph nodes
  }
}

}  // namespace

CUDASIM_EXPORT CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                      CUkernelNodeAttrValue* value_out) {
  if (check_kernel_attribute(attr, CUkernelNodeAttrValue{}) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return read_params(hNode, NodeKind::Kernel, value_out, [&](const CUgraphNode_st& n) {
    const auto found = n.attributes.find(attr);
    *value_out = found != n.attributes.end() ? found->second : CUkernelNodeAttrValue{};
  });
}

CUDASIM_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                      const CUkernelNodeAttrValue* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_kernel_attribute(attr, *value); rc != CUDA_SUCCESS) return rc;
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::Kernel); rc != CUDA_SUCCESS) return rc;
  hNode->attributes[attr] = *value;
  return CUDA_SUCCESS;
}

// Every attribute of src replaces dst's; both kernel nodes of graphs of the same context.
CUDASIM_EXPORT CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  Locked l;
  if (CUresult rc = node_of_kind(l, dst, NodeKind::Kernel); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = node_of_kind(l, src, NodeKind::Kernel); rc != CUDA_SUCCESS) return rc;
  if (dst->graph->ctx != src->graph->ctx) return CUDA_ERROR_INVALID_VALUE;
  if (dst != src) dst->attributes = src->attributes;
  return CUDA_SUCCESS;
}
