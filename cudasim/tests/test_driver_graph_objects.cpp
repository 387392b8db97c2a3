// Graph queries, user objects and captures into existing graphs through the driver API:
// cuGraphNodeGetDependentNodes, cuGraphNodeFindInClone, cuUserObject* and the references graphs and
// executable graphs own, cuStreamBeginCapture (the 10.0 form), cuStreamBeginCaptureToGraph and
// cuStreamUpdateCaptureDependencies, and graphs written as DOT files (cuGraphDebugDotPrint).
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

using namespace driver_test;

// The forms cuda.h declares only under __CUDA_API_VERSION_INTERNAL (it maps the plain names to the
// _v2 forms).
#undef cuStreamBeginCapture
#undef cuGraphNodeGetDependentNodes
#undef cuStreamUpdateCaptureDependencies
extern "C" CUresult cuStreamBeginCapture(CUstream);
extern "C" CUresult cuGraphNodeGetDependentNodes(CUgraphNode, CUgraphNode*, size_t*);
extern "C" CUresult cuStreamUpdateCaptureDependencies(CUstream, CUgraphNode*, size_t, unsigned int);

namespace {

CUgraph new_graph() {
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  return graph;
}

CUgraphNode empty_node(CUgraph graph, std::vector<CUgraphNode> after = {}) {
  CUgraphNode node = nullptr;
  REQUIRE(cuGraphAddEmptyNode(&node, graph, after.data(), after.size()) == CUDA_SUCCESS);
  return node;
}

// A user object's destructor: counts its calls.
void count_destruction(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

// Waits (at most about 2 s) for the destructor count to reach `expected`; true when it does.
bool destroyed(const std::atomic<int>& counter, int expected) {
  for (int i = 0; i < 2000 && counter.load() < expected; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return counter.load() == expected;
}

// Host nodes appending to a log, so that the order a launch runs them in can be read back.
struct Logged {
  std::vector<int>* log;
  int number;
  static void run(void* self) {
    auto* step = static_cast<Logged*>(self);
    step->log->push_back(step->number);
  }
};

}  // namespace

TEST_CASE("dependent nodes are the nodes with an edge from the node", "[driver][graphs]") {
  primary_context();
  CUgraph graph = new_graph();
  CUgraphNode root = empty_node(graph);
  CUgraphNode a = empty_node(graph, {root});
  CUgraphNode b = empty_node(graph, {root});
  CUgraphNode leaf = empty_node(graph, {a, b});
  size_t count = 0;
  REQUIRE(cuGraphNodeGetDependentNodes(root, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CUgraphNode found[3] = {nullptr, nullptr, leaf};
  count = 3;
  CUgraphEdgeData edges[3];
  REQUIRE(cuGraphNodeGetDependentNodes_v2(root, found, edges, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CHECK(found[0] == a);
  CHECK(found[1] == b);
  CHECK(found[2] == nullptr);  // entries past those there are become NULL
  CHECK(edges[0].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT);
  REQUIRE(cuGraphNodeGetDependentNodes(leaf, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 0);
  count = 1;
  REQUIRE(cuGraphNodeGetDependentNodes(a, found, &count) == CUDA_SUCCESS);
  CHECK(count == 1);
  CHECK(found[0] == leaf);
  CHECK(cuGraphNodeGetDependentNodes(a, found, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeGetDependentNodes_v2(a, nullptr, edges, &count) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuGraphDestroyNode(leaf) == CUDA_SUCCESS);
  REQUIRE(cuGraphNodeGetDependentNodes(a, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 0);
  CHECK(cuGraphNodeGetDependentNodes(leaf, nullptr, &count) == CUDA_ERROR_INVALID_VALUE);
  cuGraphDestroy(graph);
}

TEST_CASE("a clone's nodes are found from the original's", "[driver][graphs]") {
  primary_context();
  CUgraph child = new_graph();
  CUgraphNode inner = empty_node(child);
  CUgraph graph = new_graph();
  CUgraphNode first = empty_node(graph);
  CUgraphNode embedding = nullptr;
  REQUIRE(cuGraphAddChildGraphNode(&embedding, graph, &first, 1, child) == CUDA_SUCCESS);
  CUgraph clone = nullptr;
  REQUIRE(cuGraphClone(&clone, graph) == CUDA_SUCCESS);
  CUgraphNode copy = nullptr;
  REQUIRE(cuGraphNodeFindInClone(&copy, first, clone) == CUDA_SUCCESS);
  CHECK(copy != first);
  CUgraphNode roots[1] = {};
  size_t count = 1;
  REQUIRE(cuGraphGetRootNodes(clone, roots, &count) == CUDA_SUCCESS);
  CHECK(copy == roots[0]);
  REQUIRE(cuGraphNodeFindInClone(&copy, embedding, clone) == CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  REQUIRE(cuGraphNodeGetType(copy, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_GRAPH);
  // A node of another graph, a graph that is no clone of the node's, a node since destroyed.
  CHECK(cuGraphNodeFindInClone(&copy, inner, clone) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeFindInClone(&copy, first, child) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeFindInClone(nullptr, first, clone) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNode later = empty_node(graph);
  CHECK(cuGraphNodeFindInClone(&copy, later, clone) == CUDA_ERROR_INVALID_VALUE);
  cuGraphDestroy(clone);
  CHECK(cuGraphNodeFindInClone(&copy, first, clone) == CUDA_ERROR_INVALID_VALUE);
  cuGraphDestroy(graph);
  cuGraphDestroy(child);
}

TEST_CASE("user objects live while the caller, a graph or an executable graph holds a reference",
          "[driver][graphs][user-objects]") {
  primary_context();
  std::atomic<int> destructions{0};
  CUuserObject object = nullptr;
  REQUIRE(cuUserObjectCreate(&object, &destructions, count_destruction, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) ==
          CUDA_SUCCESS);
  SECTION("the caller's references") {
    REQUIRE(cuUserObjectRetain(object, 3) == CUDA_SUCCESS);
    REQUIRE(cuUserObjectRelease(object, 4) == CUDA_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(destructions.load() == 0);
    REQUIRE(cuUserObjectRelease(object, 1) == CUDA_SUCCESS);
    CHECK(destroyed(destructions, 1));
    CHECK(cuUserObjectRetain(object, 1) == CUDA_ERROR_INVALID_VALUE);  // gone
  }
  SECTION("a graph's, its clone's and an executable graph's, kept until its queued launches ran") {
    CUgraph graph = new_graph();
    REQUIRE(cuGraphRetainUserObject(graph, object, 1, 0) == CUDA_SUCCESS);
    REQUIRE(cuGraphRetainUserObject(graph, object, 2, CU_GRAPH_USER_OBJECT_MOVE) == CUDA_SUCCESS);  // the caller's two
    CUgraph clone = nullptr;
    REQUIRE(cuGraphClone(&clone, graph) == CUDA_SUCCESS);
    Gate gate;
    CUDA_HOST_NODE_PARAMS host{Gate::wait, &gate};
    CUgraphNode node = nullptr;
    REQUIRE(cuGraphAddHostNode(&node, graph, nullptr, 0, &host) == CUDA_SUCCESS);
    CUgraphExec exec = nullptr;
    REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
    CUstream stream = non_blocking_stream();
    REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
    REQUIRE(cuGraphDestroy(clone) == CUDA_SUCCESS);
    REQUIRE(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    CHECK(destructions.load() == 0);  // the queued launch still holds it
    gate.open();
    REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(destroyed(destructions, 1));
    cuStreamDestroy(stream);
  }
  SECTION("released by the graph") {
    CUgraph graph = new_graph();
    REQUIRE(cuGraphRetainUserObject(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE) == CUDA_SUCCESS);
    CHECK(cuGraphReleaseUserObject(graph, object, 2) == CUDA_ERROR_INVALID_VALUE);  // it owns one
    REQUIRE(cuGraphReleaseUserObject(graph, object, 1) == CUDA_SUCCESS);
    CHECK(cuGraphReleaseUserObject(graph, object, 1) == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(cuUserObjectRelease(object, 1) == CUDA_SUCCESS);
    CHECK(destroyed(destructions, 1));
    cuGraphDestroy(graph);
  }
  SECTION("given to a graph being captured") {
    CUstream stream = non_blocking_stream();
    REQUIRE(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CUstreamCaptureStatus status{};
    CUgraph capturing = nullptr;
    REQUIRE(cuStreamGetCaptureInfo(stream, &status, nullptr, &capturing, nullptr, nullptr, nullptr) == CUDA_SUCCESS);
    REQUIRE(cuGraphRetainUserObject(capturing, object, 2, CU_GRAPH_USER_OBJECT_MOVE) == CUDA_SUCCESS);
    CUgraph graph = nullptr;
    REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
    CHECK(graph == capturing);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(destructions.load() == 0);
    REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
    CHECK(destroyed(destructions, 1));
    cuStreamDestroy(stream);
  }
  SECTION("errors") {
    CUuserObject other = nullptr;
    CHECK(cuUserObjectCreate(&other, nullptr, count_destruction, 1, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectCreate(&other, nullptr, nullptr, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) ==
          CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectCreate(&other, nullptr, count_destruction, 0, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) ==
          CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectCreate(nullptr, nullptr, count_destruction, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) ==
          CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectRetain(object, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectRetain(object, 0x80000000u) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectRelease(object, 3) == CUDA_ERROR_INVALID_VALUE);  // more than it has
    CHECK(cuUserObjectRetain(reinterpret_cast<CUuserObject>(&other), 1) == CUDA_ERROR_INVALID_VALUE);
    CUgraph graph = new_graph();
    CHECK(cuGraphRetainUserObject(graph, object, 1, 4) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphRetainUserObject(reinterpret_cast<CUgraph>(&other), object, 1, 0) == CUDA_ERROR_INVALID_VALUE);
    cuGraphDestroy(graph);
    REQUIRE(cuUserObjectRelease(object, 2) == CUDA_SUCCESS);
    CHECK(destroyed(destructions, 1));
  }
}

TEST_CASE("the CUDA 10.0 cuStreamBeginCapture captures in global mode", "[driver][graphs][capture]") {
  primary_context();
  CUstream stream = non_blocking_stream();
  REQUIRE(cuStreamBeginCapture(stream) == CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  REQUIRE(cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS);
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // Global mode: a potentially unsafe call on this thread is refused and ends the capture's validity.
  CUdeviceptr dev = 0;
  CHECK(cuMemAlloc(&dev, 64) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(cuStreamBeginCapture(CU_STREAM_LEGACY) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  cuStreamDestroy(stream);
}

TEST_CASE("a capture into an existing graph adds nodes after the dependencies given", "[driver][graphs][capture]") {
  primary_context();
  std::vector<int> log;
  Logged before{&log, 1}, captured{&log, 2}, added{&log, 3};
  CUgraph graph = new_graph();
  CUDA_HOST_NODE_PARAMS host{Logged::run, &before};
  CUgraphNode first = nullptr;
  REQUIRE(cuGraphAddHostNode(&first, graph, nullptr, 0, &host) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  REQUIRE(cuStreamBeginCaptureToGraph(stream, graph, &first, nullptr, 1, CU_STREAM_CAPTURE_MODE_RELAXED) ==
          CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(stream, Logged::run, &captured) == CUDA_SUCCESS);
  // Neither instantiated nor destroyed while it is captured into.
  CUgraphExec exec = nullptr;
  CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphDestroy(graph) == CUDA_ERROR_INVALID_VALUE);
  CUgraph ended = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &ended) == CUDA_SUCCESS);
  CHECK(ended == graph);
  CHECK(log.empty());
  size_t count = 0;
  REQUIRE(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  CUgraphNode after[1] = {};
  count = 1;
  REQUIRE(cuGraphNodeGetDependentNodes_v2(first, after, nullptr, &count) == CUDA_SUCCESS);
  REQUIRE(count == 1);
  host = CUDA_HOST_NODE_PARAMS{Logged::run, &added};
  CUgraphNode last = nullptr;
  REQUIRE(cuGraphAddHostNode(&last, graph, after, 1, &host) == CUDA_SUCCESS);
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == std::vector<int>{1, 2, 3});
  // Refused: the legacy stream, a null or unknown graph, nodes of another graph, other edge data.
  CUgraph other = new_graph();
  CUgraphNode foreign = empty_node(other);
  CHECK(cuStreamBeginCaptureToGraph(CU_STREAM_LEGACY, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cuStreamBeginCaptureToGraph(stream, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamBeginCaptureToGraph(stream, graph, &foreign, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
        CUDA_ERROR_INVALID_VALUE);
  CUgraphEdgeData port{};
  port.from_port = 1;
  CHECK(cuStreamBeginCaptureToGraph(stream, graph, &first, &port, 1, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
        CUDA_ERROR_NOT_SUPPORTED);
  // An invalidated capture leaves the program's graph to it.
  REQUIRE(cuStreamBeginCaptureToGraph(stream, other, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
          CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  CHECK(cuMemAlloc(&dev, 64) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(cuStreamEndCapture(stream, &ended) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  REQUIRE(cuGraphGetNodes(other, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 1);
  CHECK(cuGraphDestroy(other) == CUDA_SUCCESS);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  cuStreamDestroy(stream);
}

TEST_CASE("a capturing stream's dependency set is added to and replaced", "[driver][graphs][capture]") {
  primary_context();
  std::vector<int> log;
  Logged one{&log, 1}, two{&log, 2}, three{&log, 3};
  CUstream stream = non_blocking_stream();
  CHECK(cuStreamUpdateCaptureDependencies(stream, nullptr, 0, CU_STREAM_ADD_CAPTURE_DEPENDENCIES) ==
        CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  REQUIRE(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(stream, Logged::run, &one) == CUDA_SUCCESS);
  CUstreamCaptureStatus status{};
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t count = 0;
  REQUIRE(cuStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, nullptr, &count) == CUDA_SUCCESS);
  REQUIRE(count == 1);
  CUgraphNode node_one = deps[0];
  // A node added by hand to the capture's graph, joined into the stream's set.
  CUDA_HOST_NODE_PARAMS host{Logged::run, &two};
  CUgraphNode node_two = nullptr;
  REQUIRE(cuGraphAddHostNode(&node_two, graph, &node_one, 1, &host) == CUDA_SUCCESS);
  REQUIRE(cuStreamUpdateCaptureDependencies(stream, &node_two, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES) == CUDA_SUCCESS);
  REQUIRE(cuStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 2);
  REQUIRE(cuStreamUpdateCaptureDependencies_v2(stream, &node_two, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES) ==
          CUDA_SUCCESS);
  REQUIRE(cuStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &count) == CUDA_SUCCESS);
  REQUIRE(count == 1);
  CHECK(deps[0] == node_two);
  REQUIRE(cuLaunchHostFunc(stream, Logged::run, &three) == CUDA_SUCCESS);
  CHECK(cuStreamUpdateCaptureDependencies(stream, &node_two, 1, 7) == CUDA_ERROR_INVALID_VALUE);
  CUgraph other = new_graph();
  CUgraphNode foreign = empty_node(other);
  CHECK(cuStreamUpdateCaptureDependencies(stream, &foreign, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES) ==
        CUDA_ERROR_INVALID_VALUE);
  CUgraph captured = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &captured) == CUDA_SUCCESS);
  size_t edges = 0;
  REQUIRE(cuGraphGetEdges(captured, nullptr, nullptr, nullptr, &edges) == CUDA_SUCCESS);
  CHECK(edges == 2);  // one -> two -> three
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, captured, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(log == std::vector<int>{1, 2, 3});
  cuGraphExecDestroy(exec);
  cuGraphDestroy(captured);
  cuGraphDestroy(other);
  cuStreamDestroy(stream);
}

TEST_CASE("a graph is written as a DOT file", "[driver][graphs]") {
  primary_context();
  CUgraph child = new_graph();
  empty_node(child);
  CUgraph graph = new_graph();
  CUgraphNode first = empty_node(graph);
  CUgraphNode embedding = nullptr;
  REQUIRE(cuGraphAddChildGraphNode(&embedding, graph, &first, 1, child) == CUDA_SUCCESS);
  char path[] = "/tmp/cudasim_dot_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(cuGraphDebugDotPrint(graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) == CUDA_SUCCESS);
  std::FILE* file = std::fopen(path, "r");
  REQUIRE(file != nullptr);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
  std::fclose(file);
  unlink(path);
  CHECK(text.rfind("digraph", 0) == 0);
  CHECK(text.find("\"graph_1_node_0\" -> \"graph_1_node_1\"") != std::string::npos);
  CHECK(text.find("EMPTY") != std::string::npos);
  CHECK(text.find("GRAPH") != std::string::npos);
  CHECK(text.find("cluster_graph_1_node_1_graph_0") != std::string::npos);  // the embedded graph
  CHECK(cuGraphDebugDotPrint(graph, "/nonexistent-dir/graph.dot", 0) == CUDA_ERROR_OPERATING_SYSTEM);
  CHECK(cuGraphDebugDotPrint(graph, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphDebugDotPrint(graph, path, 1u << 20) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphDebugDotPrint(reinterpret_cast<CUgraph>(&text), path, 0) == CUDA_ERROR_INVALID_VALUE);
  cuGraphDestroy(graph);
  cuGraphDestroy(child);
}
