// Stream capture and graphs (graphs.cpp), graphs built node by node, instantiated and launched
// (graph_exec.cpp), node parameters read and changed (graph_params.cpp), executable graphs changed
// in place (graph_update.cpp). A capturing stream records its work as nodes of a graph instead of running it;
// each node keeps the operation that does its work, which a launch of the instantiated graph runs.
#pragma once

#include "cuda_api.h"
#include "streams.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace cudasim {

enum class NodeKind { Memcpy, Memset, Host, EventRecord, EventWait, MemAlloc, MemFree, Kernel, Empty, Graph, BatchMemOp,
                      Conditional };

}  // namespace cudasim

struct CUgraphNode_st {
  cudasim::NodeKind kind = cudasim::NodeKind::Host;
  CUgraph_st* graph = nullptr;
  std::vector<CUgraphNode_st*> dependencies;  // the nodes it follows (empty: a root)
  // What a launch of the graph does for this node, on the launching stream (empty: nothing, as for
  // kernels, which run no device code, and memory nodes, whose memory the graph holds throughout).
  std::function<void()> op;
  // What the node was made with, for the *GetParams calls. MemAlloc: the parameters given (or, when
  // captured, the device and size), with dptr set; accessDescs is answered from `access`.
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::vector<CUmemAccessDesc> access;
  CUdeviceptr freed = 0;  // MemFree: the allocation it frees
  CUDA_HOST_NODE_PARAMS host{};  // Host: the function and data (a captured stream callback's: none)
  // Memset, Memcpy, Kernel nodes: their parameters (captured ones: the captured call's).
  CUDA_MEMSET_NODE_PARAMS memset{};
  CUDA_MEMCPY3D copy{};
  CUDA_KERNEL_NODE_PARAMS kernel{};  // the argument array as given: no device code reads it
  // Kernel: the attributes set on it (cuGraphKernelNodeSetAttribute); one not set reads as zero.
  std::map<CUlaunchAttributeID, CUlaunchAttributeValue> attributes;
  CUevent event = nullptr;  // EventRecord, EventWait: the event (a captured internal wait: none)
  // A child-graph node added by cuGraphAddChildGraphNode: its own copy of the graph, which
  // instantiation runs (a captured graph launch has none: its op does the work).
  CUgraph_st* child = nullptr;
  // BatchMemOp: the operations (cuGraphBatchMemOpNodeGetParams hands out this array) and their context.
  std::vector<CUstreamBatchMemOpParams> memops;
  CUcontext memop_ctx = nullptr;
  // In a graph made by cuGraphClone: the node it copies, as a key only (cuGraphNodeFindInClone).
  const CUgraphNode_st* cloned_from = nullptr;
  // Conditional (graph_conditional.cpp): its handle, type, and body graphs, which it owns (as a
  // child-graph node owns its graph) and hands out through CUDA_CONDITIONAL_NODE_PARAMS::phGraph_out.
  CUgraphConditionalHandle condition = 0;
  CUgraphConditionalNodeType condition_type = CU_GRAPH_COND_TYPE_IF;
  std::vector<CUgraph_st*> bodies;
};

namespace cudasim {

// One node of an executable graph: what it does, taken from the graph's node when instantiated (or
// updated), and the node it came from, as a key only (that node may have gone since).
struct ExecGraph;
struct ExecNode {
  const CUgraphNode_st* node = nullptr;
  NodeKind kind = NodeKind::Empty;
  std::vector<std::size_t> dependencies;  // indices of the nodes of the same ExecGraph it follows
  Operation op;
  CUevent event = nullptr;  // EventRecord, EventWait: recorded or waited for at each launch
  CUDA_MEMSET_NODE_PARAMS memset{};  // what the update rules compare
  CUDA_MEMCPY3D copy{};
  CUctx_st* kernel_ctx = nullptr;  // the context owning a kernel node's function (null: any)
  std::vector<CUstreamBatchMemOpParams> memops;  // BatchMemOp: what the update rules compare
  CUcontext memop_ctx = nullptr;
  bool enabled = true;  // a disabled node (cuGraphNodeSetEnabled) does nothing at launch
  std::unique_ptr<ExecGraph> child;  // a child-graph node's graph
};
// Invariant: `nodes` are in the graph's insertion order; `order` lists every index once, each after
// those it depends on.
struct ExecGraph {
  std::vector<ExecNode> nodes;
  std::vector<std::size_t> order;
};

}  // namespace cudasim

// An instantiated graph: its graph's nodes as they were when instantiated, in an order that
// respects every dependency.
struct CUgraphExec_st {
  CUctx_st* ctx = nullptr;
  // The user-object references taken from the graph (and its child graphs) when instantiated; each
  // queued launch holds this too, so they are released once the executable graph is destroyed and
  // its launches have run.
  std::shared_ptr<void> user_refs;
  cudasim::ExecGraph nodes;
  std::uint64_t flags = 0;  // as instantiated
  int device = 0;
  CUgraph_st* graph = nullptr;  // kept (its memory with it) until its last instantiation goes
};

// Invariant: `allocations` are the bases of this graph's memory-allocation nodes not freed by one of
// its free nodes; each is a live AllocKind::Graph allocation until the graph is destroyed. `freed`:
// those a free node of the graph freed. The program no longer finds them (address queries, frees),
// but their memory stays mapped until the graph goes: every launch runs the work between the
// allocation node and the free node on it again.
struct FreedGraphAllocation {
  CUdeviceptr base = 0;
  int device = 0;
  std::uint64_t accounted = 0;
};
struct CUgraph_st {
  CUctx_st* ctx = nullptr;
  // The child-graph node that embeds this graph: the node owns it (cuGraphDestroy refuses it), and
  // it takes no memory nodes.
  CUgraphNode_st* owner = nullptr;
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  std::vector<CUdeviceptr> allocations;
  std::vector<FreedGraphAllocation> freed;
  // The user-object references the graph owns (user_objects.cpp), released when it is destroyed.
  std::map<CUuserObject_st*, unsigned> user_refs;
};

namespace cudasim {

// A conditional handle (cuGraphConditionalHandleCreate): the graph whose conditional nodes (or its
// child graphs') may use it, the context, and the value each launch starts with.
struct ConditionalHandle {
  CUgraph_st* graph = nullptr;
  CUcontext ctx = nullptr;
  unsigned default_value = 0;
  unsigned flags = 0;
};

// One capture sequence, from cuStreamBeginCapture to cuStreamEndCapture on `origin`. Other streams
// join it by waiting for an event recorded in it (the fork of a multi-stream capture) and must be
// joined back into the origin (it waits for an event recorded on them) before it ends.
// Invariant: while !ended, it is in State::captures, and every stream in `tails` (the origin and
// the streams that joined) has its `capture` pointing to it.
struct Capture {
  std::uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
  CUstream_st* origin = nullptr;
  CUgraph_st* graph = nullptr;
  bool invalidated = false;
  bool ended = false;
  // cuStreamBeginCaptureToGraph: `graph` is the program's own, which it keeps whatever the outcome.
  bool into_existing = false;
  // Per stream of the sequence, the nodes its next captured work depends on.
  std::map<CUstream_st*, std::vector<CUgraphNode_st*>> tails;
  std::vector<CUgraphNode> dependencies;  // handed out by cuStreamGetCaptureInfo
  std::vector<CUgraphEdgeData> edges;
};

}  // namespace cudasim
