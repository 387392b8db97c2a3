// Graph queries, user objects and captures into existing graphs through the runtime API
// (cudaGraphNodeGetDependentNodes, cudaGraphNodeFindInClone, cudaUserObject*, cudaGraph*UserObject,
// cudaGraphConditionalHandleCreate, cudaStreamBeginCaptureToGraph, cudaStreamUpdateCaptureDependencies), over the driver's
// (graph_exec.cpp, user_objects.cpp and graphs.cpp there); the _ptsz forms are in per_thread_api.cpp.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "graph_nodes.h"
#include "operations.h"

namespace cudasim::runtime {

// The runtime's flags are the driver's values.
static_assert(static_cast<int>(cudaUserObjectNoDestructorSync) == CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
static_assert(static_cast<int>(cudaGraphUserObjectMove) == CU_GRAPH_USER_OBJECT_MOVE);
static_assert(static_cast<int>(cudaStreamSetCaptureDependencies) == CU_STREAM_SET_CAPTURE_DEPENDENCIES);
static_assert(sizeof(cudaGraphEdgeData) == sizeof(CUgraphEdgeData));
static_assert(static_cast<int>(cudaGraphCondAssignDefault) == CU_GRAPH_COND_ASSIGN_DEFAULT);

cudaError_t stream_begin_capture_to_graph(CUstream stream, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                          const cudaGraphEdgeData* edges, size_t count, cudaStreamCaptureMode mode) {
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamBeginCaptureToGraph>(
        stream, graph, dependencies, reinterpret_cast<const CUgraphEdgeData*>(edges), count,
        static_cast<CUstreamCaptureMode>(mode));
  });
}

cudaError_t stream_update_capture_dependencies(CUstream stream, cudaGraphNode_t* dependencies,
                                               const cudaGraphEdgeData* edges, size_t count, unsigned int flags) {
  return with_context([&] {
    return call_driver<&DriverTable::cuStreamUpdateCaptureDependencies>(
        stream, dependencies, reinterpret_cast<const CUgraphEdgeData*>(edges), count, flags);
  });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

extern "C" {

cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* pDependentNodes,
                                           cudaGraphEdgeData* edgeData, size_t* pNumDependentNodes) {
  return api_call([&] {
    return call_driver<&DriverTable::cuGraphNodeGetDependentNodes>(
        node, pDependentNodes, reinterpret_cast<CUgraphEdgeData*>(edgeData), pNumDependentNodes);
  });
}
cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* pNode, cudaGraphNode_t originalNode, cudaGraph_t clonedGraph) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphNodeFindInClone>(pNode, originalNode, clonedGraph); });
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t* object_out, void* ptr, cudaHostFn_t destroy,
                                 unsigned int initialRefcount, unsigned int flags) {
  return api_call([&] {
    return call_driver<&DriverTable::cuUserObjectCreate>(object_out, ptr, destroy, initialRefcount, flags);
  });
}
cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count) {
  return api_call([&] { return call_driver<&DriverTable::cuUserObjectRetain>(object, count); });
}
cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
  return api_call([&] { return call_driver<&DriverTable::cuUserObjectRelease>(object, count); });
}
cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                      unsigned int flags) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphRetainUserObject>(graph, object, count, flags); });
}
cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphReleaseUserObject>(graph, object, count); });
}

// The handle belongs to the current context (the device's primary one), where the runtime's
// conditional nodes run.
cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* pHandle_out, cudaGraph_t graph,
                                             unsigned int defaultLaunchValue, unsigned int flags) {
  return api_call([&] {
    return with_context([&] {
      // The same 64-bit value, spelt unsigned long long here and cuuint64_t there.
      static_assert(sizeof(cudaGraphConditionalHandle) == sizeof(CUgraphConditionalHandle));
      return call_driver<&DriverTable::cuGraphConditionalHandleCreate>(
          reinterpret_cast<CUgraphConditionalHandle*>(pHandle_out), graph, current_context_handle(), defaultLaunchValue,
          flags);
    });
  });
}

// The runtime's flags are the driver's (cudaGraphDebugDotFlags* = CU_GRAPH_DEBUG_DOT_FLAGS_*).
cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path, unsigned int flags) {
  return api_call([&] { return call_driver<&DriverTable::cuGraphDebugDotPrint>(graph, path, flags); });
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                          const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                          enum cudaStreamCaptureMode mode) {
  return api_call([&] {
    return stream_begin_capture_to_graph(stream, graph, dependencies, dependencyData, numDependencies, mode);
  });
}
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t* dependencies,
                                                const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                                unsigned int flags) {
  return api_call([&] {
    return stream_update_capture_dependencies(stream, dependencies, dependencyData, numDependencies, flags);
  });
}

}  // extern "C"
