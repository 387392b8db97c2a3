// Stream capture (cuStreamBeginCapture .. cuStreamEndCapture) and graphs.
//
// Work enqueued on a capturing stream is recorded as a node of the capture's graph and not run.
// cuMemAllocAsync on a capturing stream makes a memory-allocation node: new graph-owned memory (a
// mapping of its own, not a pool block). A captured cuMemFreeAsync makes a free node: the program no
// longer finds the memory, but it stays mapped, since every launch of the graph runs the work
// between the two nodes on it again; it is released when the graph and every instantiation of it
// are destroyed. Each captured node keeps the operation that does its
// work, which launches of the instantiated graph run (graph_exec.cpp).
// The rules on "potentially unsafe" calls follow cuThreadExchangeStreamCaptureMode in cuda.h.
#include "contexts.h"
#include "state.h"

#include <algorithm>
#include <set>

using namespace cudasim;

namespace {

// The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
thread_local CUstreamCaptureMode t_interaction_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

bool valid_mode(CUstreamCaptureMode mode) {
  return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

// A node of work captured on `stream`: it follows the stream's tail and becomes it.
CUgraphNode_st* add_node(Capture& capture, CUstream_st* stream, NodeKind kind, Operation op = {}) {
  std::vector<CUgraphNode_st*>& tail = capture.tails[stream];
  CUgraphNode_st* node = append_node(capture.graph, kind, std::move(tail), std::move(op));
  tail.assign(1, node);
  return node;
}

// Whether every node in `tail` precedes (or is) one of `ends`: the join rule of cuStreamEndCapture.
bool joined_into(const std::vector<CUgraphNode_st*>& tail, const std::vector<CUgraphNode_st*>& ends) {
  std::set<CUgraphNode_st*> reached;
  std::vector<CUgraphNode_st*> pending(ends.begin(), ends.end());
  while (!pending.empty()) {
    CUgraphNode_st* node = pending.back();
    pending.pop_back();
    if (!reached.insert(node).second) continue;
    pending.insert(pending.end(), node->dependencies.begin(), node->dependencies.end());
  }
  return std::all_of(tail.begin(), tail.end(), [&](CUgraphNode_st* node) { return reached.contains(node); });
}

// The ongoing captures of blocking streams in `ctx`: those the legacy stream would depend on.
std::vector<Capture*> blocking_captures(State& st, CUctx_st* ctx) {
  std::vector<Capture*> found;
  for (auto& capture : st.captures) {
    if (capture->origin->ctx == ctx && capture->origin->blocking()) found.push_back(capture.get());
  }
  return found;
}

// Releases one graph allocation (a free node of its graph, or the graph's destruction).
void release_graph_allocation(State& st, CUdeviceptr dptr) {
  auto it = st.allocations.find(dptr);
  if (it == st.allocations.end() || it->second.kind != AllocKind::Graph) return;
  DeviceStats& stats = st.device(it->second.device).stats;
  stats.graph_bytes -= it->second.accounted;
  retire_mapping(st, st.mappings.extract(dptr).mapped());
  st.allocations.erase(it);
}

void destroy_graph(State& st, CUgraph_st* graph);

// Graphs embedded in the nodes go with them (their own instantiations may keep them a while).
void destroy_children(State& st, CUgraph_st* graph) {
  for (const auto& node : graph->nodes) destroy_child_graph(st, *node);
}

// The program's handle goes at once; the graph and its memory once no instantiation of it remains.
void destroy_graph(State& st, CUgraph_st* graph) {
  st.graphs.erase(graph);
  release_graph_user_objects(graph);  // instantiations hold references of their own
  forget_conditional_handles(st, graph);
  destroy_children(st, graph);
  if (st.graph_exec_counts.contains(graph)) return;
  for (CUdeviceptr dptr : graph->allocations) release_graph_allocation(st, dptr);
  for (const FreedGraphAllocation& freed : graph->freed) {
    st.device(freed.device).stats.graph_bytes -= freed.accounted;
    retire_mapping(st, st.mappings.extract(freed.base).mapped());
  }
  delete graph;
}

// Takes the capture off its streams (the origin and those that joined) and the ongoing list.
std::shared_ptr<Capture> end_capture(State& st, CUstream_st* stream) {
  std::shared_ptr<Capture> capture = stream->capture;
  for (auto& [member, tail] : capture->tails) member->capture.reset();
  capture->ended = true;
  std::erase(st.captures, capture);
  return capture;
}

// Nodes of `graph`, each once, as a capture's dependency set takes them.
bool nodes_of(const CUgraph_st* graph, const CUgraphNode* nodes, size_t count, std::vector<CUgraphNode_st*>* out) {
  if (count > 0 && nodes == nullptr) return false;
  for (size_t i = 0; i < count; ++i) {
    const bool owned = nodes[i] != nullptr && nodes[i]->graph == graph &&
                       std::any_of(graph->nodes.begin(), graph->nodes.end(),
                                   [&](const auto& node) { return node.get() == nodes[i]; });
    if (!owned) return false;
    if (std::find(out->begin(), out->end(), nodes[i]) == out->end()) out->push_back(nodes[i]);
  }
  return true;
}

// A capture into a new graph, or (`into`: cuStreamBeginCaptureToGraph) into the program's graph,
// its first captured node following `dependencies`.
CUresult begin_capture(CUstream handle, CUstreamCaptureMode mode, bool per_thread_default, CUgraph into = nullptr,
                       const CUgraphNode* dependencies = nullptr, const CUgraphEdgeData* edges = nullptr,
                       size_t count = 0) {
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
    // The legacy default stream cannot be captured (it synchronises with every blocking stream).
    if (stream->kind == StreamKind::Legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
    std::vector<CUgraphNode_st*> first;
    if (into != nullptr) {
      // A graph the program holds, not embedded in a node, not captured into already.
      if (check_graph(st, into) != CUDA_SUCCESS || into->owner != nullptr || graph_being_captured(st, into))
        return CUDA_ERROR_INVALID_VALUE;
      if (!nodes_of(into, dependencies, count, &first)) return CUDA_ERROR_INVALID_VALUE;
      if (!default_edges(edges, count)) return CUDA_ERROR_NOT_SUPPORTED;
    }
    auto capture = std::make_shared<Capture>();
    capture->id = ++st.last_capture_id;
    capture->mode = mode;
    capture->thread = std::this_thread::get_id();
    capture->origin = stream.get();
    capture->into_existing = into != nullptr;
    if (into != nullptr) {
      capture->graph = into;
    } else {
      capture->graph = new CUgraph_st();  // owned by the capture, then by the caller of EndCapture
      capture->graph->ctx = stream->ctx;
    }
    capture->tails[stream.get()] = std::move(first);
    stream->capture = capture;
    st.captures.push_back(std::move(capture));
    return CUDA_SUCCESS;
  });
}

CUresult end_capture_call(CUstream handle, CUgraph* graph_out, bool per_thread_default) {
  if (graph_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    // Only the stream that began the capture ends it.
    if (!stream->capture || stream->capture->origin != stream.get()) return CUDA_ERROR_ILLEGAL_STATE;
    if (stream->capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        stream->capture->thread != std::this_thread::get_id())
      return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    std::shared_ptr<Capture> capture = end_capture(st, stream.get());
    // Every stream that joined must have been joined back into the origin.
    const std::vector<CUgraphNode_st*>& ends = capture->tails[stream.get()];
    bool unjoined = false;
    for (const auto& [member, tail] : capture->tails) unjoined = unjoined || !joined_into(tail, ends);
    if (capture->invalidated || unjoined) {
      if (!capture->into_existing) destroy_graph(st, capture->graph);
      *graph_out = nullptr;
      return capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
    st.graphs.insert(capture->graph);
    *graph_out = capture->graph;
    return CUDA_SUCCESS;
  });
}

CUresult capture_info(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* count,
                      bool per_thread_default) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    // The legacy stream while a blocking stream captures: IMPLICIT, but (cuda.h) nothing is invalidated.
    if (stream->kind == StreamKind::Legacy && !blocking_captures(st, stream->ctx).empty())
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    const auto& capture = stream->capture;
    if (!capture) {
      *status = CU_STREAM_CAPTURE_STATUS_NONE;
      return CUDA_SUCCESS;
    }
    if (capture->invalidated) {
      *status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
      return CUDA_SUCCESS;
    }
    *status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id != nullptr) *id = capture->id;
    if (graph != nullptr) *graph = capture->graph;
    const std::vector<CUgraphNode_st*>& tail = capture->tails[stream.get()];
    capture->dependencies.assign(tail.begin(), tail.end());
    capture->edges.assign(capture->dependencies.size(), CUgraphEdgeData{});
    if (dependencies != nullptr) *dependencies = capture->dependencies.data();
    if (edges != nullptr) *edges = capture->edges.data();
    if (count != nullptr) *count = capture->dependencies.size();
    return CUDA_SUCCESS;
  });
}

// cuStreamUpdateCaptureDependencies: the nodes the stream's next captured work follows, added to
// or replacing its set. Nodes dropped from the set no longer count for the join rule.
CUresult update_capture_dependencies(CUstream handle, CUgraphNode* dependencies, const CUgraphEdgeData* edges,
                                     size_t count, unsigned flags, bool per_thread_default) {
  if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)
    return CUDA_ERROR_INVALID_VALUE;
  return with_stream(handle, per_thread_default, [&](State&, const std::shared_ptr<CUstream_st>& stream) {
    if (!stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
    Capture& capture = *stream->capture;
    if (capture.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    std::vector<CUgraphNode_st*>& tail = capture.tails[stream.get()];
    std::vector<CUgraphNode_st*> updated = flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES
                                               ? std::vector<CUgraphNode_st*>{}
                                               : tail;
    if (!nodes_of(capture.graph, dependencies, count, &updated)) return CUDA_ERROR_INVALID_VALUE;
    if (!default_edges(edges, count)) return CUDA_ERROR_NOT_SUPPORTED;
    tail = std::move(updated);
    return CUDA_SUCCESS;
  });
}

}  // namespace

namespace cudasim {

void invalidate(Capture& capture) { capture.invalidated = true; }

void destroy_child_graph(State& st, CUgraphNode_st& node) {
  for (CUgraph_st* body : std::exchange(node.bodies, {})) {  // a conditional node's
    body->owner = nullptr;
    destroy_graph(st, body);
  }
  if (node.child == nullptr) return;
  node.child->owner = nullptr;
  destroy_graph(st, std::exchange(node.child, nullptr));
}

CUgraphNode_st* append_node(CUgraph_st* graph, NodeKind kind, std::vector<CUgraphNode_st*> dependencies, Operation op) {
  auto node = std::make_unique<CUgraphNode_st>();
  node->kind = kind;
  node->graph = graph;
  node->dependencies = std::move(dependencies);
  node->op = std::move(op);
  graph->nodes.push_back(std::move(node));
  return graph->nodes.back().get();
}

CUresult capture_work(State& st, const std::shared_ptr<CUstream_st>& stream, NodeKind kind, bool* captured,
                      Operation op, CUgraphNode_st** node) {
  *captured = false;
  if (stream->capture) {
    if (stream->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    CUgraphNode_st* made = add_node(*stream->capture, stream.get(), kind, std::move(op));
    if (node != nullptr) *node = made;
    *captured = true;
    return CUDA_SUCCESS;
  }
  if (stream->kind == StreamKind::Legacy) {
    auto implicit = blocking_captures(st, stream->ctx);
    if (!implicit.empty()) {
      for (Capture* capture : implicit) invalidate(*capture);
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  }
  return CUDA_SUCCESS;
}

CUresult check_unsafe_call(State& st) {
  const auto self = std::this_thread::get_id();
  std::vector<Capture*> prohibiting;
  for (auto& capture : st.captures) {
    const bool own = capture->thread == self;
    bool prohibits = false;
    switch (t_interaction_mode) {
      case CU_STREAM_CAPTURE_MODE_GLOBAL:
        prohibits = own ? capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED
                        : capture->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        break;
      case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
        prohibits = own && capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        break;
      default:
        break;
    }
    if (prohibits) prohibiting.push_back(capture.get());
  }
  for (Capture* capture : prohibiting) invalidate(*capture);
  return prohibiting.empty() ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult check_stream_not_capturing(State& st, const std::shared_ptr<CUstream_st>& stream) {
  if (stream->capture) {
    invalidate(*stream->capture);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (stream->kind == StreamKind::Legacy) {
    auto implicit = blocking_captures(st, stream->ctx);
    if (!implicit.empty()) {
      for (Capture* capture : implicit) invalidate(*capture);
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  }
  return CUDA_SUCCESS;
}

CUresult check_context_not_capturing(State& st, CUctx_st* ctx) {
  bool found = false;
  for (auto& capture : st.captures) {
    if (capture->origin->ctx == ctx) {
      invalidate(*capture);
      found = true;
    }
  }
  return found ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult check_event_not_captured(State&, CUevent_st& event) {
  if (!event.captured_in || event.captured_in->ended) return CUDA_SUCCESS;
  invalidate(*event.captured_in);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult allocate_graph_memory(State& st, CUgraph_st* graph, int device, std::size_t bytes, CUdeviceptr* dptr) {
  Mapping mapping = map_device_memory(bytes);
  if (mapping.addr == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  auto base = reinterpret_cast<std::uintptr_t>(mapping.addr);
  st.allocations[base] = Allocation{base, bytes, mapping.length, device, nullptr, AllocKind::Graph, nullptr,
                                    ++st.last_buffer_id};
  st.mappings[base] = mapping;
  graph->allocations.push_back(base);
  DeviceStats& stats = st.device(device).stats;
  stats.graph_allocs++;
  stats.graph_bytes += mapping.length;
  stats.graph_peak_bytes = std::max(stats.graph_peak_bytes, stats.graph_bytes);
  Device& owner = st.device(device);
  owner.graph_used_high = std::max(owner.graph_used_high, stats.graph_bytes);
  owner.graph_reserved_high = std::max(owner.graph_reserved_high, stats.graph_bytes);
  *dptr = base;
  return CUDA_SUCCESS;
}

CUresult free_graph_memory(State& st, CUgraph_st* graph, CUdeviceptr dptr) {
  auto it = st.allocations.find(dptr);
  if (it == st.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  const Allocation& a = it->second;
  // A free node takes graph allocations only (cuMemFreeAsync, and cuGraphAddMemFreeNode: "an
  // address that was not returned by an allocation node"), of its own graph, once.
  if (a.kind != AllocKind::Graph) return CUDA_ERROR_INVALID_VALUE;
  auto& owned = graph->allocations;
  auto mine = std::find(owned.begin(), owned.end(), dptr);
  if (mine == owned.end()) return CUDA_ERROR_INVALID_VALUE;  // another graph's memory, or freed already
  owned.erase(mine);
  st.device(a.device).stats.graph_frees++;
  // Gone for the program at once; the memory stays with the graph, whose launches use it.
  graph->freed.push_back(FreedGraphAllocation{dptr, a.device, a.accounted});
  st.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult graph_allocate(State& st, CUstream_st* stream, int device, std::size_t bytes, CUdeviceptr* dptr) {
  Capture& capture = *stream->capture;
  if (capture.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (CUresult rc = allocate_graph_memory(st, capture.graph, device, bytes, dptr); rc != CUDA_SUCCESS) return rc;
  CUgraphNode_st* node = add_node(capture, stream, NodeKind::MemAlloc);
  node->alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  node->alloc.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
  node->alloc.bytesize = bytes;
  node->alloc.dptr = *dptr;
  return CUDA_SUCCESS;
}

CUresult graph_free(State& st, CUstream_st* stream, CUdeviceptr dptr) {
  Capture& capture = *stream->capture;
  if (capture.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (CUresult rc = free_graph_memory(st, capture.graph, dptr); rc != CUDA_SUCCESS) return rc;
  add_node(capture, stream, NodeKind::MemFree)->freed = dptr;
  return CUDA_SUCCESS;
}

void release_unowned_graph(State& st, CUgraph_st* graph) {
  if (!st.graphs.contains(graph)) destroy_graph(st, graph);
}

void abandon_capture(State& st, CUstream_st* stream) {
  if (!stream->capture) return;
  if (stream->capture->origin != stream) {  // a stream that joined leaves, and the capture cannot be completed
    invalidate(*stream->capture);
    stream->capture->tails.erase(stream);
    stream->capture.reset();
    return;
  }
  std::shared_ptr<Capture> capture = end_capture(st, stream);
  if (!capture->into_existing) destroy_graph(st, capture->graph);
}

bool graph_being_captured(const State& st, const CUgraph_st* graph) {
  return std::any_of(st.captures.begin(), st.captures.end(),
                     [graph](const auto& capture) { return capture->graph == graph; });
}

CUresult capture_event_record(State&, const std::shared_ptr<CUstream_st>& stream, CUevent_st& event) {
  Capture& capture = *stream->capture;
  if (capture.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  event.captured_in = stream->capture;
  event.captured_tail = capture.tails[stream.get()];
  return CUDA_SUCCESS;
}

CUresult capture_event_wait(State& st, const std::shared_ptr<CUstream_st>& stream, CUevent_st& event) {
  const std::shared_ptr<Capture> capture = event.captured_in;
  if (stream->capture == capture) {  // a dependency inside the sequence: the stream follows the record too
    if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    std::vector<CUgraphNode_st*>& tail = capture->tails[stream.get()];
    for (CUgraphNode_st* node : event.captured_tail) {
      if (std::find(tail.begin(), tail.end(), node) == tail.end()) tail.push_back(node);
    }
    return CUDA_SUCCESS;
  }
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_MERGE;  // two sequences cannot merge
  // The legacy stream can take part in no capture; using it while its blocking streams capture is
  // the implicit dependency cuda.h forbids.
  if (stream->kind == StreamKind::Legacy) {
    invalidate(*capture);
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  // A fork: the stream joins the sequence, its work following the record.
  capture->tails[stream.get()] = event.captured_tail;
  stream->capture = capture;
  (void)st;
  return CUDA_SUCCESS;
}

void abandon_captures(State& st, CUctx_st* ctx) {
  std::vector<CUstream_st*> origins;
  for (auto& capture : st.captures) {
    if (capture->origin->ctx == ctx) origins.push_back(capture->origin);
  }
  for (CUstream_st* stream : origins) abandon_capture(st, stream);
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode, false);
}
CUDASIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode, true);
}
// The CUDA 10.0 form, without a mode: the mode it had then, GLOBAL.
CUDASIM_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CUDASIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
// Edges carry default data only, as the graphs' do: other edge data is CUDA_ERROR_NOT_SUPPORTED.
CUDASIM_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                                    const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                    CUstreamCaptureMode mode) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;  // an entry point of 12.3
  if (hGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(hStream, mode, false, hGraph, dependencies, dependencyData, numDependencies);
}
CUDASIM_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                         const CUgraphNode* dependencies,
                                                         const CUgraphEdgeData* dependencyData,
                                                         size_t numDependencies, CUstreamCaptureMode mode) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;
  if (hGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(hStream, mode, true, hGraph, dependencies, dependencyData, numDependencies);
}
CUDASIM_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode* dependencies,
                                                          size_t numDependencies, unsigned int flags) {
  return update_capture_dependencies(hStream, dependencies, nullptr, numDependencies, flags, false);
}
CUDASIM_EXPORT CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode* dependencies,
                                                               size_t numDependencies, unsigned int flags) {
  return update_capture_dependencies(hStream, dependencies, nullptr, numDependencies, flags, true);
}
CUDASIM_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode* dependencies,
                                                             const CUgraphEdgeData* dependencyData,
                                                             size_t numDependencies, unsigned int flags) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;  // an entry point of 12.3
  return update_capture_dependencies(hStream, dependencies, dependencyData, numDependencies, flags, false);
}
CUDASIM_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream, CUgraphNode* dependencies,
                                                                  const CUgraphEdgeData* dependencyData,
                                                                  size_t numDependencies, unsigned int flags) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;
  return update_capture_dependencies(hStream, dependencies, dependencyData, numDependencies, flags, true);
}
CUDASIM_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return end_capture_call(hStream, phGraph, false);
}
CUDASIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end_capture_call(hStream, phGraph, true);
}
CUDASIM_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                               cuuint64_t* id_out) {
  return capture_info(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr, false);
}
CUDASIM_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                    cuuint64_t* id_out) {
  return capture_info(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr, true);
}
CUDASIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                  cuuint64_t* id_out, CUgraph* graph_out,
                                                  const CUgraphNode** dependencies_out,
                                                  size_t* numDependencies_out) {
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, nullptr,
                      numDependencies_out, false);
}
CUDASIM_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                       cuuint64_t* id_out, CUgraph* graph_out,
                                                       const CUgraphNode** dependencies_out,
                                                       size_t* numDependencies_out) {
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, nullptr,
                      numDependencies_out, true);
}
CUDASIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                  cuuint64_t* id_out, CUgraph* graph_out,
                                                  const CUgraphNode** dependencies_out,
                                                  const CUgraphEdgeData** edgeData_out,
                                                  size_t* numDependencies_out) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                      numDependencies_out, false);
}
CUDASIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                       cuuint64_t* id_out, CUgraph* graph_out,
                                                       const CUgraphNode** dependencies_out,
                                                       const CUgraphEdgeData** edgeData_out,
                                                       size_t* numDependencies_out) {
  if (driver_version() < 12030) return CUDA_ERROR_NOT_SUPPORTED;
  return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                      numDependencies_out, true);
}

CUDASIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!valid_mode(*mode)) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_interaction_mode);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  // Only graphs handed out by cuStreamEndCapture or cuGraphCreate: one still being captured into cannot be destroyed.
  if (hGraph == nullptr || l.st.graphs.count(hGraph) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (hGraph->owner != nullptr) return CUDA_ERROR_INVALID_VALUE;  // a child-graph node's: the node owns it
  if (graph_being_captured(l.st, hGraph)) return CUDA_ERROR_INVALID_VALUE;  // cuStreamBeginCaptureToGraph's
  destroy_graph(l.st, hGraph);
  return CUDA_SUCCESS;
}

// Graph memory of a device. Its memory goes back to the device as soon as no graph holds it (the
// graph destroyed with its last instantiation), so nothing is cached for later graphs: what is
// reserved for graphs is what they use, and cuDeviceGraphMemTrim has nothing to give back.
CUDASIM_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  Locked l;
  if (CUresult rc = device_status(l, device); rc != CUDA_SUCCESS) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Device& dev = l.st.device(device);
  cuuint64_t answer = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      answer = dev.stats.graph_bytes;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      answer = dev.graph_used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      answer = dev.graph_reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = answer;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  Locked l;
  if (CUresult rc = device_status(l, device); rc != CUDA_SUCCESS) return rc;
  // Only the high watermarks can be set, and only reset: to zero, after which they read the current use.
  if (value == nullptr || *static_cast<const cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  Device& dev = l.st.device(device);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      dev.graph_used_high = dev.stats.graph_bytes;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      dev.graph_reserved_high = dev.stats.graph_bytes;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUDASIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  Locked l;
  return device_status(l, device);
}
