// Executable graphs changed in place: one node's parameters (cuGraphExec*NodeSetParams,
// cuGraphExecEvent*NodeSetEvent, cuGraphExecChildGraphNodeSetParams) or every node's from a graph of
// the same shape (cuGraphExecUpdate), nodes disabled and enabled again (cuGraphNodeSetEnabled), and
// the flags an executable graph was made with.
//
// An executable graph keeps, per node of the graph it was instantiated from, what the node does
// (graphs.h, ExecNode); these calls replace that and nothing else: the graph is not changed, and
// launches already queued run what they took. Nodes are named by the node of the instantiated graph
// (a child graph's included). cuGraphExecUpdate pairs the nodes of the two graphs by the order in
// which they were added, as graphs built the same way (or captured from the same code) have them.
#include "state.h"

#include <algorithm>

using namespace cudasim;

namespace {

ExecNode* find_exec_node(ExecGraph& graph, const CUgraphNode_st* node) {
  for (ExecNode& candidate : graph.nodes) {
    if (candidate.node == node) return &candidate;
    if (candidate.child) {
      if (ExecNode* found = find_exec_node(*candidate.child, node)) return found;
    }
  }
  return nullptr;
}

// The executable node that `node` (of the graph `exec` was instantiated from) became, of a kind
// `accepted` takes.
template <typename Accepted>
CUresult exec_node_if(Locked& l, CUgraphExec exec, CUgraphNode node, Accepted accepted, ExecNode** out) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (exec == nullptr || !l.st.graph_execs.contains(exec) || !live_node(l.st, node)) return CUDA_ERROR_INVALID_VALUE;
  *out = find_exec_node(exec->nodes, node);
  return *out != nullptr && accepted((*out)->kind) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult exec_node(Locked& l, CUgraphExec exec, CUgraphNode node, NodeKind kind, ExecNode** out) {
  return exec_node_if(l, exec, node, [kind](NodeKind k) { return k == kind; }, out);
}

// "Currently only kernel, memset and memcpy nodes are supported" (cuGraphNodeSetEnabled).
CUresult switchable_node(Locked& l, CUgraphExec exec, CUgraphNode node, ExecNode** out) {
  return exec_node_if(
      l, exec, node, [](NodeKind k) { return k == NodeKind::Kernel || k == NodeKind::Memset || k == NodeKind::Memcpy; },
      out);
}

// The device an operand lives on (-1: host memory), which an update may not change.
int operand_device(State& st, CUdeviceptr ptr) {
  const Allocation* a = find_allocation(st, ptr, 1);
  return a != nullptr ? a->device : -1;
}

// cuGraphExecUpdate's rules for memsets: the device may not change; a 2D memset may change only
// its address and value (a 1D one its dimensions too).
bool memset_updatable(State& st, const CUDA_MEMSET_NODE_PARAMS& was, const CUDA_MEMSET_NODE_PARAMS& now) {
  if (operand_device(st, was.dst) != operand_device(st, now.dst)) return false;
  if (was.height <= 1) return true;
  return was.height == now.height && was.width == now.width && was.pitch == now.pitch &&
         was.elementSize == now.elementSize;
}

// ... and for copies: neither side's memory type, nor the devices of device operands, may change.
bool copy_updatable(State& st, const CUDA_MEMCPY3D& was, const CUDA_MEMCPY3D& now) {
  if (was.srcMemoryType != now.srcMemoryType || was.dstMemoryType != now.dstMemoryType) return false;
  const bool src_device = was.srcMemoryType == CU_MEMORYTYPE_DEVICE;
  const bool dst_device = was.dstMemoryType == CU_MEMORYTYPE_DEVICE;
  return (!src_device || operand_device(st, was.srcDevice) == operand_device(st, now.srcDevice)) &&
         (!dst_device || operand_device(st, was.dstDevice) == operand_device(st, now.dstDevice));
}

// ... and for batch memory operations (cuGraphExecBatchMemOpNodeSetParams): the context, the count, each
// operation's type, a wait's flush bit and a barrier's flags stay; addresses, values and wait kinds
// may change.
bool memops_updatable(const std::vector<CUstreamBatchMemOpParams>& was, CUcontext was_ctx,
                      const CUstreamBatchMemOpParams* now, unsigned count, CUcontext now_ctx) {
  if (was_ctx != now_ctx || was.size() != count) return false;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& before = was[i];
    const CUstreamBatchMemOpParams& after = now[i];
    if (before.operation != after.operation) return false;
    const bool wait = after.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 || after.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    if (wait && ((before.waitValue.flags ^ after.waitValue.flags) & CU_STREAM_WAIT_VALUE_FLUSH) != 0) return false;
    if (after.operation == CU_STREAM_MEM_OP_BARRIER && before.memoryBarrier.flags != after.memoryBarrier.flags)
      return false;
  }
  return true;
}

CUgraphNode handle(const CUgraphNode_st* node) { return const_cast<CUgraphNode>(node); }

// Whether `now` (taken from a graph) can replace `was` node for node; if not, why, in *info.
bool same_shape(State& st, const ExecGraph& was, const ExecGraph& now, CUgraphExecUpdateResultInfo* info) {
  auto fail = [info](CUgraphExecUpdateResult result, const CUgraphNode_st* node, const CUgraphNode_st* from) {
    *info = CUgraphExecUpdateResultInfo{result, handle(node), handle(from)};
    return false;
  };
  if (was.nodes.size() != now.nodes.size()) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr, nullptr);
  for (std::size_t i = 0; i < now.nodes.size(); ++i) {
    const ExecNode& before = was.nodes[i];
    const ExecNode& after = now.nodes[i];
    // Graphs with memory nodes cannot be updated (cuGraphAddMemAllocNode's restrictions).
    if (after.kind == NodeKind::MemAlloc || after.kind == NodeKind::MemFree)
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, after.node, nullptr);
    if (before.kind != after.kind) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, after.node, before.node);
    if (before.dependencies.size() != after.dependencies.size())
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, after.node, nullptr);
    for (std::size_t dep : after.dependencies) {
      if (std::find(before.dependencies.begin(), before.dependencies.end(), dep) == before.dependencies.end())
        return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, after.node, now.nodes[dep].node);
    }
    const bool changed = (after.kind == NodeKind::Memset && !memset_updatable(st, before.memset, after.memset)) ||
                         (after.kind == NodeKind::Memcpy && !copy_updatable(st, before.copy, after.copy)) ||
                         (after.kind == NodeKind::BatchMemOp &&
                          !memops_updatable(before.memops, before.memop_ctx, after.memops.data(),
                                            static_cast<unsigned>(after.memops.size()), after.memop_ctx));
    if (changed) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, after.node, nullptr);
    // "The owning context of the function cannot change."
    if (after.kind == NodeKind::Kernel && after.kernel_ctx != before.kernel_ctx)
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE, after.node, nullptr);
    if (static_cast<bool>(before.child) != static_cast<bool>(after.child))
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, after.node, nullptr);
    if (before.child && !same_shape(st, *before.child, *after.child, info)) return false;
  }
  return true;
}

// Gives `into` the work of `from`, node for node (same_shape holds); `into` keeps its node keys.
void take_work(ExecGraph& into, ExecGraph& from) {
  for (std::size_t i = 0; i < into.nodes.size(); ++i) {
    ExecNode& target = into.nodes[i];
    ExecNode& source = from.nodes[i];
    target.op = std::move(source.op);
    target.event = source.event;
    target.memset = source.memset;
    target.copy = source.copy;
    target.memops = source.memops;
    target.kernel_ctx = source.kernel_ctx;
    if (target.child) take_work(*target.child, *source.child);
  }
}

CUresult exec_update(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *info = CUgraphExecUpdateResultInfo{CU_GRAPH_EXEC_UPDATE_ERROR, nullptr, nullptr};
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (exec == nullptr || !l.st.graph_execs.contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  ExecGraph now;
  if (!build_exec_graph(l.st, *graph, &now)) return CUDA_ERROR_INVALID_VALUE;  // a cycle
  if (!same_shape(l.st, exec->nodes, now, info)) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  take_work(exec->nodes, now);
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

// Replaces one executable node's work: make(state, &op) checks the parameters (as adding the node
// does) and gives the work; keep(node) stores what the node's later checks compare.
template <typename Make, typename Keep>
CUresult set_exec_node(CUgraphExec exec, CUgraphNode node, NodeKind kind, Make make, Keep keep) {
  Locked l;
  ExecNode* target = nullptr;
  if (CUresult rc = exec_node(l, exec, node, kind, &target); rc != CUDA_SUCCESS) return rc;
  Operation op;
  if (CUresult rc = make(l.st, *target, &op); rc != CUDA_SUCCESS) return rc;
  target->op = std::move(op);
  keep(*target);
  return CUDA_SUCCESS;
}

// A memset or copy node: its parameters checked as adding the node checks them, then against what
// the executable node had (`updatable`), and kept in `field` for the next check.
template <typename Params>
CUresult set_exec_operation(CUgraphExec exec, CUgraphNode node, NodeKind kind, const Params* params,
                            CUresult (*make)(State&, const Params*, Operation*),
                            bool (*updatable)(State&, const Params&, const Params&), Params ExecNode::*field) {
  return set_exec_node(
      exec, node, kind,
      [&](State& st, const ExecNode& n, Operation* op) {
        if (CUresult rc = make(st, params, op); rc != CUDA_SUCCESS) return rc;
        return updatable(st, n.*field, *params) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
      },
      [&](ExecNode& n) { n.*field = *params; });
}

// A kernel node's new function must belong to the context the old one did (a library kernel: any).
CUresult set_exec_kernel(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  return set_exec_node(
      exec, node, NodeKind::Kernel,
      [&](State& st, const ExecNode& n, Operation*) {
        if (CUresult rc = kernel_node(st, params); rc != CUDA_SUCCESS) return rc;
        return kernel_context(st, *params) == n.kernel_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
      },
      [](ExecNode&) {});
}

CUresult set_exec_event(CUgraphExec exec, CUgraphNode node, NodeKind kind, CUevent event) {
  return set_exec_node(
      exec, node, kind,
      [&](State& st, const ExecNode&, Operation*) {
        return event != nullptr && st.events.contains(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
      },
      [&](ExecNode& n) { n.event = event; });
}

}  // namespace

CUDASIM_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                          const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return set_exec_kernel(hGraphExec, hNode, nodeParams);
}
CUDASIM_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_KERNEL_NODE_PARAMS params = kernel_params_as<CUDA_KERNEL_NODE_PARAMS>(*nodeParams);
  return set_exec_kernel(hGraphExec, hNode, &params);
}

// The documented update rules apply: the operand's device and, for a 2D memset, its shape stay; for a
// copy, the memory types and the devices of its operands.
CUDASIM_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext) {
  return set_exec_operation(hGraphExec, hNode, NodeKind::Memset, memsetParams, memset_node, memset_updatable,
                            &ExecNode::memset);
}
CUDASIM_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_MEMCPY3D* copyParams, CUcontext) {
  return set_exec_operation(hGraphExec, hNode, NodeKind::Memcpy, copyParams, memcpy_node, copy_updatable,
                            &ExecNode::copy);
}

CUDASIM_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                     const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return set_exec_node(
      hGraphExec, hNode, NodeKind::Host,
      [&](State&, const ExecNode&, Operation* op) { return host_node(nodeParams, op); }, [](ExecNode&) {});
}

// The node of the graph keeps its own parameters; only later launches of hGraphExec change.
CUDASIM_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                           const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  return set_exec_node(
      hGraphExec, hNode, NodeKind::BatchMemOp,
      [&](State& st, const ExecNode& n, Operation* op) {
        if (CUresult rc = batch_memop_node_work(st, nodeParams, op); rc != CUDA_SUCCESS) return rc;
        return memops_updatable(n.memops, n.memop_ctx, nodeParams->paramArray, nodeParams->count, nodeParams->ctx)
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
      },
      [&](ExecNode& n) { n.memops.assign(nodeParams->paramArray, nodeParams->paramArray + nodeParams->count); });
}

CUDASIM_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return set_exec_event(hGraphExec, hNode, NodeKind::EventRecord, event);
}
CUDASIM_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return set_exec_event(hGraphExec, hNode, NodeKind::EventWait, event);
}

// childGraph must have the shape of the graph the node embeds (nodes added in the same order, the
// same edges, the same kinds) and no memory nodes; its nodes' work replaces the embedded graph's.
CUDASIM_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                           CUgraph childGraph) {
  Locked l;
  ExecNode* target = nullptr;
  if (CUresult rc = exec_node(l, hGraphExec, hNode, NodeKind::Graph, &target); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, childGraph); rc != CUDA_SUCCESS) return rc;
  if (!target->child || has_memory_nodes(childGraph)) return CUDA_ERROR_INVALID_VALUE;
  ExecGraph now;
  CUgraphExecUpdateResultInfo info{};
  if (!build_exec_graph(l.st, *childGraph, &now) || !same_shape(l.st, *target->child, now, &info))
    return CUDA_ERROR_INVALID_VALUE;
  take_work(*target->child, now);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                             CUgraphExecUpdateResultInfo* resultInfo) {
  return exec_update(hGraphExec, hGraph, resultInfo);
}

// The 10.2 form: the result and the node from hGraph that caused it, as separate outputs.
CUDASIM_EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode* hErrorNode_out,
                                          CUgraphExecUpdateResult* updateResult_out) {
  if (hErrorNode_out == nullptr || updateResult_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExecUpdateResultInfo info{};
  const CUresult rc = exec_update(hGraphExec, hGraph, &info);
  *hErrorNode_out = info.errorNode;
  *updateResult_out = info.result;
  return rc;
}

CUDASIM_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (hGraphExec == nullptr || !l.st.graph_execs.contains(hGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  *flags = hGraphExec->flags;
  return CUDA_SUCCESS;
}

// A disabled node is an empty node at later launches (launches already queued keep what they took);
// its parameters stay, and cuGraphExecUpdate and cuGraphExec*NodeSetParams leave the setting as it is.
CUDASIM_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
  Locked l;
  ExecNode* target = nullptr;
  if (CUresult rc = switchable_node(l, hGraphExec, hNode, &target); rc != CUDA_SUCCESS) return rc;
  target->enabled = isEnabled != 0;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int* isEnabled) {
  if (isEnabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  ExecNode* target = nullptr;
  if (CUresult rc = switchable_node(l, hGraphExec, hNode, &target); rc != CUDA_SUCCESS) return rc;
  *isEnabled = target->enabled ? 1 : 0;
  return CUDA_SUCCESS;
}
