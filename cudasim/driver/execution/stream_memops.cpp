// Stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64 and cuStreamBatchMemOp
// (the v1 and _v2 forms, each with its _ptsz spelling), captured as batch memory-operation nodes, and
// the batch memory-operation nodes of graphs built by hand (cuGraphAddBatchMemOpNode and its
// parameter calls; cuGraphExecBatchMemOpNodeSetParams is in graph_update.cpp).
//
// A wait is an operation of the stream's worker that polls the word until its condition holds, so
// everything queued after it on that stream waits too (and whatever waits for the stream); a write
// stores the word when the worker reaches it. The words are device memory or page-locked host
// memory, never managed memory (cuda.h), aligned to their size. The simulated devices answer 1 to
// CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS and CAN_USE_STREAM_WAIT_VALUE_NOR and 0 to
// CAN_FLUSH_REMOTE_WRITES: a flush (CU_STREAM_WAIT_VALUE_FLUSH, CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES)
// is CUDA_ERROR_NOT_SUPPORTED.
#include "state.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>

using namespace cudasim;

namespace {

// "count: the number of operations in the array. Must be less than 256."
constexpr unsigned kMaxBatch = 255;
constexpr unsigned kWaitKindMask = 0x3;  // GEQ, EQ, AND, NOR

template <typename T>
bool condition_holds(T current, T value, unsigned kind) {
  switch (kind) {
    case CU_STREAM_WAIT_VALUE_GEQ: return static_cast<std::make_signed_t<T>>(current - value) >= 0;  // cyclic
    case CU_STREAM_WAIT_VALUE_EQ: return current == value;
    case CU_STREAM_WAIT_VALUE_AND: return (current & value) != 0;
    default: return static_cast<T>(~(current | value)) != 0;  // NOR
  }
}

// Blocks the worker until the word satisfies the condition: whoever writes it (the host, another
// stream, another process sharing the memory) does so from another thread, so this polls.
template <typename T>
void wait_for_word(std::uintptr_t address, T value, unsigned kind) {
  auto* word = reinterpret_cast<T*>(address);
  for (unsigned spins = 0; !condition_holds(__atomic_load_n(word, __ATOMIC_ACQUIRE), value, kind);) {
    if (spins < 64) {
      ++spins;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

template <typename T>
void write_word(std::uintptr_t address, T value, bool barrier) {
  // The default write is ordered after every earlier write of the stream (a fence before it).
  __atomic_store_n(reinterpret_cast<T*>(address), value, barrier ? __ATOMIC_SEQ_CST : __ATOMIC_RELAXED);
}

// The word an operation reads or writes: device memory (not managed) or page-locked host memory,
// aligned to its size.
CUresult check_word(State& st, CUdeviceptr address, std::size_t bytes) {
  if (address == 0 || address % bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  if (const Allocation* allocation = find_allocation(st, address, bytes))
    return allocation->kind == AllocKind::Managed ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  return host_range_pinned(st, address, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// One operation checked as the driver checks it, and its work. `v2`: the _v2 rules (memory barriers
// allowed; CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is v1 only).
CUresult memop_work(State& st, const CUstreamBatchMemOpParams& p, bool v2, Operation* op) {
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
      const bool wide = p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
      const unsigned flags = p.waitValue.flags;
      if ((flags & ~(kWaitKindMask | CU_STREAM_WAIT_VALUE_FLUSH)) != 0) return CUDA_ERROR_INVALID_VALUE;
      if ((flags & CU_STREAM_WAIT_VALUE_FLUSH) != 0) return CUDA_ERROR_NOT_SUPPORTED;
      if (CUresult rc = check_word(st, p.waitValue.address, wide ? 8 : 4); rc != CUDA_SUCCESS) return rc;
      const std::uintptr_t address = p.waitValue.address;
      const unsigned kind = flags & kWaitKindMask;
      if (wide) *op = [address, value = p.waitValue.value64, kind] { wait_for_word(address, value, kind); };
      else *op = [address, value = p.waitValue.value, kind] { wait_for_word(address, value, kind); };
      return CUDA_SUCCESS;
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
      const bool wide = p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
      const unsigned flags = p.writeValue.flags;
      const unsigned allowed = v2 ? 0u : unsigned{CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER};
      if ((flags & ~allowed) != 0) return CUDA_ERROR_INVALID_VALUE;
      if (CUresult rc = check_word(st, p.writeValue.address, wide ? 8 : 4); rc != CUDA_SUCCESS) return rc;
      const std::uintptr_t address = p.writeValue.address;
      const bool barrier = (flags & CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) == 0;
      if (wide) *op = [address, value = p.writeValue.value64, barrier] { write_word(address, value, barrier); };
      else *op = [address, value = p.writeValue.value, barrier] { write_word(address, value, barrier); };
      return CUDA_SUCCESS;
    }
    case CU_STREAM_MEM_OP_BARRIER:
      if (!v2) return CUDA_ERROR_INVALID_VALUE;  // "Only supported in the _v2 API"
      if (p.memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS &&
          p.memoryBarrier.flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
        return CUDA_ERROR_INVALID_VALUE;
      *op = [] { std::atomic_thread_fence(std::memory_order_seq_cst); };
      return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      if (p.flushRemoteWrites.flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "Must be 0"
      return CUDA_ERROR_NOT_SUPPORTED;  // CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// cuStreamBatchMemOp's and the v1/_v2 single-operation calls' common path.
CUresult enqueue_memops(CUstream handle, unsigned count, const CUstreamBatchMemOpParams* ops, unsigned flags, bool v2,
                        bool per_thread_default) {
  return with_stream(handle, per_thread_default, [&](State& st, const std::shared_ptr<CUstream_st>& stream) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // "Reserved for future expansion; must be 0"
    Operation op;
    if (CUresult rc = batch_memops_work(st, ops, count, v2, &op); rc != CUDA_SUCCESS) return rc;
    bool captured = false;
    CUgraphNode_st* node = nullptr;  // captured: a batch memory-operation node of the stream's context
    if (CUresult rc = capture_work(st, stream, NodeKind::BatchMemOp, &captured, op, &node); rc != CUDA_SUCCESS)
      return rc;
    if (captured) {
      node->memops.assign(ops, ops + count);
      node->memop_ctx = stream->ctx;
      return CUDA_SUCCESS;
    }
    submit(st, stream, std::move(op));
    return CUDA_SUCCESS;
  });
}

// One wait or write (`fields`: the union member of its kind), as a batch of one.
template <typename T, typename Fields>
CUresult single_op(CUstream stream, CUdeviceptr address, T value, unsigned flags, bool v2, bool per_thread,
                   Fields CUstreamBatchMemOpParams::*fields, CUstreamBatchMemOpType op32,
                   CUstreamBatchMemOpType op64) {
  CUstreamBatchMemOpParams p{};
  Fields& op = p.*fields;
  op.operation = sizeof(T) == 8 ? op64 : op32;
  op.address = address;
  if constexpr (sizeof(T) == 8) op.value64 = value;
  else op.value = value;
  op.flags = flags;
  return enqueue_memops(stream, 1, &p, 0, v2, per_thread);
}

template <typename T>
CUresult wait_value(CUstream stream, CUdeviceptr address, T value, unsigned flags, bool v2, bool per_thread) {
  return single_op(stream, address, value, flags, v2, per_thread, &CUstreamBatchMemOpParams::waitValue,
                   CU_STREAM_MEM_OP_WAIT_VALUE_32, CU_STREAM_MEM_OP_WAIT_VALUE_64);
}

template <typename T>
CUresult write_value(CUstream stream, CUdeviceptr address, T value, unsigned flags, bool v2, bool per_thread) {
  return single_op(stream, address, value, flags, v2, per_thread, &CUstreamBatchMemOpParams::writeValue,
                   CU_STREAM_MEM_OP_WRITE_VALUE_32, CU_STREAM_MEM_OP_WRITE_VALUE_64);
}

}  // namespace

CUresult cudasim::batch_memops_work(State& st, const CUstreamBatchMemOpParams* ops, unsigned count, bool v2,
                                    Operation* op) {
  if (count == 0 || count > kMaxBatch || ops == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Operation> steps(count);
  for (unsigned i = 0; i < count; ++i) {
    if (CUresult rc = memop_work(st, ops[i], v2, &steps[i]); rc != CUDA_SUCCESS) return rc;
  }
  // In the order they appear in the array.
  *op = [steps = std::move(steps)] {
    for (const Operation& step : steps) step();
  };
  return CUDA_SUCCESS;
}

CUresult cudasim::batch_memop_node_work(State& st, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p, Operation* op) {
  if (p == nullptr || p->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // The context the operations belong to: a live one (none: the caller's current one).
  if (p->ctx != nullptr && !st.contexts.contains(p->ctx)) return CUDA_ERROR_INVALID_VALUE;
  return batch_memops_work(st, p->paramArray, p->count, true, op);
}

#define CUDASIM_VALUE_ENTRY_POINT(name, type, impl, v2, per_thread)                                  \
  CUDASIM_EXPORT CUresult name(CUstream stream, CUdeviceptr addr, type value, unsigned int flags) { \
    return impl(stream, addr, value, flags, v2, per_thread);                                       \
  }
#define CUDASIM_MEMOP_ENTRY_POINTS(suffix, v2, per_thread)                                                     \
  CUDASIM_VALUE_ENTRY_POINT(cuStreamWaitValue32##suffix, cuuint32_t, wait_value, v2, per_thread)              \
  CUDASIM_VALUE_ENTRY_POINT(cuStreamWaitValue64##suffix, cuuint64_t, wait_value, v2, per_thread)              \
  CUDASIM_VALUE_ENTRY_POINT(cuStreamWriteValue32##suffix, cuuint32_t, write_value, v2, per_thread)            \
  CUDASIM_VALUE_ENTRY_POINT(cuStreamWriteValue64##suffix, cuuint64_t, write_value, v2, per_thread)            \
  CUDASIM_EXPORT CUresult cuStreamBatchMemOp##suffix(CUstream stream, unsigned int count,                      \
                                                     CUstreamBatchMemOpParams* paramArray, unsigned int flags) { \
    return enqueue_memops(stream, count, paramArray, flags, v2, per_thread);                                  \
  }

// Every spelling the toolkit's driver exports: v1 and _v2, each with its per-thread form.
CUDASIM_MEMOP_ENTRY_POINTS(, false, false)
CUDASIM_MEMOP_ENTRY_POINTS(_ptsz, false, true)
CUDASIM_MEMOP_ENTRY_POINTS(_v2, true, false)
CUDASIM_MEMOP_ENTRY_POINTS(_v2_ptsz, true, true)

// --- batch memory-operation nodes ---

// The node keeps its own copy of the operations (the caller's array may go after the call).
CUDASIM_EXPORT CUresult cuGraphAddBatchMemOpNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode* dependencies, size_t numDependencies,
                                                 const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  return add_graph_node(
      phGraphNode, hGraph, dependencies, numDependencies, NodeKind::BatchMemOp,
      [&](State& st, Operation* op) { return batch_memop_node_work(st, nodeParams, op); },
      [&](CUgraphNode_st* node) { keep_batch_memop_params(node, *nodeParams); });
}

void cudasim::keep_batch_memop_params(CUgraphNode_st* node, const CUDA_BATCH_MEM_OP_NODE_PARAMS& p) {
  node->memops.assign(p.paramArray, p.paramArray + p.count);
  node->memop_ctx = p.ctx;
}

// The array handed out is the node's, valid until the node goes or its parameters change.
CUDASIM_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams_out) {
  if (nodeParams_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::BatchMemOp); rc != CUDA_SUCCESS) return rc;
  *nodeParams_out = CUDA_BATCH_MEM_OP_NODE_PARAMS{hNode->memop_ctx, static_cast<unsigned>(hNode->memops.size()),
                                                  hNode->memops.data(), 0};
  return CUDA_SUCCESS;
}

// Later instantiations run the new operations; existing ones keep what they took.
CUDASIM_EXPORT CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  Locked l;
  if (CUresult rc = node_of_kind(l, hNode, NodeKind::BatchMemOp); rc != CUDA_SUCCESS) return rc;
  Operation op;
  if (CUresult rc = batch_memop_node_work(l.st, nodeParams, &op); rc != CUDA_SUCCESS) return rc;
  keep_batch_memop_params(hNode, *nodeParams);
  hNode->op = std::move(op);
  return CUDA_SUCCESS;
}
