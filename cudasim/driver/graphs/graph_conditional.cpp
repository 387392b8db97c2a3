// Conditional nodes: cuGraphConditionalHandleCreate and CU_GRAPH_NODE_TYPE_CONDITIONAL nodes added
// with cuGraphAddNode (if, while, switch).
//
// A conditional node owns its body graphs, made empty with the node and handed out for the program
// to fill (as a child-graph node owns its graph). On a device, kernels change the condition with
// cudaGraphSetConditional; no device code runs here, so a handle's value is the default value it
// was created with, at every launch (CU_GRAPH_COND_ASSIGN_DEFAULT or not: nothing else sets it). So
// an if node runs body 0 when that value is non-zero (else body 1 when it has two), a switch node
// runs body n for the value n (none past the last), and a while node with a non-zero value runs its
// body for ever, as a device whose kernels never clear the condition would. Instantiation checks
// the bodies hold only the node types cuda.h allows there (kernel, empty, child graph, memset, memcpy
// and conditional nodes, all the way down).
#include "contexts.h"
#include "state.h"

#include <algorithm>

using namespace cudasim;

namespace {

bool allowed_in_body(const CUgraph_st& graph) {
  return std::all_of(graph.nodes.begin(), graph.nodes.end(), [](const auto& node) {
    switch (node->kind) {
      case NodeKind::Kernel:
      case NodeKind::Empty:
      case NodeKind::Memset:
      case NodeKind::Memcpy:
      case NodeKind::Conditional: return true;  // its own bodies are checked when it is built
      case NodeKind::Graph: return node->child == nullptr || allowed_in_body(*node->child);
      default: return false;
    }
  });
}

// The handle may be used by nodes of its graph or of graphs embedded in it (child graphs and bodies).
bool handle_reaches(const CUgraph_st* handle_graph, const CUgraph_st* graph) {
  for (; graph != nullptr; graph = graph->owner != nullptr ? graph->owner->graph : nullptr) {
    if (graph == handle_graph) return true;
  }
  return false;
}

// "size: 1 for WHILE, 1 or 2 for IF, any value greater than zero for SWITCH."
bool valid_size(CUgraphConditionalNodeType type, unsigned size) {
  switch (type) {
    case CU_GRAPH_COND_TYPE_IF: return size == 1 || size == 2;
    case CU_GRAPH_COND_TYPE_WHILE: return size == 1;
    case CU_GRAPH_COND_TYPE_SWITCH: return size > 0;
    default: return false;
  }
}

}  // namespace

bool cudasim::has_conditional_nodes(const CUgraph_st& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const auto& node) {
    return node->kind == NodeKind::Conditional || (node->child != nullptr && has_conditional_nodes(*node->child));
  });
}

void cudasim::forget_conditional_handles(State& st, const CUgraph_st* graph) {
  std::erase_if(st.conditional_handles, [graph](const auto& entry) { return entry.second.graph == graph; });
}

bool cudasim::conditional_work(State& st, const CUgraphNode_st& node, Operation* op) {
  std::vector<Operation> bodies;
  for (const CUgraph_st* body : node.bodies) {
    ExecGraph built;
    if (!allowed_in_body(*body) || !build_exec_graph(st, *body, &built)) return false;
    bodies.push_back(graph_work(built));
  }
  const auto handle = st.conditional_handles.find(node.condition);
  const unsigned value = handle != st.conditional_handles.end() ? handle->second.default_value : 0;
  switch (node.condition_type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (value != 0) *op = bodies[0];
      else if (bodies.size() == 2) *op = bodies[1];
      return true;
    case CU_GRAPH_COND_TYPE_SWITCH:
      if (value < bodies.size()) *op = bodies[value];
      return true;
    default:  // WHILE
      if (value != 0) {
        *op = [body = bodies[0]] {
          for (;;) body();
        };
      }
      return true;
  }
}

CUresult cudasim::add_conditional_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                                       CUDA_CONDITIONAL_NODE_PARAMS* p) {
  std::vector<CUgraph_st*> bodies;
  return add_graph_node(
      out, graph, dependencies, count, NodeKind::Conditional,
      [&](State& st, Operation*) {
        const auto handle = st.conditional_handles.find(p->handle);
        if (handle == st.conditional_handles.end() || !handle_reaches(handle->second.graph, graph))
          return CUDA_ERROR_INVALID_VALUE;
        // "Must match context used to create the handle."
        if (p->ctx != handle->second.ctx || !valid_size(p->type, p->size)) return CUDA_ERROR_INVALID_VALUE;
        for (unsigned i = 0; i < p->size; ++i) {
          auto* body = new CUgraph_st();
          body->ctx = graph->ctx;
          st.graphs.insert(body);
          bodies.push_back(body);
        }
        return CUDA_SUCCESS;
      },
      [&](CUgraphNode_st* node) {
        node->condition = p->handle;
        node->condition_type = p->type;
        node->bodies = std::move(bodies);
        for (CUgraph_st* body : node->bodies) body->owner = node;
        p->phGraph_out = node->bodies.data();  // the node's, valid while it lives
      });
}

// The value each launch starts with is defaultLaunchValue (see above); the handle belongs to hGraph
// and goes with it.
CUDASIM_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph,
                                                       CUcontext ctx, unsigned int defaultLaunchValue,
                                                       unsigned int flags) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;  // an entry point of 12.3
  if (pHandle_out == nullptr || (flags != 0 && flags != CU_GRAPH_COND_ASSIGN_DEFAULT)) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, hGraph); rc != CUDA_SUCCESS) return rc;
  if (ctx == nullptr || !l.st.contexts.contains(ctx)) return CUDA_ERROR_INVALID_VALUE;
  const CUgraphConditionalHandle handle = ++l.st.last_conditional_handle;
  l.st.conditional_handles[handle] = ConditionalHandle{hGraph, ctx, defaultLaunchValue, flags};
  *pHandle_out = handle;
  return CUDA_SUCCESS;
}
