// Graphs built node by node (cuGraphCreate, cuGraphAdd*Node), edited (edges, node removal, clones),
// their queries, and executable graphs (cuGraphInstantiate*, cuGraphLaunch, cuGraphUpload,
// cuGraphExecDestroy).
//
// Every node keeps the operation that does its work (graphs.h): a memset or a copy writes memory, a
// host node calls its function, a kernel node does nothing (no device code runs, as for launches),
// empty and memory nodes do nothing (graph memory lives as long as its graph). Instantiation takes
// the operations in an order that respects every dependency (edges added later may point either
// way); a launch queues them, in that order, as one operation on its stream, so
// the graph's work is ordered with everything else there exactly like the same work issued one call
// at a time. A graph's memory stays while the graph or any instantiation of it lives.
#include "contexts.h"
#include "device_limits.h"
#include "kernels.h"
#include "pools.h"
#include "state.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

using namespace cudasim;

// A stream's capture graph counts: cuStreamGetCaptureInfo hands it out for nodes to be added to it
// (with cuStreamUpdateCaptureDependencies) and user objects given to it.
CUresult cudasim::check_graph(State& st, CUgraph graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return st.graphs.contains(graph) || graph_being_captured(st, graph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool cudasim::has_memory_nodes(const CUgraph_st* graph) {
  return std::any_of(graph->nodes.begin(), graph->nodes.end(), [](const auto& node) {
    return node->kind == NodeKind::MemAlloc || node->kind == NodeKind::MemFree;
  });
}

bool cudasim::live_node(State& st, CUgraphNode node) {
  if (node == nullptr || check_graph(st, node->graph) != CUDA_SUCCESS) return false;
  const auto& nodes = node->graph->nodes;
  return std::any_of(nodes.begin(), nodes.end(), [node](const auto& owned) { return owned.get() == node; });
}

namespace {

bool owns(const CUgraph_st* graph, const CUgraphNode_st* node) {
  return std::any_of(graph->nodes.begin(), graph->nodes.end(), [node](const auto& owned) { return owned.get() == node; });
}

// The dependencies a new node of `graph` may have: nodes of that graph, listed once each.
CUresult node_dependencies(CUgraph graph, const CUgraphNode* dependencies, size_t count,
                           std::vector<CUgraphNode_st*>* out) {
  if (count > 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNode_st* node = dependencies[i];
    if (!owns(graph, node) || std::find(out->begin(), out->end(), node) != out->end()) return CUDA_ERROR_INVALID_VALUE;
    out->push_back(node);
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cudasim::add_graph_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                 NodeKind kind, const std::function<CUresult(State&, Operation*)>& make,
                                 const std::function<void(CUgraphNode_st*)>& keep) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  std::vector<CUgraphNode_st*> after;
  if (CUresult rc = node_dependencies(graph, dependencies, count, &after); rc != CUDA_SUCCESS) return rc;
  Operation op;
  if (CUresult rc = make(l.st, &op); rc != CUDA_SUCCESS) return rc;
  *out = append_node(graph, kind, std::move(after), std::move(op));
  if (keep) keep(*out);
  return CUDA_SUCCESS;
}

namespace {

template <typename Make, typename Keep = std::nullptr_t>
CUresult add_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, NodeKind kind,
                  Make make, Keep keep = nullptr) {
  return add_graph_node(out, graph, dependencies, count, kind, make, keep);
}

// Device memory (or mapped page-locked memory) for a node to write or read.
bool device_range(State& st, CUdeviceptr ptr, std::size_t bytes) {
  if (bytes == 0) return true;
  return find_allocation(st, ptr, bytes) != nullptr || host_range_pinned(st, ptr, bytes);
}

}  // namespace

// Copy nodes take what cuMemcpy3D takes (arrays included, copies_3d.cpp), with a non-empty extent.
CUresult cudasim::memcpy_node(State& st, const CUDA_MEMCPY3D* p, Operation* op) {
  if (p == nullptr || p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  return copy_operation(st, *p, op);
}

namespace {
template <typename T>
Operation fill(std::uintptr_t dst, std::size_t pitch, std::size_t width, std::size_t height, T value) {
  return [=] {
    for (std::size_t row = 0; row < height; ++row) {
      T* p = reinterpret_cast<T*>(dst + row * pitch);
      for (std::size_t i = 0; i < width; ++i) p[i] = value;
    }
  };
}

}  // namespace

CUresult cudasim::memset_node(State& st, const CUDA_MEMSET_NODE_PARAMS* p, Operation* op) {
  if (p == nullptr || p->width == 0 || p->height == 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned size = p->elementSize;
  if (size != 1 && size != 2 && size != 4) return CUDA_ERROR_INVALID_VALUE;
  std::size_t row = 0, reach = 0;
  if (__builtin_mul_overflow(p->width, size, &row) || p->dst % size != 0) return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1 && p->pitch < row) return CUDA_ERROR_INVALID_VALUE;
  if (__builtin_mul_overflow(p->height - 1, p->pitch, &reach) || __builtin_add_overflow(reach, row, &reach))
    return CUDA_ERROR_INVALID_VALUE;
  if (!device_range(st, p->dst, reach)) return CUDA_ERROR_INVALID_VALUE;
  switch (size) {
    case 1: *op = fill<std::uint8_t>(p->dst, p->pitch, p->width, p->height, static_cast<std::uint8_t>(p->value)); break;
    case 2: *op = fill<std::uint16_t>(p->dst, p->pitch, p->width, p->height, static_cast<std::uint16_t>(p->value)); break;
    default: *op = fill<std::uint32_t>(p->dst, p->pitch, p->width, p->height, p->value); break;
  }
  return CUDA_SUCCESS;
}

// A kernel node: a live function or library kernel (func, which may name a kernel, else kern) and a
// launch shape the device takes. Like a launch, it runs no device code.
CUresult cudasim::kernel_node(State& st, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelState& ks = kernels(st);
  const FunctionSettings* settings = nullptr;
  auto* function = reinterpret_cast<CUfunc_st*>(p->func);
  CUkern_st* kernel = p->func != nullptr ? reinterpret_cast<CUkern_st*>(p->func) : p->kern;
  if (p->func != nullptr && ks.functions.contains(function)) settings = &function->settings;
  else if (ks.kernels.contains(kernel)) settings = &kernel->settings;
  else return CUDA_ERROR_INVALID_VALUE;
  if (p->kernelParams != nullptr && p->extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  const unsigned shared = p->sharedMemBytes;
  std::uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0 || grid[i] > kMaxGridDim[i] || block[i] > kMaxBlockDim[i])
      return CUDA_ERROR_INVALID_VALUE;
    threads *= block[i];
  }
  if (threads > kMaxThreadsPerBlock || shared > static_cast<unsigned>(settings->max_dynamic_shared))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

namespace {

CUresult add_kernel_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                         const CUDA_KERNEL_NODE_PARAMS* p) {
  return add_node(
      out, graph, dependencies, count, NodeKind::Kernel, [&](State& st, Operation*) { return kernel_node(st, p); },
      [&](CUgraphNode_st* node) { node->kernel = *p; });
}

constexpr unsigned long long kInstantiateFlags =
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

// The graph's nodes in an order that respects every dependency, earlier-added nodes first where the
// edges allow; false when the edges make a cycle (cuGraphAddDependencies does not refuse one, but
// instantiation does: CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE).
bool dependency_order(const CUgraph_st& graph, std::vector<const CUgraphNode_st*>* order) {
  std::map<const CUgraphNode_st*, std::size_t> index;
  for (const auto& node : graph.nodes) index.emplace(node.get(), index.size());
  std::vector<std::size_t> waiting(graph.nodes.size());
  std::vector<std::vector<std::size_t>> dependents(graph.nodes.size());
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    waiting[i] = graph.nodes[i]->dependencies.size();
    for (const CUgraphNode_st* dep : graph.nodes[i]->dependencies) dependents[index.at(dep)].push_back(i);
  }
  std::set<std::size_t> ready;
  for (std::size_t i = 0; i < waiting.size(); ++i) {
    if (waiting[i] == 0) ready.insert(i);
  }
  while (!ready.empty()) {
    const std::size_t next = *ready.begin();
    ready.erase(ready.begin());
    order->push_back(graph.nodes[next].get());
    for (std::size_t dependent : dependents[next]) {
      if (--waiting[dependent] == 0) ready.insert(dependent);
    }
  }
  return order->size() == graph.nodes.size();
}

}  // namespace

CUctx_st* cudasim::kernel_context(State& st, const CUDA_KERNEL_NODE_PARAMS& p) {
  auto* function = reinterpret_cast<CUfunc_st*>(p.func);
  return p.func != nullptr && kernels(st).functions.contains(function) ? function->module->ctx : nullptr;
}

bool cudasim::build_exec_graph(State& st, const CUgraph_st& graph, ExecGraph* out) {
  std::vector<const CUgraphNode_st*> order;
  if (!dependency_order(graph, &order)) return false;
  std::map<const CUgraphNode_st*, std::size_t> index;
  for (const auto& node : graph.nodes) index.emplace(node.get(), index.size());
  for (const auto& node : graph.nodes) {
    ExecNode& made = out->nodes.emplace_back();
    made.node = node.get();
    made.kind = node->kind;
    for (const CUgraphNode_st* dep : node->dependencies) made.dependencies.push_back(index.at(dep));
    made.op = node->op;
    made.event = node->event;
    made.memset = node->memset;
    made.copy = node->copy;
    made.memops = node->memops;
    made.memop_ctx = node->memop_ctx;
    if (node->kind == NodeKind::Kernel) made.kernel_ctx = kernel_context(st, node->kernel);
    // A conditional node's body, chosen by its handle's value, is its work.
    if (node->kind == NodeKind::Conditional && !conditional_work(st, *node, &made.op)) return false;
    // A child graph as it is now: changes made through cuGraphChildGraphNodeGetGraph count.
    if (node->child != nullptr) {
      made.child = std::make_unique<ExecGraph>();
      if (!build_exec_graph(st, *node->child, made.child.get())) return false;
    }
  }
  for (const CUgraphNode_st* node : order) out->order.push_back(index.at(node));
  return true;
}

namespace {

// The nodes a launch runs, in order, child graphs' in place of their nodes.
void launch_steps(const ExecGraph& graph, std::vector<const ExecNode*>* steps) {
  for (std::size_t i : graph.order) {
    const ExecNode& node = graph.nodes[i];
    if (node.child) launch_steps(*node.child, steps);
    else if (node.enabled) steps->push_back(&node);  // a disabled node is an empty one
  }
}

}  // namespace

Operation cudasim::graph_work(const ExecGraph& graph) {
  std::vector<const ExecNode*> steps;
  launch_steps(graph, &steps);
  std::vector<Operation> ops;
  for (const ExecNode* step : steps) {
    if (step->op) ops.push_back(step->op);
  }
  return [ops = std::move(ops)] {
    for (const Operation& op : ops) op();
  };
}

namespace {

CUresult instantiate(CUgraphExec* out, CUgraph graph, unsigned long long flags,
                     CUgraphInstantiateResult* result = nullptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (out == nullptr || (flags & ~kInstantiateFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  // "The graph will not be instantiable until the user calls cuStreamEndCapture."
  if (graph_being_captured(l.st, graph)) return CUDA_ERROR_INVALID_VALUE;
  // "If hGraph contains any allocation or free nodes, there can be at most one executable graph in
  // existence for that graph at a time" (cuGraphInstantiateWithParams, whose only error is this one).
  if (has_memory_nodes(graph) && l.st.graph_exec_counts.contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_unique<CUgraphExec_st>();
  if (!build_exec_graph(l.st, *graph, &exec->nodes)) {
    if (result != nullptr) *result = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
    return CUDA_ERROR_INVALID_VALUE;
  }
  exec->ctx = ctx;
  exec->device = ctx->device;
  exec->graph = graph;
  exec->flags = flags;
  exec->user_refs = hold_graph_user_objects(*graph);
  ++l.st.graph_exec_counts[graph];
  *out = exec.release();
  l.st.graph_execs.insert(*out);
  return CUDA_SUCCESS;
}

// A launch queues the nodes' work on the stream in order, as few operations as the event nodes
// allow: each event-record or event-wait node is recorded or waited for between them, on that
// stream, as cuEventRecord and cuStreamWaitEvent would at that point (an event destroyed since is
// skipped). Queued launches keep their own copies of the operations.
CUresult launch(CUgraphExec exec, CUstream handle, bool per_thread_default, bool upload_only) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (exec == nullptr || !l.st.graph_execs.contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<CUstream_st> stream;
  if (CUresult rc = resolve_stream(l.st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
  if (upload_only) return CUDA_SUCCESS;  // nothing to upload: the graph is ready as instantiated
  std::vector<const ExecNode*> steps;
  launch_steps(exec->nodes, &steps);
  std::vector<Operation> batch;
  // Each queued part keeps the executable graph's user objects alive until it has run.
  auto run = [&batch, refs = exec->user_refs] {
    return [ops = std::exchange(batch, {}), refs] {
      for (const Operation& op : ops) op();
    };
  };
  std::uint64_t kernel_nodes = 0;
  for (const ExecNode* step : steps) {
    if (step->op) batch.push_back(step->op);
    kernel_nodes += step->kind == NodeKind::Kernel ? 1 : 0;
  }
  bool captured = false;  // launched into a capture: one child-graph node doing the same work
  if (CUresult rc = capture_work(l.st, stream, NodeKind::Graph, &captured, run()); rc != CUDA_SUCCESS || captured)
    return rc;
  l.st.device(exec->device).stats.kernel_launches += kernel_nodes;
  if (kernel_nodes > 0) warn_kernels_do_not_run(l.st);
  for (const ExecNode* step : steps) {
    const bool event_node = step->kind == NodeKind::EventRecord || step->kind == NodeKind::EventWait;
    auto event = event_node ? l.st.events.find(step->event) : l.st.events.end();
    if (event == l.st.events.end()) {
      if (step->op) batch.push_back(step->op);
      continue;
    }
    if (!batch.empty()) submit(l.st, stream, run());
    if (step->kind == NodeKind::EventRecord) record_event_on(l.st, stream, event->second);
    else wait_event_on(l.st, stream, *event->second);
  }
  submit(l.st, stream, run());
  return CUDA_SUCCESS;
}

CUgraphNodeType node_type(NodeKind kind) {
  switch (kind) {
    case NodeKind::Memcpy: return CU_GRAPH_NODE_TYPE_MEMCPY;
    case NodeKind::Memset: return CU_GRAPH_NODE_TYPE_MEMSET;
    case NodeKind::Host: return CU_GRAPH_NODE_TYPE_HOST;
    case NodeKind::EventRecord: return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    case NodeKind::EventWait: return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    case NodeKind::MemAlloc: return CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    case NodeKind::MemFree: return CU_GRAPH_NODE_TYPE_MEM_FREE;
    case NodeKind::Kernel: return CU_GRAPH_NODE_TYPE_KERNEL;
    case NodeKind::Empty: return CU_GRAPH_NODE_TYPE_EMPTY;
    case NodeKind::Graph: return CU_GRAPH_NODE_TYPE_GRAPH;
    case NodeKind::BatchMemOp: return CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    case NodeKind::Conditional: return CU_GRAPH_NODE_TYPE_CONDITIONAL;
  }
  return CU_GRAPH_NODE_TYPE_EMPTY;
}

}  // namespace

CUresult cudasim::node_of_kind(Locked& l, CUgraphNode node, NodeKind kind) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return live_node(l.st, node) && node->kind == kind ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

namespace {

// The nodes `pick` selects, as the cuGraphGet*Nodes calls return them: with a null array the count,
// else up to *count of them and *count set to how many were written.
template <typename Pick>
CUresult list_nodes(CUgraph graph, CUgraphNode* nodes, size_t* count, Pick pick) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  std::vector<CUgraphNode> selected;
  for (const auto& node : graph->nodes) {
    if (pick(*node)) selected.push_back(node.get());
  }
  if (nodes == nullptr) {
    *count = selected.size();
    return CUDA_SUCCESS;
  }
  const size_t written = std::min(*count, selected.size());
  std::copy_n(selected.begin(), written, nodes);
  *count = written;
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* graph = new CUgraph_st();
  graph->ctx = ctx;
  l.st.graphs.insert(graph);
  *phGraph = graph;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                            size_t numDependencies) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, NodeKind::Empty,
                  [](State&, Operation*) { return CUDA_SUCCESS; });
}

CUresult cudasim::host_node(const CUDA_HOST_NODE_PARAMS* params, Operation* op) {
  if (params == nullptr || params->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *op = [fn = params->fn, data = params->userData] { fn(data); };
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                           size_t numDependencies, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return add_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::Host,
      [&](State&, Operation* op) { return host_node(nodeParams, op); },
      [&](CUgraphNode_st* node) { node->host = *nodeParams; });
}

CUDASIM_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::Host); rc != CUDA_SUCCESS) return rc;
  *nodeParams = hNode->host;
  return CUDA_SUCCESS;
}

// The node's work changes for later instantiations; existing ones keep what they took.
CUDASIM_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::Host); rc != CUDA_SUCCESS) return rc;
  Operation op;
  if (CUresult rc = host_node(nodeParams, &op); rc != CUDA_SUCCESS) return rc;
  hNode->host = *nodeParams;
  hNode->op = std::move(op);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                             CUcontext) {
  return add_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::Memset,
      [&](State& st, Operation* op) { return memset_node(st, memsetParams, op); },
      [&](CUgraphNode_st* node) { node->memset = *memsetParams; });
}

CUDASIM_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, const CUDA_MEMCPY3D* copyParams, CUcontext) {
  return add_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::Memcpy,
      [&](State& st, Operation* op) { return memcpy_node(st, copyParams, op); },
      [&](CUgraphNode_st* node) { node->copy = *copyParams; });
}

CUDASIM_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_KERNEL_NODE_PARAMS params = kernel_params_as<CUDA_KERNEL_NODE_PARAMS>(*nodeParams);
  return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, &params);
}

CUDASIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                const CUgraphNode* dependencies, size_t numDependencies,
                                                const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

namespace {
// An allocation node's parameters (cuda.h, CUDA_MEM_ALLOC_NODE_PARAMS): pinned device memory of a
// device that exists, no IPC handle types, a size, access descriptors as a pool takes them.
CUresult check_alloc_params(const State& st, const CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (p == nullptr || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  const CUmemPoolProps& props = p->poolProps;
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
      props.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(st, props.location.id))
    return CUDA_ERROR_INVALID_VALUE;
  if (p->accessDescCount > st.devices.size()) return CUDA_ERROR_INVALID_VALUE;  // "must not exceed the number of GPUs"
  return check_access_descs(st, props.location.id, p->accessDescs, p->accessDescCount);
}
}  // namespace

// The memory is the graph's as soon as the node exists, as for a captured cuMemAllocAsync: it is
// mapped now and lives until the graph and every instantiation of it are gone.
CUDASIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                               size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  CUdeviceptr dptr = 0;
  return add_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::MemAlloc,
      [&](State& st, Operation*) {
        if (hGraph->owner != nullptr) return CUDA_ERROR_INVALID_VALUE;  // a child graph takes no memory nodes
        if (CUresult rc = check_alloc_params(st, nodeParams); rc != CUDA_SUCCESS) return rc;
        return allocate_graph_memory(st, hGraph, nodeParams->poolProps.location.id, nodeParams->bytesize, &dptr);
      },
      [&](CUgraphNode_st* node) {
        nodeParams->dptr = dptr;
        node->alloc = *nodeParams;
        node->access.assign(nodeParams->accessDescs, nodeParams->accessDescs + nodeParams->accessDescCount);
      });
}

CUDASIM_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                              size_t numDependencies, CUdeviceptr dptr) {
  return add_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::MemFree,
      [&](State& st, Operation*) {
        return hGraph->owner != nullptr ? CUDA_ERROR_INVALID_VALUE : free_graph_memory(st, hGraph, dptr);
      },
      [&](CUgraphNode_st* node) { node->freed = dptr; });
}

CUDASIM_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  if (params_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::MemAlloc); rc != CUDA_SUCCESS) return rc;
  *params_out = hNode->alloc;
  // Owned by the node, valid until it is destroyed.
  params_out->accessDescs = hNode->access.empty() ? nullptr : hNode->access.data();
  params_out->accessDescCount = hNode->access.size();
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr* dptr_out) {
  if (dptr_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::MemFree); rc != CUDA_SUCCESS) return rc;
  *dptr_out = hNode->freed;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  return list_nodes(hGraph, nodes, numNodes, [](const CUgraphNode_st&) { return true; });
}

CUDASIM_EXPORT CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode* rootNodes, size_t* numRootNodes) {
  return list_nodes(hGraph, rootNodes, numRootNodes, [](const CUgraphNode_st& n) { return n.dependencies.empty(); });
}

CUDASIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!live_node(l.st, hNode)) return CUDA_ERROR_INVALID_VALUE;
  *type = node_type(hNode->kind);
  return CUDA_SUCCESS;
}

namespace {
// A node's dependencies (or the nodes that depend on it), as the cuGraphGet*Nodes calls return nodes;
// edges are all default (zero).
CUresult related_nodes(CUgraphNode node, bool dependents, CUgraphNode* nodes, CUgraphEdgeData* edges, size_t* count) {
  if (count == nullptr || (edges != nullptr && nodes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!live_node(l.st, node)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> related;
  if (dependents) {
    for (const auto& other : node->graph->nodes) {
      const auto& deps = other->dependencies;
      if (std::find(deps.begin(), deps.end(), node) != deps.end()) related.push_back(other.get());
    }
  } else {
    related.assign(node->dependencies.begin(), node->dependencies.end());
  }
  if (nodes == nullptr) {
    *count = related.size();
    return CUDA_SUCCESS;
  }
  const size_t written = std::min(*count, related.size());
  std::copy_n(related.begin(), written, nodes);
  // "If numDependentNodes is higher than the actual number ..., the remaining entries will be set to NULL."
  std::fill(nodes + written, nodes + *count, nullptr);
  if (edges != nullptr) std::fill_n(edges, *count, CUgraphEdgeData{});
  *count = written;
  return CUDA_SUCCESS;
}
}  // namespace

CUDASIM_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode* dependencies,
                                                      CUgraphEdgeData* edgeData, size_t* numDependencies) {
  return related_nodes(hNode, false, dependencies, edgeData, numDependencies);
}
CUDASIM_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                                        CUgraphEdgeData* edgeData, size_t* numDependentNodes) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;  // an entry point of 12.3
  return related_nodes(hNode, true, dependentNodes, edgeData, numDependentNodes);
}
// The v1 forms: the same without edge data.
CUDASIM_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode* dependencies, size_t* numDependencies) {
  return cuGraphNodeGetDependencies_v2(hNode, dependencies, nullptr, numDependencies);
}
CUDASIM_EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                                     size_t* numDependentNodes) {
  return related_nodes(hNode, true, dependentNodes, nullptr, numDependentNodes);
}

CUDASIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags) {
  // The upload flag belongs to cuGraphInstantiateWithParams only.
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0) return CUDA_ERROR_INVALID_VALUE;
  return instantiate(phGraphExec, hGraph, flags);
}

// The pre-12.0 form (cuda.h's cuGraphInstantiate is cuGraphInstantiateWithFlags since): no node
// ever fails to instantiate here, so the error node is null and the log empty.
CUDASIM_EXPORT CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                           char* logBuffer, size_t bufferSize) {
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return instantiate(phGraphExec, hGraph, 0);
}
CUDASIM_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                              char* logBuffer, size_t bufferSize) {
  return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

namespace {
CUresult instantiate_with_params(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params,
                                 bool per_thread_default) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  params->hErrNode_out = nullptr;
  CUgraphInstantiateResult structure = CUDA_GRAPH_INSTANTIATE_ERROR;
  CUresult rc = instantiate(exec, graph, params->flags, &structure);
  if (rc == CUDA_SUCCESS && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0)
    rc = launch(*exec, params->hUploadStream, per_thread_default, true);
  params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : structure;
  return rc;
}
}  // namespace

CUDASIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate_with_params(phGraphExec, hGraph, instantiateParams, false);
}
CUDASIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate_with_params(phGraphExec, hGraph, instantiateParams, true);
}

CUDASIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream, false, false);
}
CUDASIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream, true, false);
}
CUDASIM_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream, false, true);
}
CUDASIM_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream, true, true);
}

CUDASIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (hGraphExec == nullptr || l.st.graph_execs.erase(hGraphExec) == 0) return CUDA_ERROR_INVALID_VALUE;
  CUgraph_st* graph = hGraphExec->graph;
  delete hGraphExec;  // its queued launches hold their own copies of the operations
  if (--l.st.graph_exec_counts[graph] == 0) {
    l.st.graph_exec_counts.erase(graph);
    release_unowned_graph(l.st, graph);  // a graph destroyed while instantiated goes now
  }
  return CUDA_SUCCESS;
}

bool cudasim::default_edges(const CUgraphEdgeData* edges, size_t count) {
  static constexpr CUgraphEdgeData kDefault{};
  for (size_t i = 0; edges != nullptr && i < count; ++i) {
    if (std::memcmp(&edges[i], &kDefault, sizeof kDefault) != 0) return false;
  }
  return true;
}

namespace {

// cuGraphAddDependencies / cuGraphRemoveDependencies: every pair checked before any is changed.
CUresult edit_dependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edges,
                           size_t count, bool add) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  if (count == 0) return CUDA_SUCCESS;  // from and to are ignored
  if (from == nullptr || to == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(edges, count)) return add ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  // "Dependencies cannot be removed from graphs which contain allocation or free nodes."
  if (!add && has_memory_nodes(graph)) return CUDA_ERROR_INVALID_VALUE;
  std::set<std::pair<CUgraphNode_st*, CUgraphNode_st*>> pairs;
  for (size_t i = 0; i < count; ++i) {
    if (!owns(graph, from[i]) || !owns(graph, to[i]) || from[i] == to[i]) return CUDA_ERROR_INVALID_VALUE;
    const auto& deps = to[i]->dependencies;
    const bool exists = std::find(deps.begin(), deps.end(), from[i]) != deps.end();
    // Adding an edge that exists, or removing one that does not, is an error; so is naming one twice.
    if (exists == add || !pairs.emplace(from[i], to[i]).second) return CUDA_ERROR_INVALID_VALUE;
  }
  for (const auto& [before, after] : pairs) {
    if (add) after->dependencies.push_back(before);
    else std::erase(after->dependencies, before);
  }
  return CUDA_SUCCESS;
}

CUresult graph_edges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges, size_t* count) {
  if (count == nullptr || (from == nullptr) != (to == nullptr) || (edges != nullptr && from == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  std::vector<std::pair<CUgraphNode, CUgraphNode>> found;
  for (const auto& node : graph->nodes) {
    for (CUgraphNode_st* dep : node->dependencies) found.emplace_back(dep, node.get());
  }
  if (from == nullptr) {
    *count = found.size();
    return CUDA_SUCCESS;
  }
  // Entries past the edges there are become NULL.
  for (size_t i = 0; i < *count; ++i) {
    from[i] = i < found.size() ? found[i].first : nullptr;
    to[i] = i < found.size() ? found[i].second : nullptr;
    if (edges != nullptr) edges[i] = CUgraphEdgeData{};
  }
  *count = std::min(*count, found.size());
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                                  const CUgraphEdgeData* edgeData, size_t numDependencies) {
  return edit_dependencies(hGraph, from, to, edgeData, numDependencies, true);
}
CUDASIM_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                                     const CUgraphEdgeData* edgeData, size_t numDependencies) {
  return edit_dependencies(hGraph, from, to, edgeData, numDependencies, false);
}
// The v1 forms name default edges only, as the _v2 forms do with NULL edge data.
CUDASIM_EXPORT CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to, size_t count) {
  return cuGraphAddDependencies_v2(hGraph, from, to, nullptr, count);
}
CUDASIM_EXPORT CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to, size_t count) {
  return cuGraphRemoveDependencies_v2(hGraph, from, to, nullptr, count);
}

CUDASIM_EXPORT CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  return graph_edges(hGraph, from, to, nullptr, numEdges);
}
CUDASIM_EXPORT CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to,
                                           CUgraphEdgeData* edgeData, size_t* numEdges) {
  return graph_edges(hGraph, from, to, edgeData, numEdges);
}

// The node goes with every edge to or from it. Not in graphs with memory nodes, whose nodes cannot
// be deleted (cuda.h).
CUDASIM_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!live_node(l.st, hNode) || has_memory_nodes(hNode->graph)) return CUDA_ERROR_INVALID_VALUE;
  destroy_child_graph(l.st, *hNode);
  auto& nodes = hNode->graph->nodes;
  for (const auto& node : nodes) std::erase(node->dependencies, hNode);
  std::erase_if(nodes, [hNode](const auto& owned) { return owned.get() == hNode; });
  return CUDA_SUCCESS;
}

namespace {
// A copy of every node (its operation, parameters and embedded graph) and edge, held by the program.
CUgraph_st* clone_graph(State& st, const CUgraph_st& original) {
  auto* clone = new CUgraph_st();
  clone->ctx = original.ctx;
  std::unordered_map<const CUgraphNode_st*, CUgraphNode_st*> copies;
  for (const auto& node : original.nodes) {
    clone->nodes.push_back(std::make_unique<CUgraphNode_st>(*node));
    CUgraphNode_st* copy = clone->nodes.back().get();
    copy->graph = clone;
    copy->cloned_from = node.get();
    if (node->child != nullptr) {
      copy->child = clone_graph(st, *node->child);
      copy->child->owner = copy;
    }
    copies[node.get()] = copy;
  }
  for (const auto& node : clone->nodes) {
    for (CUgraphNode_st*& dep : node->dependencies) dep = copies.at(dep);
  }
  copy_graph_user_objects(original, clone);
  st.graphs.insert(clone);
  return clone;
}

// The node of `clone` (or of a graph embedded in it) copied from `original`.
CUgraphNode_st* find_in_clone(const CUgraph_st& clone, const CUgraphNode_st* original) {
  for (const auto& node : clone.nodes) {
    if (node->cloned_from == original) return node.get();
    if (node->child != nullptr) {
      if (CUgraphNode_st* found = find_in_clone(*node->child, original)) return found;
    }
  }
  return nullptr;
}
}  // namespace

// Graphs with memory nodes cannot be cloned (cuda.h): CUDA_ERROR_NOT_SUPPORTED.
CUDASIM_EXPORT CUresult cuGraphClone(CUgraph* phGraphClone, CUgraph originalGraph) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (phGraphClone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_graph(l.st, originalGraph); rc != CUDA_SUCCESS) return rc;
  // Nor graphs with conditional nodes (cuda.h).
  if (has_memory_nodes(originalGraph) || has_conditional_nodes(*originalGraph)) return CUDA_ERROR_NOT_SUPPORTED;
  *phGraphClone = clone_graph(l.st, *originalGraph);
  return CUDA_SUCCESS;
}

// The original node must still be in its graph, and its copy in the clone.
CUDASIM_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode* phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph) {
  if (phNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, hClonedGraph); rc != CUDA_SUCCESS) return rc;
  if (!live_node(l.st, hOriginalNode)) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNode_st* found = find_in_clone(*hClonedGraph, hOriginalNode);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phNode = found;
  return CUDA_SUCCESS;
}

// The node embeds a clone of childGraph, made now; a graph with memory nodes cannot be embedded.
CUDASIM_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode* dependencies, size_t numDependencies,
                                                 CUgraph childGraph) {
  CUgraph_st* embedded = nullptr;
  return add_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::Graph,
      [&](State& st, Operation*) {
        if (CUresult rc = check_graph(st, childGraph); rc != CUDA_SUCCESS) return rc;
        if (has_memory_nodes(childGraph)) return CUDA_ERROR_INVALID_VALUE;
        if (has_conditional_nodes(*childGraph)) return CUDA_ERROR_NOT_SUPPORTED;  // it would be cloned
        embedded = clone_graph(st, *childGraph);
        return CUDA_SUCCESS;
      },
      [&](CUgraphNode_st* node) {
        node->child = embedded;
        embedded->owner = node;
      });
}

// The embedded graph itself, not a copy: what is done to it changes what the node runs.
CUDASIM_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph* phGraph) {
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::Graph); rc != CUDA_SUCCESS) return rc;
  // A captured graph launch keeps only the launch's work, no graph to hand out.
  if (hNode->child == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  *phGraph = hNode->child;
  return CUDA_SUCCESS;
}
