// cuGraphDebugDotPrint: a graph written as a Graphviz DOT file. Each node is a vertex labelled with
// its number in the graph and its type (and, with CU_GRAPH_DEBUG_DOT_FLAGS_HANDLES or _VERBOSE, its
// handle); each dependency an edge; a child graph or a conditional node's bodies a cluster of their
// own beside the node. The other detail flags are accepted: the simulated nodes have no device-side
// detail to add.
#include "state.h"

#include <cstdio>
#include <map>
#include <string>

using namespace cudasim;

namespace {

constexpr unsigned kDotFlags = (1u << 16) - 1;  // CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE .. _CONDITIONAL_NODE_PARAMS

const char* type_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::Kernel: return "KERNEL";
    case NodeKind::Memcpy: return "MEMCPY";
    case NodeKind::Memset: return "MEMSET";
    case NodeKind::Host: return "HOST";
    case NodeKind::Graph: return "GRAPH";
    case NodeKind::Empty: return "EMPTY";
    case NodeKind::EventWait: return "WAIT_EVENT";
    case NodeKind::EventRecord: return "EVENT_RECORD";
    case NodeKind::MemAlloc: return "MEM_ALLOC";
    case NodeKind::MemFree: return "MEM_FREE";
    case NodeKind::BatchMemOp: return "BATCH_MEM_OP";
    case NodeKind::Conditional: return "CONDITIONAL";
  }
  return "UNKNOWN";
}

// Appends `graph` as cluster `prefix`, its embedded graphs as clusters inside it.
void describe(const CUgraph_st& graph, const std::string& prefix, bool handles, std::string* out) {
  std::map<const CUgraphNode_st*, std::size_t> number;
  for (const auto& node : graph.nodes) number.emplace(node.get(), number.size());
  *out += "subgraph cluster_" + prefix + " {\nlabel=\"" + prefix + "\";\n";
  for (const auto& node : graph.nodes) {
    const std::string name = prefix + "_node_" + std::to_string(number.at(node.get()));
    std::string label = std::to_string(number.at(node.get())) + "\\n" + type_name(node->kind);
    if (handles) {
      char handle[32];
      std::snprintf(handle, sizeof handle, "\\n%p", static_cast<const void*>(node.get()));
      label += handle;
    }
    *out += "\"" + name + "\" [label=\"" + label + "\"];\n";
    for (const CUgraphNode_st* dep : node->dependencies)
      *out += "\"" + prefix + "_node_" + std::to_string(number.at(dep)) + "\" -> \"" + name + "\";\n";
    std::size_t embedded = 0;
    if (node->child != nullptr) describe(*node->child, name + "_graph_" + std::to_string(embedded++), handles, out);
    for (const CUgraph_st* body : node->bodies) describe(*body, name + "_graph_" + std::to_string(embedded++), handles, out);
  }
  *out += "}\n";
}

}  // namespace

// The file is written whole or the call fails with CUDA_ERROR_OPERATING_SYSTEM (what could be written
// of it stays).
CUDASIM_EXPORT CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char* path, unsigned int flags) {
  if (path == nullptr || (flags & ~kDotFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::string text = "digraph dot {\n";
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_graph(l.st, hGraph); rc != CUDA_SUCCESS) return rc;
    const bool handles = (flags & (CU_GRAPH_DEBUG_DOT_FLAGS_HANDLES | CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)) != 0;
    describe(*hGraph, "graph_1", handles, &text);
  }
  text += "}\n";
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  return written && closed ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}
