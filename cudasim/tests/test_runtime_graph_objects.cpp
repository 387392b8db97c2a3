// Graph queries, user objects and captures into existing graphs through the simulated runtime:
// cudaGraphNodeGetDependentNodes, cudaGraphNodeFindInClone, cudaUserObject*, cudaGraph*UserObject,
// cudaStreamBeginCaptureToGraph, cudaStreamUpdateCaptureDependencies, conditional nodes,
// cudaGraphDebugDotPrint.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime_support.h"

#include <unistd.h>

using namespace runtime_test;

namespace {

void CUDART_CB count_destruction(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

void CUDART_CB append_one(void* log) { static_cast<std::vector<int>*>(log)->push_back(1); }
void CUDART_CB append_two(void* log) { static_cast<std::vector<int>*>(log)->push_back(2); }

}  // namespace

TEST_CASE("runtime: dependent nodes and nodes found in clones", "[runtime][graph]") {
  cudaGraph_t graph = nullptr, clone = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t root = nullptr, leaf = nullptr;
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&root, graph, nullptr, 0));
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&leaf, graph, &root, 1));
  size_t count = 0;
  REQUIRE_CUDA(cudaGraphNodeGetDependentNodes(root, nullptr, nullptr, &count));
  CHECK(count == 1);
  cudaGraphNode_t found = nullptr;
  REQUIRE_CUDA(cudaGraphNodeGetDependentNodes(root, &found, nullptr, &count));
  CHECK(found == leaf);
  REQUIRE_CUDA(cudaGraphClone(&clone, graph));
  cudaGraphNode_t copy = nullptr;
  REQUIRE_CUDA(cudaGraphNodeFindInClone(&copy, leaf, clone));
  CHECK(copy != leaf);
  REQUIRE_CUDA(cudaGraphNodeGetDependencies(copy, &found, nullptr, &count));
  cudaGraphNode_t root_copy = nullptr;
  REQUIRE_CUDA(cudaGraphNodeFindInClone(&root_copy, root, clone));
  CHECK(found == root_copy);
  CHECK(name(cudaGraphNodeFindInClone(&copy, leaf, graph)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  REQUIRE_CUDA(cudaGraphDestroy(clone));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
}

TEST_CASE("runtime: user objects go with the last graph holding them", "[runtime][graph]") {
  std::atomic<int> destructions{0};
  cudaUserObject_t object = nullptr;
  REQUIRE_CUDA(cudaUserObjectCreate(&object, &destructions, count_destruction, 1, cudaUserObjectNoDestructorSync));
  REQUIRE_CUDA(cudaUserObjectRetain(object, 1));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  REQUIRE_CUDA(cudaGraphRetainUserObject(graph, object, 2, cudaGraphUserObjectMove));
  REQUIRE_CUDA(cudaGraphReleaseUserObject(graph, object, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(destructions.load() == 0);
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  for (int i = 0; i < 2000 && destructions.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(destructions.load() == 1);
  CHECK(name(cudaUserObjectRetain(object, 1)) == "cudaErrorInvalidValue");
  CHECK(name(cudaUserObjectCreate(&object, nullptr, count_destruction, 1, 0)) == "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: captures into an existing graph, with their dependencies updated", "[runtime][graph]") {
  std::vector<int> log;
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaHostNodeParams host{append_one, &log};
  cudaGraphNode_t first = nullptr;
  REQUIRE_CUDA(cudaGraphAddHostNode(&first, graph, nullptr, 0, &host));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaStreamBeginCaptureToGraph(stream, graph, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  // The captured node follows `first` only because the dependency set says so.
  REQUIRE_CUDA(cudaStreamUpdateCaptureDependencies(stream, &first, nullptr, 1, cudaStreamSetCaptureDependencies));
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, append_two, &log));
  cudaGraph_t ended = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(stream, &ended));
  CHECK(ended == graph);
  size_t edges = 0;
  REQUIRE_CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
  CHECK(edges == 1);
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(log == std::vector<int>{1, 2});
  CHECK(name(cudaStreamUpdateCaptureDependencies(stream, &first, nullptr, 1, 0)) == "cudaErrorIllegalState");
  cudaGetLastError();
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: a conditional node runs the body its handle's default value selects", "[runtime][graph]") {
  void* marks = nullptr;
  REQUIRE_CUDA(cudaMalloc(&marks, 2));
  REQUIRE_CUDA(cudaMemset(marks, 0, 2));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphConditionalHandle handle = 0;
  REQUIRE_CUDA(cudaGraphConditionalHandleCreate(&handle, graph, 0, cudaGraphCondAssignDefault));
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeIf;
  params.conditional.size = 2;
  cudaGraphNode_t node = nullptr;
  REQUIRE_CUDA(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params));
  REQUIRE(params.conditional.phGraph_out != nullptr);
  for (int body = 0; body < 2; ++body) {
    cudaMemsetParams set{};
    set.dst = static_cast<char*>(marks) + body;
    set.value = 1;
    set.elementSize = 1;
    set.width = 1;
    set.height = 1;
    cudaGraphNode_t mark = nullptr;
    REQUIRE_CUDA(cudaGraphAddMemsetNode(&mark, params.conditional.phGraph_out[body], nullptr, 0, &set));
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  unsigned char ran[2] = {9, 9};
  REQUIRE_CUDA(cudaMemcpy(ran, marks, 2, cudaMemcpyDeviceToHost));
  CHECK(ran[0] == 0);  // the value is 0: the else body ran
  CHECK(ran[1] == 1);
  CHECK(name(cudaGraphConditionalHandleCreate(&handle, graph, 0, 4)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaFree(marks));
}

TEST_CASE("runtime: a graph is written as a DOT file", "[runtime][graph]") {
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t node = nullptr;
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&node, graph, nullptr, 0));
  char path[] = "/tmp/cudasim_runtime_dot_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE_CUDA(cudaGraphDebugDotPrint(graph, path, cudaGraphDebugDotFlagsVerbose));
  std::FILE* file = std::fopen(path, "r");
  REQUIRE(file != nullptr);
  char head[8] = {};
  CHECK(std::fread(head, 1, 7, file) == 7);
  std::fclose(file);
  unlink(path);
  CHECK(std::string(head) == "digraph");
  CHECK(name(cudaGraphDebugDotPrint(graph, nullptr, 0)) == "cudaErrorInvalidValue");
  cudaGetLastError();
  REQUIRE_CUDA(cudaGraphDestroy(graph));
}
