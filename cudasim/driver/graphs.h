// Stream capture and graphs (graphs.cpp), graphs built node by node, instantiated and launched
// (graph_exec.cpp). A capturing stream records its work as nodes of a graph instead of running it;
// each node keeps the operation that does its work, which a launch of the instantiated graph runs.
#pragma once

#include "cuda_api.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace cudasim {

enum class NodeKind { Memcpy, Memset, Host, EventRecord, EventWait, MemAlloc, MemFree, Kernel, Empty, Graph };

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
  // A child-graph node added by cuGraphAddChildGraphNode: its own copy of the graph, which
  // instantiation runs (a captured graph launch has none: its op does the work).
  CUgraph_st* child = nullptr;
};

// An instantiated graph: the operations of its graph's nodes, in an order that respects every
// dependency (the nodes' own), as the graph was when instantiated.
struct CUgraphExec_st {
  CUctx_st* ctx = nullptr;
  std::vector<std::function<void()>> ops;
  std::uint64_t kernels = 0;  // kernel nodes, counted in the report's kernel_launches per launch
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
};

namespace cudasim {

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
  // Per stream of the sequence, the nodes its next captured work depends on.
  std::map<CUstream_st*, std::vector<CUgraphNode_st*>> tails;
  std::vector<CUgraphNode> dependencies;  // handed out by cuStreamGetCaptureInfo
  std::vector<CUgraphEdgeData> edges;
};

}  // namespace cudasim
