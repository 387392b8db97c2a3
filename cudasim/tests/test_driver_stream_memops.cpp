// Stream memory operations through the driver API: cuStreamWaitValue32/64 hold back later work on
// their stream until the word satisfies the condition, cuStreamWriteValue32/64 write in stream
// order, cuStreamBatchMemOp runs its operations in order, the documented error codes, capture, and
// batch memory-operation graph nodes (added, read back, replaced, updated in executable graphs).
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using namespace driver_test;

// The v1 forms, which cuda.h declares only under __CUDA_API_VERSION_INTERNAL (it maps the plain
// names to the _v2 forms).
#undef cuStreamWriteValue32
#undef cuStreamBatchMemOp
extern "C" CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
extern "C" CUresult cuStreamBatchMemOp(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);

namespace {

// Page-locked host words the test writes directly, zeroed.
template <typename T>
T* host_word() {
  void* p = nullptr;
  REQUIRE(cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS);
  std::memset(p, 0, 64);
  return static_cast<T*>(p);
}

CUdeviceptr device_of(const void* host) { return reinterpret_cast<CUdeviceptr>(host); }

void raise_flag(void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }

// Polls the stream until it finishes or `limit` passes (so a wait that never ends fails the test
// instead of hanging it); the last query result.
CUresult finishes_within(CUstream stream, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  CUresult rc = cuStreamQuery(stream);
  while (rc == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rc = cuStreamQuery(stream);
  }
  return rc;
}

constexpr auto kStillBlocked = std::chrono::milliseconds(50);  // long enough for a wrong wait to pass
constexpr auto kLimit = std::chrono::seconds(5);

// True when a wait for `value` under `flags` holds `stream` back while the word is `before` and
// lets it go once the word is `after`.
template <typename T>
bool wait_releases(T before, T after, T value, unsigned flags) {
  T* word = host_word<T>();
  *word = before;
  CUstream stream = non_blocking_stream();
  std::atomic<bool> ran{false};
  const CUresult queued = sizeof(T) == 8 ? cuStreamWaitValue64(stream, device_of(word), value, flags)
                                         : cuStreamWaitValue32(stream, device_of(word), static_cast<cuuint32_t>(value), flags);
  REQUIRE(queued == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(stream, raise_flag, &ran) == CUDA_SUCCESS);
  std::this_thread::sleep_for(kStillBlocked);
  const bool held = !ran.load() && cuStreamQuery(stream) == CUDA_ERROR_NOT_READY;
  __atomic_store_n(word, after, __ATOMIC_RELEASE);
  const bool released = finishes_within(stream, kLimit) == CUDA_SUCCESS && ran.load();
  if (!released) return false;  // the stream still waits: freeing the word would wait for it
  cuStreamDestroy(stream);
  cuMemFreeHost(word);
  return held;
}

CUstreamBatchMemOpParams wait_op(CUdeviceptr address, cuuint32_t value, unsigned flags = CU_STREAM_WAIT_VALUE_GEQ) {
  CUstreamBatchMemOpParams p{};
  p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p.waitValue.address = address;
  p.waitValue.value = value;
  p.waitValue.flags = flags;
  return p;
}

CUstreamBatchMemOpParams write_op(CUdeviceptr address, cuuint32_t value) {
  CUstreamBatchMemOpParams p{};
  p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = address;
  p.writeValue.value = value;
  return p;
}

// Launches `exec`, which waits for words[0] >= 1 before it writes `written` with `value`: the write
// waits until the host sets words[0].
bool launch_waits_for_host(CUgraphExec exec, CUstream stream, cuuint32_t* words, cuuint32_t* written, cuuint32_t value) {
  REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
  std::this_thread::sleep_for(kStillBlocked);
  const bool held = __atomic_load_n(written, __ATOMIC_ACQUIRE) == 0;
  __atomic_store_n(&words[0], 1u, __ATOMIC_RELEASE);
  return finishes_within(stream, kLimit) == CUDA_SUCCESS && held && *written == value;
}

}  // namespace

TEST_CASE("a wait-value holds back later work on its stream until another stream writes the value",
          "[driver][memops]") {
  primary_context();
  CUdeviceptr word = 0;
  REQUIRE(cuMemAlloc(&word, 8) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD32(word, 0, 2) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CUstream waiter = non_blocking_stream(), writer = non_blocking_stream();
  std::atomic<bool> ran{false};
  REQUIRE(cuStreamWaitValue32(waiter, word, 7, CU_STREAM_WAIT_VALUE_EQ) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(waiter, raise_flag, &ran) == CUDA_SUCCESS);
  // An event recorded after the wait completes only with it.
  CUevent after = nullptr;
  REQUIRE(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(after, waiter) == CUDA_SUCCESS);
  std::this_thread::sleep_for(kStillBlocked);
  CHECK_FALSE(ran.load());
  CHECK(cuStreamQuery(waiter) == CUDA_ERROR_NOT_READY);
  CHECK(cuEventQuery(after) == CUDA_ERROR_NOT_READY);
  // A write of another value does not satisfy EQ; the second one does.
  REQUIRE(cuStreamWriteValue32(writer, word, 6, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(writer) == CUDA_SUCCESS);
  std::this_thread::sleep_for(kStillBlocked);
  CHECK_FALSE(ran.load());
  REQUIRE(cuStreamWriteValue32(writer, word, 7, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS);
  CHECK(finishes_within(waiter, kLimit) == CUDA_SUCCESS);
  CHECK(ran.load());
  CHECK(cuEventSynchronize(after) == CUDA_SUCCESS);
  cuEventDestroy(after);
  cuStreamDestroy(waiter);
  cuStreamDestroy(writer);
  cuMemFree(word);
}

TEST_CASE("wait-value conditions: cyclic greater-or-equal, equal, and, nor; 32 and 64 bits", "[driver][memops]") {
  primary_context();
  CHECK(wait_releases<cuuint32_t>(4, 5, 5, CU_STREAM_WAIT_VALUE_GEQ));
  CHECK(wait_releases<cuuint32_t>(0xfffffff0u, 2, 1, CU_STREAM_WAIT_VALUE_GEQ));  // cyclic: past the wrap
  CHECK(wait_releases<cuuint32_t>(3, 9, 9, CU_STREAM_WAIT_VALUE_EQ));
  CHECK(wait_releases<cuuint32_t>(0x0f, 0x10, 0x30, CU_STREAM_WAIT_VALUE_AND));
  CHECK(wait_releases<cuuint32_t>(0xffffffffu, 0x7ffffff0u, 0x0f, CU_STREAM_WAIT_VALUE_NOR));
  CHECK(wait_releases<cuuint64_t>(1ull << 40, 1ull << 41, 1ull << 41, CU_STREAM_WAIT_VALUE_GEQ));
  CHECK(wait_releases<cuuint64_t>(5, 1ull << 33 | 5, 1ull << 33 | 5, CU_STREAM_WAIT_VALUE_EQ));
  // A condition that already holds does not wait.
  auto* word = host_word<cuuint32_t>();
  *word = 10;
  CUstream stream = non_blocking_stream();
  REQUIRE(cuStreamWaitValue32(stream, device_of(word), 3, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
  CHECK(finishes_within(stream, kLimit) == CUDA_SUCCESS);
  cuStreamDestroy(stream);
  cuMemFreeHost(word);
}

TEST_CASE("write-value writes in stream order, after the work queued before it", "[driver][memops]") {
  primary_context();
  auto* words = host_word<cuuint64_t>();
  CUstream stream = non_blocking_stream();
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuStreamWriteValue64(stream, device_of(&words[0]), 0x123456789abull, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamWriteValue32(stream, device_of(&words[1]), 42, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) ==
          CUDA_SUCCESS);  // the v1 form takes the flag
  std::this_thread::sleep_for(kStillBlocked);
  CHECK(words[0] == 0);
  CHECK(words[1] == 0);
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(words[0] == 0x123456789abull);
  CHECK(static_cast<cuuint32_t>(words[1]) == 42);
  cuStreamDestroy(stream);
  cuMemFreeHost(words);
}

TEST_CASE("a batch runs its operations in array order", "[driver][memops]") {
  primary_context();
  auto* words = host_word<cuuint32_t>();
  CUstream stream = non_blocking_stream();
  // Write 1, wait for the host's 2, then write 3: the last write waits for the host.
  CUstreamBatchMemOpParams ops[4] = {write_op(device_of(&words[0]), 1), wait_op(device_of(&words[1]), 2),
                                     write_op(device_of(&words[2]), 3), {}};
  ops[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
  REQUIRE(cuStreamBatchMemOp_v2(stream, 4, ops, 0) == CUDA_SUCCESS);
  std::this_thread::sleep_for(kStillBlocked);
  CHECK(__atomic_load_n(&words[0], __ATOMIC_ACQUIRE) == 1);
  CHECK(__atomic_load_n(&words[2], __ATOMIC_ACQUIRE) == 0);
  __atomic_store_n(&words[1], 2u, __ATOMIC_RELEASE);
  REQUIRE(finishes_within(stream, kLimit) == CUDA_SUCCESS);
  CHECK(words[2] == 3);
  cuStreamDestroy(stream);
  cuMemFreeHost(words);
}

TEST_CASE("stream memory operations refuse what the documentation refuses", "[driver][memops]") {
  primary_context();
  CUstream stream = non_blocking_stream();
  auto* words = host_word<cuuint64_t>();
  const CUdeviceptr word = device_of(words);
  SECTION("addresses: misaligned, not device or page-locked memory, managed memory") {
    CHECK(cuStreamWaitValue32(stream, word + 2, 0, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamWriteValue64(stream, word + 4, 0, 0) == CUDA_ERROR_INVALID_VALUE);
    cuuint32_t on_stack = 0;
    CHECK(cuStreamWriteValue32(stream, device_of(&on_stack), 1, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamWaitValue32(stream, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr managed = 0;
    REQUIRE(cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    CHECK(cuStreamWriteValue32(stream, managed, 1, 0) == CUDA_ERROR_INVALID_VALUE);
    cuMemFree(managed);
    CUdeviceptr dev = 0;
    REQUIRE(cuMemAlloc(&dev, 64) == CUDA_SUCCESS);
    CHECK(cuStreamWriteValue64(stream, dev + 56, 1, 0) == CUDA_SUCCESS);
    CHECK(cuStreamWriteValue64(stream, dev + 64, 1, 0) == CUDA_ERROR_INVALID_VALUE);  // past the end
    REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    cuMemFree(dev);
  }
  SECTION("flags") {
    CHECK(cuStreamWaitValue32(stream, word, 0, 0x10) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamWaitValue64(stream, word, 0, CU_STREAM_WAIT_VALUE_FLUSH) == CUDA_ERROR_NOT_SUPPORTED);
    // NO_MEMORY_BARRIER is a v1 flag only.
    CHECK(cuStreamWriteValue32_v2(stream, word, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamWriteValue64(stream, word, 1, 2) == CUDA_ERROR_INVALID_VALUE);
  }
  SECTION("batches: count, flags, operations, and the memory barrier being a _v2 operation") {
    CUstreamBatchMemOpParams ops[256];
    for (auto& op : ops) op = write_op(word, 1);
    CHECK(cuStreamBatchMemOp_v2(stream, 0, ops, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamBatchMemOp_v2(stream, 256, ops, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamBatchMemOp_v2(stream, 255, ops, 0) == CUDA_SUCCESS);
    CHECK(cuStreamBatchMemOp_v2(stream, 1, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamBatchMemOp_v2(stream, 1, ops, 1) == CUDA_ERROR_INVALID_VALUE);
    CUstreamBatchMemOpParams barrier{};
    barrier.memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    CHECK(cuStreamBatchMemOp(stream, 1, &barrier, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamBatchMemOp_v2(stream, 1, &barrier, 0) == CUDA_SUCCESS);
    barrier.memoryBarrier.flags = 7;
    CHECK(cuStreamBatchMemOp_v2(stream, 1, &barrier, 0) == CUDA_ERROR_INVALID_VALUE);
    CUstreamBatchMemOpParams flush{};
    flush.flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    CHECK(cuStreamBatchMemOp_v2(stream, 1, &flush, 0) == CUDA_ERROR_NOT_SUPPORTED);
    CUstreamBatchMemOpParams unknown{};
    unknown.operation = static_cast<CUstreamBatchMemOpType>(99);
    CHECK(cuStreamBatchMemOp_v2(stream, 1, &unknown, 0) == CUDA_ERROR_INVALID_VALUE);
    // One bad operation refuses the whole batch: nothing is written.
    CUstreamBatchMemOpParams mixed[2] = {write_op(word, 5), write_op(word + 1, 6)};
    CHECK(cuStreamBatchMemOp_v2(stream, 2, mixed, 0) == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(static_cast<cuuint32_t>(*words) == 1);
  }
  SECTION("streams") {
    CHECK(cuStreamWriteValue32(reinterpret_cast<CUstream>(&words[4]), word, 1, 0) == CUDA_ERROR_INVALID_HANDLE);
  }
  cuStreamDestroy(stream);
  cuMemFreeHost(words);
}

TEST_CASE("the devices report 64-bit operations and NOR waits, and no remote-write flush", "[driver][memops]") {
  primary_context();
  int value = -1;
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0) == CUDA_SUCCESS);
  CHECK(value == 1);
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0) == CUDA_SUCCESS);
  CHECK(value == 1);
  REQUIRE(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, 0) == CUDA_SUCCESS);
  CHECK(value == 0);
}

TEST_CASE("captured memory operations become a batch node that runs at each launch", "[driver][memops]") {
  primary_context();
  auto* words = host_word<cuuint32_t>();
  CUstream stream = non_blocking_stream();
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuStreamWaitValue32(stream, device_of(&words[0]), 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
  REQUIRE(cuStreamWriteValue32(stream, device_of(&words[1]), 9, 0) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  REQUIRE(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  CHECK(words[1] == 0);  // captured, not run
  size_t count = 0;
  REQUIRE(cuGraphGetNodes(graph, nullptr, &count) == CUDA_SUCCESS);
  REQUIRE(count == 2);
  std::vector<CUgraphNode> nodes(count);
  REQUIRE(cuGraphGetNodes(graph, nodes.data(), &count) == CUDA_SUCCESS);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  REQUIRE(cuGraphNodeGetType(nodes[1], &type) == CUDA_SUCCESS);
  CHECK(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
  REQUIRE(cuGraphBatchMemOpNodeGetParams(nodes[1], &params) == CUDA_SUCCESS);
  CHECK(params.count == 1);
  CHECK(params.ctx == primary_context());
  CHECK(params.paramArray[0].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32);
  CHECK(params.paramArray[0].writeValue.value == 9);
  CUgraphExec exec = nullptr;
  REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CHECK(launch_waits_for_host(exec, stream, words, &words[1], 9));
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  cuStreamDestroy(stream);
  cuMemFreeHost(words);
}

TEST_CASE("batch memory-operation nodes: added, read back, replaced and updated in executable graphs",
          "[driver][memops][graphs]") {
  CUcontext ctx = primary_context();
  auto* words = host_word<cuuint32_t>();
  CUstream stream = non_blocking_stream();
  CUgraph graph = nullptr;
  REQUIRE(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> ops = {wait_op(device_of(&words[0]), 1), write_op(device_of(&words[1]), 5)};
  CUDA_BATCH_MEM_OP_NODE_PARAMS params{ctx, 2, ops.data(), 0};
  CUgraphNode node = nullptr;
  REQUIRE(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params) == CUDA_SUCCESS);
  ops[1].writeValue.value = 77;  // the node copied the array
  CUDA_BATCH_MEM_OP_NODE_PARAMS read{};
  REQUIRE(cuGraphBatchMemOpNodeGetParams(node, &read) == CUDA_SUCCESS);
  CHECK(read.ctx == ctx);
  CHECK(read.count == 2);
  CHECK(read.paramArray != ops.data());
  CHECK(read.paramArray[1].writeValue.value == 5);

  SECTION("launches wait and write as the operations say") {
    CUgraphExec exec = nullptr;
    REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
    CHECK(launch_waits_for_host(exec, stream, words, &words[1], 5));
    // Changed in the executable graph: a new value and address (allowed), and only for later launches.
    ops[1] = write_op(device_of(&words[2]), 6);
    REQUIRE(cuGraphExecBatchMemOpNodeSetParams(exec, node, &params) == CUDA_SUCCESS);
    REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(finishes_within(stream, kLimit) == CUDA_SUCCESS);
    CHECK(words[2] == 6);
    REQUIRE(cuGraphBatchMemOpNodeGetParams(node, &read) == CUDA_SUCCESS);
    CHECK(read.paramArray[1].writeValue.value == 5);  // the graph's node is unchanged
    // The count, an operation's type and the context may not change.
    params.count = 1;
    CHECK(cuGraphExecBatchMemOpNodeSetParams(exec, node, &params) == CUDA_ERROR_INVALID_VALUE);
    params.count = 2;
    ops[0] = write_op(device_of(&words[0]), 1);
    CHECK(cuGraphExecBatchMemOpNodeSetParams(exec, node, &params) == CUDA_ERROR_INVALID_VALUE);
    cuGraphExecDestroy(exec);
  }
  SECTION("replaced parameters reach later instantiations") {
    ops = {write_op(device_of(&words[3]), 8)};
    params.paramArray = ops.data();
    params.count = 1;
    REQUIRE(cuGraphBatchMemOpNodeSetParams(node, &params) == CUDA_SUCCESS);
    REQUIRE(cuGraphBatchMemOpNodeGetParams(node, &read) == CUDA_SUCCESS);
    CHECK(read.count == 1);
    CUgraphExec exec = nullptr;
    REQUIRE(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
    REQUIRE(cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(finishes_within(stream, kLimit) == CUDA_SUCCESS);
    CHECK(words[3] == 8);
    cuGraphExecDestroy(exec);
  }
  SECTION("bad parameters and nodes of another type") {
    CUDA_BATCH_MEM_OP_NODE_PARAMS bad = params;
    bad.flags = 1;
    CHECK(cuGraphBatchMemOpNodeSetParams(node, &bad) == CUDA_ERROR_INVALID_VALUE);
    bad = params;
    bad.count = 0;
    CHECK(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &bad) == CUDA_ERROR_INVALID_VALUE);
    bad = params;
    bad.ctx = reinterpret_cast<CUcontext>(&read);
    CHECK(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &bad) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphBatchMemOpNodeGetParams(node, nullptr) == CUDA_ERROR_INVALID_VALUE);
    CUgraphNode empty = nullptr;
    REQUIRE(cuGraphAddEmptyNode(&empty, graph, nullptr, 0) == CUDA_SUCCESS);
    CHECK(cuGraphBatchMemOpNodeGetParams(empty, &read) == CUDA_ERROR_INVALID_VALUE);
  }
  SECTION("through the generic node calls") {
    CUgraphNodeParams generic{};
    generic.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    generic.memOp = CUDA_BATCH_MEM_OP_NODE_PARAMS_v2{ctx, 1, ops.data() + 1, 0};
    CUgraphNode added = nullptr;
    REQUIRE(cuGraphAddNode(&added, graph, &node, nullptr, 1, &generic) == CUDA_SUCCESS);
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    REQUIRE(cuGraphNodeGetType(added, &type) == CUDA_SUCCESS);
    CHECK(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    ops[1].writeValue.value = 12;
    REQUIRE(cuGraphNodeSetParams(added, &generic) == CUDA_SUCCESS);
    REQUIRE(cuGraphBatchMemOpNodeGetParams(added, &read) == CUDA_SUCCESS);
    CHECK(read.paramArray[0].writeValue.value == 12);
  }
  cuGraphDestroy(graph);
  cuStreamDestroy(stream);
  cuMemFreeHost(words);
}
