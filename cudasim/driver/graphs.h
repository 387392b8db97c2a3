// Stream capture and graphs (graphs.cpp). A capturing stream records its work as nodes of a graph
// instead of running it; graphs can be destroyed but never instantiated or launched here.
#pragma once

#include "cuda_api.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace cudasim {

enum class NodeKind { Memcpy, Memset, Host, EventRecord, EventWait, MemAlloc, MemFree, Kernel };

}  // namespace cudasim

struct CUgraphNode_st {
  cudasim::NodeKind kind = cudasim::NodeKind::Host;
  CUgraph_st* graph = nullptr;
  CUgraphNode_st* dependency = nullptr;  // the node captured before it on the stream (null: first)
};

// Invariant: `allocations` are the bases of this graph's memory-allocation nodes not freed by one of
// its free nodes; each is a live AllocKind::Graph allocation until the graph is destroyed.
struct CUgraph_st {
  CUctx_st* ctx = nullptr;
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  std::vector<CUdeviceptr> allocations;
};

namespace cudasim {

// One capture sequence, from cuStreamBeginCapture to cuStreamEndCapture on `origin`.
// Invariant: while !ended, it is in State::captures and origin->capture points to it.
struct Capture {
  std::uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
  CUstream_st* origin = nullptr;
  CUgraph_st* graph = nullptr;
  bool invalidated = false;
  bool ended = false;
  CUgraphNode_st* last = nullptr;         // what the next captured node depends on
  std::vector<CUgraphNode> dependencies;  // handed out by cuStreamGetCaptureInfo
  std::vector<CUgraphEdgeData> edges;
};

}  // namespace cudasim
