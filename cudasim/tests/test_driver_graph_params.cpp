// Graph node parameters through the driver API: event-record and event-wait nodes, the parameters
// of memset, copy and kernel nodes read back and replaced, executable graphs changed in place
// (cuGraphExec*NodeSetParams, cuGraphExecUpdate), the one-instantiation rule of graphs with
// memory nodes, nodes disabled in executable graphs, kernel node attributes and the generic node
// calls (cuGraphAddNode, cuGraph*NodeSetParams).
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <vector>

using namespace driver_test;

// The v1 forms, which cuda.h declares only under __CUDA_API_VERSION_INTERNAL (it maps the plain
// names to the _v2 forms).
#undef cuGraphKernelNodeGetParams
#undef cuGraphKernelNodeSetParams
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphExecUpdate
#undef cuGraphAddNode
extern "C" CUresult cuGraphKernelNodeGetParams(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v1*);
extern "C" CUresult cuGraphKernelNodeSetParams(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*);
extern "C" CUresult cuGraphExecKernelNodeSetParams(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*);
extern "C" CUresult cuGraphExecUpdate(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*);
extern "C" CUresult cuGraphAddNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);

namespace {

const char kPtx[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry step()\n{\n\tret;\n}\n";

CUevent new_event() {
  CUevent event = nullptr;
  REQUIRE(cuEventCreate(&event, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  return event;
}

CUDA_MEMSET_NODE_PARAMS memset_1d(CUdeviceptr dst, unsigned char value, size_t bytes) {
  CUDA_MEMSET_NODE_PARAMS p{};
  p.dst = dst;
  p.value = value;
  p.elementSize = 1;
  p.width = bytes;
  p.height = 1;
  return p;
}

// Device memory set to zero before anything else runs (cuMemsetD8 may return before it is done,
// and the tests' streams do not wait for the legacy stream).
CUdeviceptr zeroed(size_t bytes) {
  CUdeviceptr dev = 0;
  REQUIRE(cuMemAlloc(&dev, bytes) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dev, 0, bytes) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  return dev;
}

unsigned char byte_at(CUdeviceptr ptr) {
  unsigned char value = 0;
  REQUIRE(cuMemcpyDtoH(&value, ptr, 1) == CUDA_SUCCESS);
  return value;
}

void launch_and_wait(CUgraphExec exec, CUstream stream) {
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
}

void record(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

// A host node's function that notes whether the counter had reached one when it ran.
struct Observer {
  std::atomic<int>* counter;
  std::atomic<int> seen{-1};
  static void CUDA_CB run(void* self) {
    auto* o = static_cast<Observer*>(self);
    o->seen.store(o->counter->load());
  }
};

// The kernel "step" of kPtx, loaded as a library the caller unloads.
CUkernel step_kernel(CUlibrary* library) {
  CUkernel kernel = nullptr;
  REQUIRE(cuLibraryLoadData(library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  REQUIRE(cuLibraryGetKernel(&kernel, *library, "step") == CUDA_SUCCESS);
  return kernel;
}

CUDA_KERNEL_NODE_PARAMS kernel_launch(CUkernel kernel, unsigned block) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.kern = kernel;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = block;
  p.blockDimY = p.blockDimZ = 1;
  return p;
}

// A graph of one memset node setting `bytes` bytes at dst to value.
CUgraph memset_graph(CUdeviceptr dst, unsigned char value, size_t bytes, CUgraphNode* node) {
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  const CUDA_MEMSET_NODE_PARAMS set = memset_1d(dst, value, bytes);
  REQUIRE(cuGraphAddMemsetNode(node, graph, nullptr, 0, &set, primary_context()) == CUDA_SUCCESS);
  return graph;
}

}  // namespace

TEST_CASE("event-record and event-wait nodes: their events, and what launches do with them", "[driver][graphs]") {
  primary_context();
  CUevent event = new_event(), other = new_event();
  CUgraph recorder = nullptr, waiter = nullptr;
  REQUIRE(cuGraphCreate(&recorder, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphCreate(&waiter, 0) == CUDA_SUCCESS);
  Gate gate;
  std::atomic<int> passed{0};
  CUgraphNode blocked = nullptr, counted = nullptr, recorded = nullptr, waited = nullptr, observed = nullptr;
  const CUDA_HOST_NODE_PARAMS wait_gate{Gate::wait, &gate};
  const CUDA_HOST_NODE_PARAMS count{record, &passed};
  REQUIRE(cuGraphAddHostNode(&blocked, recorder, nullptr, 0, &wait_gate) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&counted, recorder, &blocked, 1, &count) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddEventRecordNode(&recorded, recorder, &counted, 1, event) == CUDA_SUCCESS);
  Observer observer{&passed};
  const CUDA_HOST_NODE_PARAMS observe{Observer::run, &observer};
  REQUIRE(cuGraphAddEventWaitNode(&waited, waiter, nullptr, 0, event) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddHostNode(&observed, waiter, &waited, 1, &observe) == CUDA_SUCCESS);

  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(recorded, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  CHECK(cuGraphNodeGetType(waited, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  CUevent got = nullptr;
  CHECK(cuGraphEventRecordNodeGetEvent(recorded, &got) == CUDA_SUCCESS);
  CHECK(got == event);
  CHECK(cuGraphEventWaitNodeGetEvent(waited, &got) == CUDA_SUCCESS);
  CHECK(got == event);
  CHECK(cuGraphEventRecordNodeSetEvent(recorded, other) == CUDA_SUCCESS);
  CHECK(cuGraphEventRecordNodeGetEvent(recorded, &got) == CUDA_SUCCESS);
  CHECK(got == other);
  CHECK(cuGraphEventRecordNodeSetEvent(recorded, event) == CUDA_SUCCESS);

  // Misuse: no event, a node of another kind, no output.
  CUgraphNode bad = nullptr;
  CHECK(cuGraphAddEventRecordNode(&bad, recorder, nullptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphAddEventWaitNode(&bad, recorder, nullptr, 0, reinterpret_cast<CUevent>(&gate)) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphEventRecordNodeGetEvent(waited, &got) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphEventWaitNodeGetEvent(recorded, &got) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphEventWaitNodeSetEvent(counted, event) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphEventWaitNodeSetEvent(waited, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphEventRecordNodeGetEvent(recorded, nullptr) == CUDA_ERROR_INVALID_VALUE);

  // The record node records the event when the launch reaches it; the wait node of another graph,
  // launched on another stream, waits for that record.
  CUgraphExec record_exec = nullptr, wait_exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&record_exec, recorder, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphInstantiateWithFlags(&wait_exec, waiter, 0) == CUDA_SUCCESS);
  CUstream first = non_blocking_stream(), second = non_blocking_stream();
  REQUIRE(cuGraphLaunch(record_exec, first) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(wait_exec, second) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cuEventQuery(event) == CUDA_ERROR_NOT_READY);
  CHECK(observer.seen.load() == -1);  // still waiting
  gate.open();
  REQUIRE(cuStreamSynchronize(second) == CUDA_SUCCESS);
  CHECK(observer.seen.load() == 1);  // ran after the recording graph's host node
  CHECK(cuEventQuery(event) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(first) == CUDA_SUCCESS);

  // An executable graph's event is replaced without touching the graph.
  CHECK(cuGraphExecEventRecordNodeSetEvent(record_exec, recorded, other) == CUDA_SUCCESS);
  CHECK(cuGraphEventRecordNodeGetEvent(recorded, &got) == CUDA_SUCCESS);
  CHECK(got == event);
  launch_and_wait(record_exec, first);
  CHECK(cuEventQuery(other) == CUDA_SUCCESS);
  CHECK(passed.load() == 2);
  CHECK(cuGraphExecEventWaitNodeSetEvent(record_exec, recorded, other) == CUDA_ERROR_INVALID_VALUE);  // not a wait
  CHECK(cuGraphExecEventWaitNodeSetEvent(wait_exec, waited, other) == CUDA_SUCCESS);
  CHECK(cuGraphExecEventWaitNodeSetEvent(wait_exec, waited, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecEventRecordNodeSetEvent(nullptr, recorded, other) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuGraphExecDestroy(record_exec) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(wait_exec) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(recorder) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(waiter) == CUDA_SUCCESS);
  for (CUstream s : {first, second}) CHECK(cuStreamDestroy(s) == CUDA_SUCCESS);
  for (CUevent e : {event, other}) CHECK(cuEventDestroy(e) == CUDA_SUCCESS);
}

TEST_CASE("an external event record captured is an event-record node that launches record", "[driver][graphs]") {
  primary_context();
  CUstream stream = non_blocking_stream();
  CUevent event = new_event();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuEventRecordWithFlags(event, stream, CU_EVENT_RECORD_EXTERNAL) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CUgraphNode node = nullptr;
  size_t count = 1;
  REQUIRE(cuGraphGetNodes(graph, &node, &count) == CUDA_SUCCESS);
  REQUIRE(count == 1);
  CUevent got = nullptr;
  CHECK(cuGraphEventRecordNodeGetEvent(node, &got) == CUDA_SUCCESS);
  CHECK(got == event);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  CHECK(cuEventQuery(event) == CUDA_ERROR_NOT_READY);  // recorded behind the gate
  gate.open();
  REQUIRE(cuEventSynchronize(event) == CUDA_SUCCESS);
  CHECK(gate.ran());
  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuEventDestroy(event) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("memset, copy and kernel node parameters read back and replaced", "[driver][graphs]") {
  CUcontext ctx = primary_context();
  const CUdeviceptr dev = zeroed(4096);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode set = nullptr, copy = nullptr, kernel_node = nullptr;
  const CUDA_MEMSET_NODE_PARAMS set_params = memset_1d(dev, 0x11, 256);
  REQUIRE(cuGraphAddMemsetNode(&set, graph, nullptr, 0, &set_params, ctx) == CUDA_SUCCESS);
  const unsigned char source[4] = {1, 2, 3, 4};
  const CUDA_MEMCPY3D copy_params = copy_1d(dev + 1024, source, sizeof source);
  REQUIRE(cuGraphAddMemcpyNode(&copy, graph, &set, 1, &copy_params, ctx) == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  const CUkernel kernel = step_kernel(&library);
  int argument = 7;
  void* arguments[] = {&argument};
  CUDA_KERNEL_NODE_PARAMS launch = kernel_launch(kernel, 64);
  launch.kernelParams = arguments;
  REQUIRE(cuGraphAddKernelNode(&kernel_node, graph, &copy, 1, &launch) == CUDA_SUCCESS);

  CUDA_MEMSET_NODE_PARAMS set_back{};
  CHECK(cuGraphMemsetNodeGetParams(set, &set_back) == CUDA_SUCCESS);
  CHECK(set_back.dst == dev);
  CHECK(set_back.value == 0x11);
  CHECK(set_back.width == 256);
  CUDA_MEMCPY3D copy_back{};
  CHECK(cuGraphMemcpyNodeGetParams(copy, &copy_back) == CUDA_SUCCESS);
  CHECK(copy_back.srcHost == source);
  CHECK(copy_back.dstDevice == dev + 1024);
  CHECK(copy_back.WidthInBytes == 4);
  CUDA_KERNEL_NODE_PARAMS kernel_back{};
  CHECK(cuGraphKernelNodeGetParams_v2(kernel_node, &kernel_back) == CUDA_SUCCESS);
  CHECK(kernel_back.kern == kernel);
  CHECK(kernel_back.blockDimX == 64);
  CHECK(kernel_back.kernelParams == arguments);
  CUDA_KERNEL_NODE_PARAMS_v1 kernel_v1{};
  CHECK(cuGraphKernelNodeGetParams(kernel_node, &kernel_v1) == CUDA_SUCCESS);
  CHECK(kernel_v1.blockDimX == 64);
  CHECK(kernel_v1.gridDimZ == 1);

  // An instantiation keeps what it took; the graph's next one takes the new parameters.
  CUgraphExec before = nullptr, after = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&before, graph, 0) == CUDA_SUCCESS);
  const CUDA_MEMSET_NODE_PARAMS reset = memset_1d(dev, 0x22, 512);
  CHECK(cuGraphMemsetNodeSetParams(set, &reset) == CUDA_SUCCESS);
  const unsigned char other_source[4] = {9, 8, 7, 6};
  const CUDA_MEMCPY3D recopy = copy_1d(dev + 2048, other_source, sizeof other_source);
  CHECK(cuGraphMemcpyNodeSetParams(copy, &recopy) == CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS relaunch = kernel_launch(kernel, 256);
  CHECK(cuGraphKernelNodeSetParams_v2(kernel_node, &relaunch) == CUDA_SUCCESS);
  CHECK(cuGraphKernelNodeGetParams_v2(kernel_node, &kernel_back) == CUDA_SUCCESS);
  CHECK(kernel_back.blockDimX == 256);
  CUDA_KERNEL_NODE_PARAMS_v1 relaunch_v1{};
  relaunch_v1.func = reinterpret_cast<CUfunction>(kernel);  // a kernel handle names its function too
  relaunch_v1.gridDimX = relaunch_v1.gridDimY = relaunch_v1.gridDimZ = 2;
  relaunch_v1.blockDimX = relaunch_v1.blockDimY = relaunch_v1.blockDimZ = 4;
  CHECK(cuGraphKernelNodeSetParams(kernel_node, &relaunch_v1) == CUDA_SUCCESS);
  CHECK(cuGraphKernelNodeGetParams(kernel_node, &kernel_v1) == CUDA_SUCCESS);
  CHECK(kernel_v1.gridDimX == 2);
  CHECK(kernel_v1.blockDimZ == 4);
  REQUIRE(cuGraphInstantiateWithFlags(&after, graph, 0) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  launch_and_wait(before, stream);
  CHECK(byte_at(dev + 255) == 0x11);
  CHECK(byte_at(dev + 256) == 0);
  CHECK(byte_at(dev + 1025) == 2);
  CHECK(byte_at(dev + 2049) == 0);
  launch_and_wait(after, stream);
  CHECK(byte_at(dev + 511) == 0x22);
  CHECK(byte_at(dev + 2049) == 8);

  // Parameters refused as adding the node refuses them leave the node as it was.
  CUDA_MEMSET_NODE_PARAMS odd = reset;
  odd.elementSize = 3;
  CHECK(cuGraphMemsetNodeSetParams(set, &odd) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMSET_NODE_PARAMS beyond = memset_1d(dev, 0x33, 8192);
  CHECK(cuGraphMemsetNodeSetParams(set, &beyond) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemsetNodeGetParams(set, &set_back) == CUDA_SUCCESS);
  CHECK(set_back.value == 0x22);
  CUDA_MEMCPY3D nowhere = recopy;
  nowhere.dstDevice = 0;
  CHECK(cuGraphMemcpyNodeSetParams(copy, &nowhere) == CUDA_ERROR_INVALID_VALUE);
  CUDA_KERNEL_NODE_PARAMS too_big = kernel_launch(kernel, 2048);
  CHECK(cuGraphKernelNodeSetParams_v2(kernel_node, &too_big) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeSetParams_v2(kernel_node, nullptr) == CUDA_ERROR_INVALID_VALUE);
  // Nodes of another kind.
  CHECK(cuGraphMemsetNodeGetParams(copy, &set_back) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemcpyNodeGetParams(set, &copy_back) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeGetParams_v2(set, &kernel_back) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemsetNodeSetParams(kernel_node, &reset) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphMemsetNodeGetParams(set, nullptr) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuGraphExecDestroy(before) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(after) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuGraphMemsetNodeGetParams(set, &set_back) == CUDA_ERROR_INVALID_VALUE);  // its graph is gone
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("executable graph nodes replaced in place, within the documented rules", "[driver][graphs]") {
  CUcontext ctx = primary_context();
  const CUdeviceptr dev = zeroed(64 * 1024);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode set = nullptr, set_2d = nullptr, copy = nullptr, host = nullptr, kernel_node = nullptr;
  const CUDA_MEMSET_NODE_PARAMS set_params = memset_1d(dev, 0x11, 16);
  REQUIRE(cuGraphAddMemsetNode(&set, graph, nullptr, 0, &set_params, ctx) == CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS rows{};  // 4 rows of 8 bytes, 256 apart
  rows.dst = dev + 8192;
  rows.pitch = 256;
  rows.value = 0x44;
  rows.elementSize = 1;
  rows.width = 8;
  rows.height = 4;
  REQUIRE(cuGraphAddMemsetNode(&set_2d, graph, nullptr, 0, &rows, ctx) == CUDA_SUCCESS);
  const unsigned char source[2] = {5, 6};
  const CUDA_MEMCPY3D copy_params = copy_1d(dev + 100, source, sizeof source);
  REQUIRE(cuGraphAddMemcpyNode(&copy, graph, &set, 1, &copy_params, ctx) == CUDA_SUCCESS);
  std::atomic<int> first{0}, second{0};
  const CUDA_HOST_NODE_PARAMS count_first{record, &first};
  REQUIRE(cuGraphAddHostNode(&host, graph, &copy, 1, &count_first) == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  const CUkernel kernel = step_kernel(&library);
  const CUDA_KERNEL_NODE_PARAMS launch = kernel_launch(kernel, 32);
  REQUIRE(cuGraphAddKernelNode(&kernel_node, graph, &host, 1, &launch) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY) == CUDA_SUCCESS);
  cuuint64_t flags = 0;
  CHECK(cuGraphExecGetFlags(exec, &flags) == CUDA_SUCCESS);
  CHECK(flags == CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY);
  CHECK(cuGraphExecGetFlags(exec, nullptr) == CUDA_ERROR_INVALID_VALUE);

  // Replaced: a 1D memset's value and size, a copy's source and destination, a host node's
  // function, a kernel node's shape. The graph keeps its own parameters.
  const CUDA_MEMSET_NODE_PARAMS wider = memset_1d(dev, 0x55, 32);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, set, &wider, ctx) == CUDA_SUCCESS);
  const unsigned char other_source[2] = {7, 8};
  const CUDA_MEMCPY3D elsewhere = copy_1d(dev + 200, other_source, sizeof other_source);
  CHECK(cuGraphExecMemcpyNodeSetParams(exec, copy, &elsewhere, ctx) == CUDA_SUCCESS);
  const CUDA_HOST_NODE_PARAMS count_second{record, &second};
  CHECK(cuGraphExecHostNodeSetParams(exec, host, &count_second) == CUDA_SUCCESS);
  const CUDA_KERNEL_NODE_PARAMS wider_launch = kernel_launch(kernel, 512);
  CHECK(cuGraphExecKernelNodeSetParams_v2(exec, kernel_node, &wider_launch) == CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS_v1 launch_v1{};
  launch_v1.func = reinterpret_cast<CUfunction>(kernel);
  launch_v1.gridDimX = launch_v1.gridDimY = launch_v1.gridDimZ = 1;
  launch_v1.blockDimX = launch_v1.blockDimY = launch_v1.blockDimZ = 8;
  CHECK(cuGraphExecKernelNodeSetParams(exec, kernel_node, &launch_v1) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev + 31) == 0x55);
  CHECK(byte_at(dev + 32) == 0);
  CHECK(byte_at(dev + 100) == 0);
  CHECK(byte_at(dev + 201) == 8);
  CHECK(first.load() == 0);
  CHECK(second.load() == 1);
  CUDA_MEMSET_NODE_PARAMS graph_set{};
  CHECK(cuGraphMemsetNodeGetParams(set, &graph_set) == CUDA_SUCCESS);
  CHECK(graph_set.value == 0x11);

  // A 2D memset may change its address and value only.
  CUDA_MEMSET_NODE_PARAMS moved = rows;
  moved.dst = dev + 16384;
  moved.value = 0x66;
  CHECK(cuGraphExecMemsetNodeSetParams(exec, set_2d, &moved, ctx) == CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS reshaped = moved;
  reshaped.height = 2;
  CHECK(cuGraphExecMemsetNodeSetParams(exec, set_2d, &reshaped, ctx) == CUDA_ERROR_INVALID_VALUE);
  reshaped = moved;
  reshaped.pitch = 512;
  CHECK(cuGraphExecMemsetNodeSetParams(exec, set_2d, &reshaped, ctx) == CUDA_ERROR_INVALID_VALUE);
  // A copy may not change its memory types.
  CUDA_MEMCPY3D device_to_device = elsewhere;
  device_to_device.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  device_to_device.srcDevice = dev;
  device_to_device.srcHost = nullptr;
  CHECK(cuGraphExecMemcpyNodeSetParams(exec, copy, &device_to_device, ctx) == CUDA_ERROR_INVALID_VALUE);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev + 16384 + 256 * 3 + 7) == 0x66);
  CHECK(second.load() == 2);

  // Refusals: bad parameters, a node of another kind, a node of another graph, no such executable.
  CUDA_KERNEL_NODE_PARAMS too_big = kernel_launch(kernel, 4096);
  CHECK(cuGraphExecKernelNodeSetParams_v2(exec, kernel_node, &too_big) == CUDA_ERROR_INVALID_VALUE);
  const CUDA_HOST_NODE_PARAMS no_function{nullptr, nullptr};
  CHECK(cuGraphExecHostNodeSetParams(exec, host, &no_function) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecHostNodeSetParams(exec, set, &count_second) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, copy, &wider, ctx) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNode foreign = nullptr;
  CUgraph other = memset_graph(dev, 1, 1, &foreign);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, foreign, &wider, ctx) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecMemsetNodeSetParams(nullptr, set, &wider, ctx) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecKernelNodeSetParams(exec, kernel_node, nullptr) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuGraphDestroy(other) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("a child graph node's executable graph replaced by a graph of the same shape", "[driver][graphs]") {
  CUcontext ctx = primary_context();
  const CUdeviceptr dev = zeroed(4096);
  CUgraphNode inner = nullptr, child_node = nullptr, other_inner = nullptr, extra = nullptr, empty = nullptr;
  CUgraph child = memset_graph(dev, 0x10, 8, &inner);
  CUgraph parent = nullptr;
  REQUIRE(cuGraphCreate(&parent, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddChildGraphNode(&child_node, parent, nullptr, 0, child) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddEmptyNode(&empty, parent, nullptr, 0) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, parent, 0) == CUDA_SUCCESS);
  CUgraph replacement = memset_graph(dev + 100, 0x20, 8, &other_inner);
  CHECK(cuGraphExecChildGraphNodeSetParams(exec, child_node, replacement) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev) == 0);
  CHECK(byte_at(dev + 107) == 0x20);

  // Another shape (one more node), a node that is no child-graph node, no graph: refused.
  const CUDA_MEMSET_NODE_PARAMS more = memset_1d(dev + 200, 0x30, 8);
  REQUIRE(cuGraphAddMemsetNode(&extra, replacement, nullptr, 0, &more, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphExecChildGraphNodeSetParams(exec, child_node, replacement) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecChildGraphNodeSetParams(exec, empty, child) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecChildGraphNodeSetParams(exec, child_node, nullptr) == CUDA_ERROR_INVALID_VALUE);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev + 200) == 0);

  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  for (CUgraph g : {parent, child, replacement}) CHECK(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("cuGraphExecUpdate takes a graph of the same topology and reports why another fails", "[driver][graphs]") {
  CUcontext ctx = primary_context();
  const CUdeviceptr dev = zeroed(4096);
  // Two memsets, the second after the first.
  auto build = [&](unsigned char value, CUgraphNode* a, CUgraphNode* b) {
    CUgraph graph = memset_graph(dev, value, 16, a);
    const CUDA_MEMSET_NODE_PARAMS then = memset_1d(dev + 16, value, 16);
    REQUIRE(cuGraphAddMemsetNode(b, graph, a, 1, &then, ctx) == CUDA_SUCCESS);
    return graph;
  };
  CUgraphNode a = nullptr, b = nullptr;
  CUgraph original = build(0x01, &a, &b);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, original, 0) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();

  CUgraphNode a2 = nullptr, b2 = nullptr;
  CUgraph same = build(0x02, &a2, &b2);
  CUgraphExecUpdateResultInfo info{};
  CHECK(cuGraphExecUpdate_v2(exec, same, &info) == CUDA_SUCCESS);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev + 31) == 0x02);
  // The executable graph's nodes are still named by the original graph's.
  const CUDA_MEMSET_NODE_PARAMS three = memset_1d(dev, 0x03, 16);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, a, &three, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, a2, &three, ctx) == CUDA_ERROR_INVALID_VALUE);

  // One node more: the topology changed, no node to blame.
  CUgraphNode a3 = nullptr, b3 = nullptr, c3 = nullptr;
  CUgraph bigger = build(0x04, &a3, &b3);
  REQUIRE(cuGraphAddEmptyNode(&c3, bigger, nullptr, 0) == CUDA_SUCCESS);
  CHECK(cuGraphExecUpdate_v2(exec, bigger, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  CHECK(info.errorNode == nullptr);

  // The second node without its dependency: the topology changed at that node.
  CUgraph loose = nullptr;
  CUgraphNode a4 = nullptr, b4 = nullptr;
  loose = memset_graph(dev, 0x05, 16, &a4);
  const CUDA_MEMSET_NODE_PARAMS root = memset_1d(dev + 16, 0x05, 16);
  REQUIRE(cuGraphAddMemsetNode(&b4, loose, nullptr, 0, &root, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphExecUpdate_v2(exec, loose, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  CHECK(info.errorNode == b4);

  // A host node where a memset was: the node type changed.
  CUgraph retyped = nullptr;
  CUgraphNode a5 = nullptr, b5 = nullptr;
  retyped = memset_graph(dev, 0x06, 16, &a5);
  std::atomic<int> calls{0};
  const CUDA_HOST_NODE_PARAMS host{record, &calls};
  REQUIRE(cuGraphAddHostNode(&b5, retyped, &a5, 1, &host) == CUDA_SUCCESS);
  CHECK(cuGraphExecUpdate_v2(exec, retyped, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  CHECK(info.errorNode == b5);
  CHECK(info.errorFromNode == b);
  // The 10.2 form reports the same.
  CUgraphNode error_node = nullptr;
  CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  CHECK(cuGraphExecUpdate(exec, retyped, &error_node, &result) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(result == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  CHECK(error_node == b5);

  // A 2D memset reshaped: parameters changed in a way an update cannot take.
  CUgraph reshaped = nullptr;
  CUgraphNode a6 = nullptr, b6 = nullptr;
  reshaped = memset_graph(dev, 0x07, 16, &a6);
  CUDA_MEMSET_NODE_PARAMS rows = memset_1d(dev + 16, 0x07, 8);
  rows.height = 2;
  rows.pitch = 64;
  REQUIRE(cuGraphAddMemsetNode(&b6, reshaped, &a6, 1, &rows, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphExecUpdate_v2(exec, reshaped, &info) == CUDA_SUCCESS);  // was 1D: its shape may change
  CUgraphNode a7 = nullptr, b7 = nullptr;
  CUgraph rows_again = memset_graph(dev, 0x08, 16, &a7);
  rows.height = 3;
  REQUIRE(cuGraphAddMemsetNode(&b7, rows_again, &a7, 1, &rows, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphExecUpdate_v2(exec, rows_again, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED);
  CHECK(info.errorNode == b7);

  // Misuse: no result info, no graph, no executable graph.
  CHECK(cuGraphExecUpdate_v2(exec, same, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecUpdate_v2(exec, nullptr, &info) == CUDA_ERROR_INVALID_VALUE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR);
  CHECK(cuGraphExecUpdate_v2(nullptr, same, &info) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  for (CUgraph g : {original, same, bigger, loose, retyped, reshaped, rows_again})
    CHECK(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("a graph with memory nodes has one executable graph at a time and cannot be updated", "[driver][graphs]") {
  primary_context();
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  alloc.bytesize = 4096;
  CUgraphNode alloc_node = nullptr, free_node = nullptr;
  REQUIRE(cuGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &alloc) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddMemFreeNode(&free_node, graph, &alloc_node, 1, alloc.dptr) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr, second = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CHECK(cuGraphInstantiateWithFlags(&second, graph, 0) == CUDA_ERROR_INVALID_VALUE);
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  CHECK(cuGraphInstantiateWithParams(&second, graph, &params) == CUDA_ERROR_INVALID_VALUE);
  CHECK(params.result_out == CUDA_GRAPH_INSTANTIATE_ERROR);
  CHECK(params.hErrNode_out == nullptr);

  // An update from a graph with memory nodes is not supported (that graph is the only one with them).
  CUgraphExecUpdateResultInfo info{};
  CHECK(cuGraphExecUpdate_v2(exec, graph, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED);
  CHECK(info.errorNode == alloc_node);
  CUgraph copy = nullptr;
  CHECK(cuGraphClone(&copy, graph) == CUDA_ERROR_NOT_SUPPORTED);

  // Once the first is destroyed, the graph instantiates again.
  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  REQUIRE(cuGraphInstantiateWithFlags(&second, graph, 0) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(second) == CUDA_SUCCESS);

  // Graphs without memory nodes instantiate as often as wanted.
  CUgraph plain = nullptr;
  REQUIRE(cuGraphCreate(&plain, 0) == CUDA_SUCCESS);
  CUgraphNode empty = nullptr;
  REQUIRE(cuGraphAddEmptyNode(&empty, plain, nullptr, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphInstantiateWithFlags(&exec, plain, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphInstantiateWithFlags(&second, plain, 0) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(second) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(plain) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
}

TEST_CASE("captured sets, copies and kernel launches answer their parameters", "[driver][graphs]") {
  primary_context();
  const CUdeviceptr dev = zeroed(4096);
  CUlibrary library = nullptr;
  const CUkernel kernel = step_kernel(&library);
  CUstream stream = non_blocking_stream();
  std::vector<unsigned char> host(64, 0x7f);
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD32Async(dev, 0xabcdef01u, 16, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyHtoDAsync(dev + 1024, host.data(), host.size(), stream) == CUDA_SUCCESS);
  REQUIRE(cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 3, 2, 1, 64, 1, 1, 128, stream, nullptr, nullptr) ==
          CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CUgraphNode nodes[3] = {};
  size_t count = 3;
  REQUIRE(cuGraphGetNodes(graph, nodes, &count) == CUDA_SUCCESS);
  REQUIRE(count == 3);
  CUDA_MEMSET_NODE_PARAMS set{};
  REQUIRE(cuGraphMemsetNodeGetParams(nodes[0], &set) == CUDA_SUCCESS);
  CHECK(set.dst == dev);
  CHECK(set.value == 0xabcdef01u);
  CHECK(set.elementSize == 4);
  CHECK(set.width == 16);
  CHECK(set.height == 1);
  CUDA_MEMCPY3D copy{};
  REQUIRE(cuGraphMemcpyNodeGetParams(nodes[1], &copy) == CUDA_SUCCESS);
  CHECK(copy.srcMemoryType == CU_MEMORYTYPE_HOST);
  CHECK(copy.srcHost == host.data());
  CHECK(copy.dstMemoryType == CU_MEMORYTYPE_DEVICE);
  CHECK(copy.dstDevice == dev + 1024);
  CHECK(copy.WidthInBytes == 64);
  CUDA_KERNEL_NODE_PARAMS launch{};
  REQUIRE(cuGraphKernelNodeGetParams_v2(nodes[2], &launch) == CUDA_SUCCESS);
  CHECK(launch.func == reinterpret_cast<CUfunction>(kernel));
  CHECK(launch.gridDimX == 3);
  CHECK(launch.gridDimY == 2);
  CHECK(launch.blockDimX == 64);
  CHECK(launch.sharedMemBytes == 128);

  // The captured copy's parameters, replaced, take effect in the next instantiation.
  std::vector<unsigned char> other(64, 0x15);
  copy.srcHost = other.data();
  REQUIRE(cuGraphMemcpyNodeSetParams(nodes[1], &copy) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev + 1024 + 63) == 0x15);
  CHECK(byte_at(dev + 3) == 0xab);
  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("a kernel node's function may not change its owning context in an executable graph", "[driver][graphs]") {
  CUcontext primary = primary_context();
  CUmodule here = nullptr, again = nullptr, there = nullptr;
  CUfunction mine = nullptr, mine_too = nullptr, theirs = nullptr;
  REQUIRE(cuModuleLoadData(&here, kPtx) == CUDA_SUCCESS);
  REQUIRE(cuModuleGetFunction(&mine, here, "step") == CUDA_SUCCESS);
  REQUIRE(cuModuleLoadData(&again, kPtx) == CUDA_SUCCESS);
  REQUIRE(cuModuleGetFunction(&mine_too, again, "step") == CUDA_SUCCESS);
  CUcontext other = nullptr;
  REQUIRE(cuCtxCreate(&other, nullptr, 0, 0) == CUDA_SUCCESS);  // made current
  REQUIRE(cuModuleLoadData(&there, kPtx) == CUDA_SUCCESS);
  REQUIRE(cuModuleGetFunction(&theirs, there, "step") == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);

  auto kernel_graph = [](CUfunction f, CUgraphNode* node) {
    CUgraph graph = nullptr;
    REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    REQUIRE(cuGraphAddKernelNode(node, graph, nullptr, 0, &p) == CUDA_SUCCESS);
    return graph;
  };
  CUgraphNode node = nullptr, same_node = nullptr, moved_node = nullptr;
  CUgraph graph = kernel_graph(mine, &node);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS params{};
  REQUIRE(cuGraphKernelNodeGetParams_v2(node, &params) == CUDA_SUCCESS);
  params.func = mine_too;  // another function of the same context
  CHECK(cuGraphExecKernelNodeSetParams_v2(exec, node, &params) == CUDA_SUCCESS);
  params.func = theirs;
  CHECK(cuGraphExecKernelNodeSetParams_v2(exec, node, &params) == CUDA_ERROR_INVALID_VALUE);

  CUgraph same = kernel_graph(mine_too, &same_node);
  CUgraphExecUpdateResultInfo info{};
  CHECK(cuGraphExecUpdate_v2(exec, same, &info) == CUDA_SUCCESS);
  CUgraph moved = kernel_graph(theirs, &moved_node);
  CHECK(cuGraphExecUpdate_v2(exec, moved, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE);
  CHECK(info.errorNode == moved_node);

  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  for (CUgraph g : {graph, same, moved}) CHECK(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(here) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(again) == CUDA_SUCCESS);
  CHECK(cuCtxDestroy(other) == CUDA_SUCCESS);
  primary_context();
}

TEST_CASE("a disabled node does nothing at launch until enabled again", "[driver][graphs]") {
  CUcontext ctx = primary_context();
  const CUdeviceptr dev = zeroed(256);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode set = nullptr, copy = nullptr, host = nullptr, kernel_node = nullptr;
  const CUDA_MEMSET_NODE_PARAMS set_params = memset_1d(dev, 0x22, 16);
  REQUIRE(cuGraphAddMemsetNode(&set, graph, nullptr, 0, &set_params, ctx) == CUDA_SUCCESS);
  const unsigned char source[4] = {9, 8, 7, 6};
  const CUDA_MEMCPY3D copy_params = copy_1d(dev + 128, source, sizeof source);
  REQUIRE(cuGraphAddMemcpyNode(&copy, graph, &set, 1, &copy_params, ctx) == CUDA_SUCCESS);
  std::atomic<int> ran{0};
  const CUDA_HOST_NODE_PARAMS count{record, &ran};
  REQUIRE(cuGraphAddHostNode(&host, graph, &copy, 1, &count) == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  const CUkernel kernel = step_kernel(&library);
  const CUDA_KERNEL_NODE_PARAMS launch = kernel_launch(kernel, 32);
  REQUIRE(cuGraphAddKernelNode(&kernel_node, graph, &host, 1, &launch) == CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();

  unsigned enabled = 7;
  CHECK(cuGraphNodeGetEnabled(exec, set, &enabled) == CUDA_SUCCESS);
  CHECK(enabled == 1);
  CHECK(cuGraphNodeSetEnabled(exec, set, 0) == CUDA_SUCCESS);
  CHECK(cuGraphNodeSetEnabled(exec, copy, 0) == CUDA_SUCCESS);
  CHECK(cuGraphNodeSetEnabled(exec, kernel_node, 0) == CUDA_SUCCESS);
  CHECK(cuGraphNodeGetEnabled(exec, set, &enabled) == CUDA_SUCCESS);
  CHECK(enabled == 0);
  CHECK(cuGraphNodeGetEnabled(exec, kernel_node, &enabled) == CUDA_SUCCESS);
  CHECK(enabled == 0);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev) == 0);  // neither the set nor the copy ran
  CHECK(byte_at(dev + 128) == 0);
  CHECK(ran.load() == 1);  // the nodes after them did
  // The graph's nodes are not changed, nor are other instantiations.
  CUgraphExec other = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&other, graph, 0) == CUDA_SUCCESS);
  CHECK(cuGraphNodeGetEnabled(other, set, &enabled) == CUDA_SUCCESS);
  CHECK(enabled == 1);
  launch_and_wait(other, stream);
  CHECK(byte_at(dev) == 0x22);
  CHECK(byte_at(dev + 128) == 9);
  REQUIRE(cuMemsetD8(dev, 0, 256) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);

  // Enabled again, with parameters changed while disabled: the new ones run.
  const CUDA_MEMSET_NODE_PARAMS changed = memset_1d(dev, 0x33, 16);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, set, &changed, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphNodeGetEnabled(exec, set, &enabled) == CUDA_SUCCESS);
  CHECK(enabled == 0);  // replacing the parameters leaves the setting
  CHECK(cuGraphNodeSetEnabled(exec, set, 5) == CUDA_SUCCESS);
  CHECK(cuGraphNodeGetEnabled(exec, set, &enabled) == CUDA_SUCCESS);
  CHECK(enabled == 1);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev) == 0x33);
  CHECK(byte_at(dev + 128) == 0);  // the copy still disabled

  // Only kernel, memset and copy nodes; nodes of the instantiated graph; an executable graph.
  CHECK(cuGraphNodeSetEnabled(exec, host, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeGetEnabled(exec, host, &enabled) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeGetEnabled(exec, set, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeSetEnabled(nullptr, set, 0) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNode later = nullptr;
  REQUIRE(cuGraphAddMemsetNode(&later, graph, nullptr, 0, &set_params, ctx) == CUDA_SUCCESS);
  CHECK(cuGraphNodeSetEnabled(exec, later, 0) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphExecDestroy(other) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}

TEST_CASE("kernel node attributes are kept per node, copied and cloned", "[driver][graphs]") {
  primary_context();
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  const CUkernel kernel = step_kernel(&library);
  const CUDA_KERNEL_NODE_PARAMS launch = kernel_launch(kernel, 32);
  CUgraphNode first = nullptr, second = nullptr, empty = nullptr;
  REQUIRE(cuGraphAddKernelNode(&first, graph, nullptr, 0, &launch) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddKernelNode(&second, graph, nullptr, 0, &launch) == CUDA_SUCCESS);
  REQUIRE(cuGraphAddEmptyNode(&empty, graph, nullptr, 0) == CUDA_SUCCESS);

  // Never set: zero.
  CUkernelNodeAttrValue value{};
  value.priority = 9;
  CHECK(cuGraphKernelNodeGetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &value) == CUDA_SUCCESS);
  CHECK(value.priority == 0);

  CUkernelNodeAttrValue priority{};
  priority.priority = -1;
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &priority) == CUDA_SUCCESS);
  CUkernelNodeAttrValue window{};
  int target = 0;
  window.accessPolicyWindow = CUaccessPolicyWindow{&target, 4096, 0.5f, CU_ACCESS_PROPERTY_PERSISTING,
                                                   CU_ACCESS_PROPERTY_STREAMING};
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &window) == CUDA_SUCCESS);
  CUkernelNodeAttrValue cooperative{};
  cooperative.cooperative = 1;
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &cooperative) == CUDA_SUCCESS);
  CHECK(cuGraphKernelNodeGetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &value) == CUDA_SUCCESS);
  CHECK(value.priority == -1);
  CHECK(cuGraphKernelNodeGetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value) == CUDA_SUCCESS);
  CHECK(value.accessPolicyWindow.base_ptr == &target);
  CHECK(value.accessPolicyWindow.num_bytes == 4096);
  CHECK(value.accessPolicyWindow.hitRatio == 0.5f);
  CHECK(value.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING);
  CHECK(cuGraphKernelNodeGetAttribute(second, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &value) == CUDA_SUCCESS);
  CHECK(value.cooperative == 0);  // per node

  // Copied: every attribute of the source replaces the destination's.
  CUkernelNodeAttrValue domain{};
  domain.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  CHECK(cuGraphKernelNodeSetAttribute(second, CU_KERNEL_NODE_ATTRIBUTE_MEM_SYNC_DOMAIN, &domain) == CUDA_SUCCESS);
  CHECK(cuGraphKernelNodeCopyAttributes(second, first) == CUDA_SUCCESS);
  CHECK(cuGraphKernelNodeGetAttribute(second, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &value) == CUDA_SUCCESS);
  CHECK(value.cooperative == 1);
  CHECK(cuGraphKernelNodeGetAttribute(second, CU_KERNEL_NODE_ATTRIBUTE_MEM_SYNC_DOMAIN, &value) == CUDA_SUCCESS);
  CHECK(value.memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT);

  // A clone's nodes carry them too.
  CUgraph clone = nullptr;
  REQUIRE(cuGraphClone(&clone, graph) == CUDA_SUCCESS);
  size_t count = 3;
  CUgraphNode cloned[3] = {};
  REQUIRE(cuGraphGetNodes(clone, cloned, &count) == CUDA_SUCCESS);
  CHECK(cuGraphKernelNodeGetAttribute(cloned[0], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &value) == CUDA_SUCCESS);
  CHECK(value.priority == -1);

  // Refusals: a node of another kind, an attribute not of graph nodes, values out of range.
  CHECK(cuGraphKernelNodeGetAttribute(empty, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &value) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeSetAttribute(empty, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &priority) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeCopyAttributes(empty, first) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeCopyAttributes(first, empty) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeGetAttribute(first, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &value) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, &priority) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeGetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, nullptr) == CUDA_ERROR_INVALID_VALUE);
  window.accessPolicyWindow.hitRatio = 1.5f;
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &window) ==
        CUDA_ERROR_INVALID_VALUE);
  window.accessPolicyWindow.hitRatio = 0.5f;
  window.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_PERSISTING;  // NORMAL or STREAMING only
  CHECK(cuGraphKernelNodeSetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &window) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphKernelNodeGetAttribute(first, CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &value) == CUDA_SUCCESS);
  CHECK(value.accessPolicyWindow.missProp == CU_ACCESS_PROPERTY_STREAMING);  // unchanged

  CHECK(cuGraphDestroy(clone) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
}

TEST_CASE("the generic node calls add nodes and replace parameters by type", "[driver][graphs]") {
  CUcontext ctx = primary_context();
  const CUdeviceptr dev = zeroed(256);
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);

  CUgraphNodeParams set{};
  set.type = CU_GRAPH_NODE_TYPE_MEMSET;
  set.memset = CUDA_MEMSET_NODE_PARAMS_v2{dev, 0, 0x5a, 1, 16, 1, ctx};
  CUgraphNode set_node = nullptr, host_node = nullptr, empty_node = nullptr, alloc_node = nullptr;
  REQUIRE(cuGraphAddNode_v2(&set_node, graph, nullptr, nullptr, 0, &set) == CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(cuGraphNodeGetType(set_node, &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_MEMSET);
  std::atomic<int> ran{0};
  CUgraphNodeParams host{};
  host.type = CU_GRAPH_NODE_TYPE_HOST;
  host.host = CUDA_HOST_NODE_PARAMS_v2{record, &ran};
  const CUgraphEdgeData edge{};
  REQUIRE(cuGraphAddNode_v2(&host_node, graph, &set_node, &edge, 1, &host) == CUDA_SUCCESS);
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  REQUIRE(cuGraphAddNode(&empty_node, graph, &host_node, 1, &empty) == CUDA_SUCCESS);  // the 12.2 form
  size_t count = 0;
  CHECK(cuGraphNodeGetDependencies(empty_node, nullptr, nullptr, &count) == CUDA_SUCCESS);
  CHECK(count == 1);

  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev) == 0x5a);
  CHECK(ran.load() == 1);

  // Replaced in the executable graph (the graph keeps its own), then in the graph.
  set.memset.value = 0x6b;
  CHECK(cuGraphExecNodeSetParams(exec, set_node, &set) == CUDA_SUCCESS);
  launch_and_wait(exec, stream);
  CHECK(byte_at(dev) == 0x6b);
  CUDA_MEMSET_NODE_PARAMS back{};
  REQUIRE(cuGraphMemsetNodeGetParams(set_node, &back) == CUDA_SUCCESS);
  CHECK(back.value == 0x5a);
  set.memset.value = 0x7c;
  CHECK(cuGraphNodeSetParams(set_node, &set) == CUDA_SUCCESS);
  REQUIRE(cuGraphMemsetNodeGetParams(set_node, &back) == CUDA_SUCCESS);
  CHECK(back.value == 0x7c);
  CHECK(cuGraphNodeSetParams(empty_node, &empty) == CUDA_SUCCESS);
  CHECK(cuGraphExecNodeSetParams(exec, empty_node, &empty) == CUDA_SUCCESS);

  // Refusals: the type of another node, reserved fields set, the documented checks of each type,
  // non-default edge data, types not simulated, memory nodes' parameters.
  CHECK(cuGraphNodeSetParams(host_node, &set) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphExecNodeSetParams(exec, host_node, &set) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGraphNodeSetParams(set_node, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeParams reserved = set;
  reserved.reserved2 = 1;
  CHECK(cuGraphNodeSetParams(set_node, &reserved) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNode bad = nullptr;
  CHECK(cuGraphAddNode_v2(&bad, graph, nullptr, nullptr, 0, &reserved) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeParams wide = set;
  wide.memset.elementSize = 3;
  CHECK(cuGraphAddNode_v2(&bad, graph, nullptr, nullptr, 0, &wide) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeParams no_host{};
  no_host.type = CU_GRAPH_NODE_TYPE_HOST;
  CHECK(cuGraphAddNode_v2(&bad, graph, nullptr, nullptr, 0, &no_host) == CUDA_ERROR_INVALID_VALUE);
  CUgraphEdgeData programmatic{};
  programmatic.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  CHECK(cuGraphAddNode_v2(&bad, graph, &set_node, &programmatic, 1, &empty) == CUDA_ERROR_NOT_SUPPORTED);
  CUgraphNodeParams conditional{};  // no handle
  conditional.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  CHECK(cuGraphAddNode_v2(&bad, graph, nullptr, nullptr, 0, &conditional) == CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeParams semaphore{};  // a type not simulated
  semaphore.type = CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL;
  CHECK(cuGraphAddNode_v2(&bad, graph, nullptr, nullptr, 0, &semaphore) == CUDA_ERROR_NOT_SUPPORTED);
  size_t nodes = 0;
  CHECK(cuGraphGetNodes(graph, nullptr, &nodes) == CUDA_SUCCESS);
  CHECK(nodes == 3);  // no refused call added one

  CUgraph memory = nullptr;
  REQUIRE(cuGraphCreate(&memory, 0) == CUDA_SUCCESS);
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  alloc.alloc.bytesize = 4096;
  REQUIRE(cuGraphAddNode_v2(&alloc_node, memory, nullptr, nullptr, 0, &alloc) == CUDA_SUCCESS);
  CHECK(alloc.alloc.dptr != 0);  // written back
  CUgraphNodeParams release{};
  release.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  release.free.dptr = alloc.alloc.dptr;
  CUgraphNode free_node = nullptr;
  REQUIRE(cuGraphAddNode_v2(&free_node, memory, &alloc_node, nullptr, 1, &release) == CUDA_SUCCESS);
  CUdeviceptr freed = 0;
  CHECK(cuGraphMemFreeNodeGetParams(free_node, &freed) == CUDA_SUCCESS);
  CHECK(freed == alloc.alloc.dptr);
  CHECK(cuGraphNodeSetParams(alloc_node, &alloc) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuGraphNodeSetParams(free_node, &release) == CUDA_ERROR_NOT_SUPPORTED);

  CHECK(cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(memory) == CUDA_SUCCESS);
  CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuMemFree(dev) == CUDA_SUCCESS);
}
