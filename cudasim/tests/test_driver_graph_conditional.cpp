// Conditional nodes through the driver API: cuGraphConditionalHandleCreate and conditional nodes
// added with cuGraphAddNode. No device code runs, so a handle's value is its default at every
// launch: the tests check that it selects the body cuda.h says it does (if, if/else, switch, while
// with a zero value), and the documented refusals.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

using namespace driver_test;

#undef cuGraphAddNode
extern "C" CUresult cuGraphAddNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);

namespace {

constexpr size_t kBodies = 4;

// Device bytes, one per body, each set to 1 by its body's memset node: which bodies ran.
struct Marks {
  CUdeviceptr dev = 0;
  Marks() {
    REQUIRE(cuMemAlloc(&dev, kBodies) == CUDA_SUCCESS);
    REQUIRE(cuMemsetD8(dev, 0, kBodies) == CUDA_SUCCESS);
    REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  }
  ~Marks() { cuMemFree(dev); }
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> out(kBodies);
    REQUIRE(cuMemcpyDtoH(out.data(), dev, kBodies) == CUDA_SUCCESS);
    return out;
  }
  void mark_in(CUgraph body, size_t index) const {
    CUDA_MEMSET_NODE_PARAMS p{};
    p.dst = dev + index;
    p.value = 1;
    p.elementSize = 1;
    p.width = 1;
    p.height = 1;
    CUgraphNode node = nullptr;
    REQUIRE(cuGraphAddMemsetNode(&node, body, nullptr, 0, &p, primary_context()) == CUDA_SUCCESS);
  }
};

CUgraphConditionalHandle new_handle(CUgraph graph, unsigned value) {
  CUgraphConditionalHandle handle = 0;
  REQUIRE(cuGraphConditionalHandleCreate(&handle, graph, primary_context(), value, CU_GRAPH_COND_ASSIGN_DEFAULT) ==
          CUDA_SUCCESS);
  return handle;
}

CUgraphNodeParams conditional(CUgraphConditionalHandle handle, CUgraphConditionalNodeType type, unsigned size) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = handle;
  p.conditional.type = type;
  p.conditional.size = size;
  p.conditional.ctx = primary_context();
  return p;
}

// A graph holding one conditional node of `type` with `size` bodies, body i marking byte i, whose
// handle's default value is `value`; launched once: the bytes the bodies marked.
std::vector<std::uint8_t> bodies_run(CUgraphConditionalNodeType type, unsigned size, unsigned value) {
  Marks marks;
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNodeParams p = conditional(new_handle(graph, value), type, size);
  CUgraphNode node = nullptr;
  REQUIRE(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_SUCCESS);
  REQUIRE(p.conditional.phGraph_out != nullptr);
  for (unsigned i = 0; i < size; ++i) marks.mark_in(p.conditional.phGraph_out[i], i);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  cuStreamDestroy(stream);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  return marks.read();
}

using Bytes = std::vector<std::uint8_t>;

}  // namespace

TEST_CASE("a conditional handle's default value selects the body", "[driver][graphs][conditional]") {
  primary_context();
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_IF, 1, 1) == Bytes{1, 0, 0, 0});
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_IF, 1, 0) == Bytes{0, 0, 0, 0});
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_IF, 2, 7) == Bytes{1, 0, 0, 0});
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_IF, 2, 0) == Bytes{0, 1, 0, 0});  // the else body
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_SWITCH, 3, 2) == Bytes{0, 0, 1, 0});
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_SWITCH, 3, 0) == Bytes{1, 0, 0, 0});
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_SWITCH, 3, 3) == Bytes{0, 0, 0, 0});  // no body for the value
  CHECK(bodies_run(CU_GRAPH_COND_TYPE_WHILE, 1, 0) == Bytes{0, 0, 0, 0});
}

TEST_CASE("conditional nodes nest and use their graph's handles from child graphs", "[driver][graphs][conditional]") {
  primary_context();
  Marks marks;
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphConditionalHandle outer = new_handle(graph, 1), inner = new_handle(graph, 1);
  CUgraphNodeParams p = conditional(outer, CU_GRAPH_COND_TYPE_IF, 1);
  CUgraphNode node = nullptr;
  REQUIRE(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_SUCCESS);
  CUgraph body = p.conditional.phGraph_out[0];
  marks.mark_in(body, 0);
  CUgraphNodeParams nested = conditional(inner, CU_GRAPH_COND_TYPE_SWITCH, 2);
  CUgraphNode nested_node = nullptr;
  REQUIRE(cuGraphAddNode(&nested_node, body, nullptr, 0, &nested) == CUDA_SUCCESS);
  marks.mark_in(nested.conditional.phGraph_out[1], 3);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  REQUIRE(cuGraphNodeGetType(nested_node, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_CONDITIONAL);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(marks.read() == Bytes{1, 0, 0, 1});
  // A body belongs to its node: the program cannot destroy it, and graphs with conditional nodes
  // are not cloned.
  CHECK(cuGraphDestroy(body) == CUDA_ERROR_INVALID_VALUE);
  CUgraph clone = nullptr;
  CHECK(cuGraphClone(&clone, graph) == CUDA_ERROR_NOT_SUPPORTED);
  CUgraphNode child = nullptr;
  CUgraph outside = nullptr;
  REQUIRE(cuGraphCreate(&outside, 0) == CUDA_SUCCESS);
  CHECK(cuGraphAddChildGraphNode(&child, outside, nullptr, 0, graph) == CUDA_ERROR_NOT_SUPPORTED);
  cuGraphDestroy(outside);
  cuStreamDestroy(stream);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
}

TEST_CASE("conditional handles and nodes refuse what the documentation refuses", "[driver][graphs][conditional]") {
  CUcontext ctx = primary_context();
  CUgraph graph = nullptr, other = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphCreate(&other, 0) == CUDA_SUCCESS);
  CUgraphConditionalHandle handle = 0;
  CHECK(cuGraphConditionalHandleCreate(&handle, graph, ctx, 0, 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphConditionalHandleCreate(nullptr, graph, ctx, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphConditionalHandleCreate(&handle, nullptr, ctx, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphConditionalHandleCreate(&handle, graph, nullptr, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuGraphConditionalHandleCreate(&handle, graph, ctx, 1, 0) == CUDA_SUCCESS);
  CUgraphNode node = nullptr;
  CUgraphNodeParams p = conditional(handle, CU_GRAPH_COND_TYPE_WHILE, 2);  // while takes one body
  CHECK(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  p = conditional(handle, CU_GRAPH_COND_TYPE_IF, 3);
  CHECK(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  p = conditional(handle, CU_GRAPH_COND_TYPE_SWITCH, 0);
  CHECK(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  p = conditional(handle, CU_GRAPH_COND_TYPE_IF, 1);
  CHECK(cuGraphAddNode(&node, other, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);  // another graph's handle
  p = conditional(handle + 1000, CU_GRAPH_COND_TYPE_IF, 1);
  CHECK(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  p = conditional(handle, CU_GRAPH_COND_TYPE_IF, 1);
  p.conditional.ctx = nullptr;  // not the handle's context
  CHECK(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  // A body may not hold a host node: instantiation fails.
  p = conditional(handle, CU_GRAPH_COND_TYPE_IF, 1);
  REQUIRE(cuGraphAddNode(&node, graph, nullptr, 0, &p) == CUDA_SUCCESS);
  CUDA_HOST_NODE_PARAMS host{[](void*) {}, nullptr};
  CUgraphNode host_node = nullptr;
  REQUIRE(cuGraphAddHostNode(&host_node, p.conditional.phGraph_out[0], nullptr, 0, &host) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_ERROR_INVALID_VALUE);
  // Nor memory nodes.
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  alloc.bytesize = 1024;
  CHECK(cuGraphAddMemAllocNode(&host_node, p.conditional.phGraph_out[0], nullptr, 0, &alloc) ==
        CUDA_ERROR_INVALID_VALUE);
  // The node goes with its bodies; the handle with its graph.
  REQUIRE(cuGraphDestroyNode(node) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(graph) == CUDA_SUCCESS);
  p = conditional(handle, CU_GRAPH_COND_TYPE_IF, 1);
  CHECK(cuGraphAddNode(&node, other, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  cuGraphDestroy(other);
}
