// The simulated driver's process-wide state: devices, contexts, live allocations, pools and the
// statistics the report prints. One mutex (State::mu) guards all of it; stream queues have their
// own locks (streams.h), always taken after State::mu, never before.
#pragma once

#include "config.h"
#include "cuda_api.h"
#include "graphs.h"
#include "streams.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

struct CUmemPoolHandle_st;

namespace cudasim {
struct VmmState;  // vmm.cpp: reservations, physical allocations, handles and mappings
struct KernelState;  // kernels.cpp: loaded modules and libraries, their functions and kernels
struct IpcState;  // ipc.cpp: this process's number and the handles it opened
struct TextureObjects;  // texture_objects.cpp: live texture and surface objects
struct SharedDevice;  // shared_device.cpp: a device's memory shared with other processes
struct ManagedPages;  // managed.cpp: the advice given and prefetches asked for, per page of managed memory
struct TextureRefState;  // texture_references.cpp: texture and surface references
struct ContextLocalStorage;  // export_tables/context_local_storage.cpp: values kept per context
}

namespace cudasim {

// Every allocation is at least this aligned, as on real devices.
constexpr std::size_t kMinAlignment = 512;
constexpr std::size_t kLargePage = 2u << 20;
// `n` rounded up to a multiple of `to`; SIZE_MAX when that does not fit a size_t (no device holds
// that much, so every caller then refuses the request as too large instead of wrapping to a small one).
constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return n > SIZE_MAX - (to - 1) ? SIZE_MAX : (n + to - 1) / to * to;
}

// Counters printed per device in the report; names match the report's keys.
struct DeviceStats {
  std::uint64_t driver_allocs = 0, driver_frees = 0;
  std::uint64_t bytes_reserved = 0, peak_bytes_reserved = 0, largest_alloc = 0;
  std::uint64_t context_syncs = 0, stream_syncs = 0, contexts_created = 0;
  std::uint64_t pool_async_allocs = 0, pool_async_frees = 0;
  std::uint64_t pool_bytes_reserved = 0, pool_peak_bytes_reserved = 0;
  std::uint64_t pool_bytes_used = 0, pool_peak_bytes_used = 0;
  // Graph memory (cuMemAllocAsync on a capturing stream): allocation and free nodes captured, and
  // the bytes graphs own now / at most.
  std::uint64_t graph_allocs = 0, graph_frees = 0, graph_bytes = 0, graph_peak_bytes = 0;
  // CUDA arrays and mipmapped arrays (arrays.cpp): created, destroyed (cuArrayDestroy /
  // cuMipmappedArrayDestroy), and the device memory they hold now / at most.
  std::uint64_t array_creates = 0, array_destroys = 0, array_bytes = 0, array_peak_bytes = 0;
  // Virtual memory management (vmm.cpp): cuMemCreate / cuMemRelease calls, physical bytes charged
  // now / at most, cuMemMap / cuMemUnmap calls, and address space reserved by contexts of the device.
  std::uint64_t vmm_creates = 0, vmm_releases = 0, vmm_bytes = 0, vmm_peak_bytes = 0;
  std::uint64_t vmm_maps = 0, vmm_unmaps = 0, vmm_reserved_va_bytes = 0;
  // Managed memory (managed.cpp): cuMemAllocManaged and its cuMemFree, bytes live now / at most.
  std::uint64_t managed_allocs = 0, managed_frees = 0, managed_bytes = 0, managed_peak_bytes = 0;
  // Kernel launches (kernels.cpp) queued on the device's streams; none runs device code.
  std::uint64_t kernel_launches = 0;
};

// A page-locked host range (host_memory.cpp): from cuMemHostAlloc / cuMemAllocHost (Allocated) or
// cuMemHostRegister (Registered). Invariant: ranges in State::pinned never overlap.
struct PinnedRange {
  enum class Origin { Allocated, Registered };
  std::uintptr_t base = 0;
  std::size_t size = 0;
  unsigned flags = 0;
  CUctx_st* ctx = nullptr;  // current when it was pinned (CU_POINTER_ATTRIBUTE_CONTEXT)
  Origin origin = Origin::Allocated;
};

// Process-wide pinned host memory counters for the report.
struct PinnedStats {
  std::uint64_t allocs = 0, frees = 0, registers = 0, unregisters = 0, bytes = 0, peak_bytes = 0;
};

// Invariant: committed == live contexts * overhead + stats.bytes_reserved <= total.
struct Device {
  int ordinal = 0;
  int physical = 0;  // its number among all simulated devices (UUID, PCI bus, NVML index)
  std::uint64_t total = 0;
  std::uint64_t committed = 0;
  DeviceStats stats;
  CUctx_st* primary = nullptr;        // created on first retain, reused after reset
  int primary_refcount = 0;
  unsigned primary_flags = 0;
  CUmemoryPool default_pool = nullptr;
  CUmemoryPool current_pool = nullptr;
  SharedDevice* shared = nullptr;  // CUDASIM_SHARED_DEVICES: the memory every process took (shared_device.h)
  // CU_GRAPH_MEM_ATTR_*_HIGH: the most stats.graph_bytes reached since the program last reset each.
  std::uint64_t graph_used_high = 0, graph_reserved_high = 0;
};

// Vmm: one cuMemMap mapping while some device may access it (cuMemSetAccess); Managed:
// cuMemAllocManaged memory (charged to no device, freed with its context like Sync); Imported: another
// process's cuMemAlloc memory opened with cuIpcOpenMemHandle, or (`pool` set: the imported pool) a
// pointer of another process's pool imported with cuMemPoolImportPointer (charged to the exporter,
// not here).
enum class AllocKind { Sync, Pool, Graph, Vmm, Managed, Imported };

// A live device allocation. [base, base + size) is what callers may touch.
struct Allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::size_t accounted = 0;  // bytes charged to the device (sync), taken from the block (pool), mapped (graph)
  int device = 0;
  CUctx_st* ctx = nullptr;    // null for pool and graph memory (it belongs to the pool / graph)
  AllocKind kind = AllocKind::Sync;
  CUmemPoolHandle_st* pool = nullptr;
  std::uint64_t buffer_id = 0;  // CU_POINTER_ATTRIBUTE_BUFFER_ID: never reused, even for an address
  bool sync_memops = false;     // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: its synchronous copies and sets wait
  bool module_global = false;   // a module's global (globals.cpp): freed by its unload, never by cuMemFree
};

// A range of host address space standing in for device memory.
struct Mapping {
  void* addr = nullptr;
  std::size_t length = 0;
  int fd = -1;  // the memfd mapped there (cuMemAlloc and imported memory), closed when retired
};

struct State {
  State* before_fork = nullptr;  // the parent's state, abandoned in a forked child (kept reachable)
  std::mutex mu;
  std::uint64_t epoch = 0;  // bumped in a forked child so thread-local context stacks reset
  bool initialized = false;
  CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
  Config config;
  std::vector<Device> devices;
  std::unordered_set<CUctx_st*> contexts;  // live (created or active primary) contexts
  std::vector<CUctx_st*> context_objects;  // every context object made; kept reachable, never freed
  std::unordered_map<CUstream_st*, std::shared_ptr<CUstream_st>> streams;   // created streams
  std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>> events;
  std::unordered_set<CUmemPoolHandle_st*> pools;                           // live pools
  std::unordered_set<CUarray_st*> arrays;                      // live CUDA arrays (arrays.cpp)
  std::unordered_set<CUmipmappedArray_st*> mipmapped_arrays;   // live mipmapped arrays
  std::map<std::uintptr_t, Allocation> allocations;                        // by base
  std::unordered_map<std::uintptr_t, Mapping> mappings;                    // sync and graph allocations
  std::vector<std::shared_ptr<Capture>> captures;  // ongoing capture sequences (graphs.h)
  std::unordered_set<CUgraph_st*> graphs;          // graphs returned by cuStreamEndCapture or cuGraphCreate, not destroyed
  // Managed allocations advised or prefetched, by base, with the buffer id they were made for
  // (managed.cpp; an entry whose id is not the live allocation's is stale).
  std::unordered_map<std::uintptr_t, std::shared_ptr<ManagedPages>> managed_pages;
  std::unordered_set<CUgraphExec_st*> graph_execs;  // instantiated graphs not destroyed (graph_exec.cpp)
  std::unordered_map<CUgraph_st*, int> graph_exec_counts;  // instantiations per graph: they keep its memory
  std::uint64_t last_capture_id = 0;
  unsigned long long last_stream_id = 0;  // cuStreamGetId numbers handed out (stream_attributes.cpp)
  // Conditional handles by number, while their graph lives (graph_conditional.cpp).
  std::map<CUgraphConditionalHandle, ConditionalHandle> conditional_handles;
  CUgraphConditionalHandle last_conditional_handle = 0;
  std::deque<Mapping> quarantine;  // freed ranges kept PROT_NONE so late use faults
  std::uint64_t device_allocations = 0;  // attempts counted against CUDASIM_FAIL_ALLOC_AFTER
  std::uint64_t last_buffer_id = 0;      // the last CU_POINTER_ATTRIBUTE_BUFFER_ID handed out
  std::vector<std::string> requested_names;
  std::unordered_set<std::string> requested_set;
  std::shared_ptr<VmmState> vmm;  // created by the first virtual memory call (vmm.cpp)
  std::shared_ptr<KernelState> kernels;  // created by the first module or library call (kernels.cpp)
  std::map<std::uintptr_t, PinnedRange> pinned;  // page-locked host memory by base (host_memory.cpp)
  PinnedStats pinned_stats;
  std::set<std::pair<CUctx_st*, CUctx_st*>> peer_access;  // (context, peer) pairs enabled (peers.cpp)
  std::shared_ptr<IpcState> ipc;  // created by the first exportable allocation (ipc.cpp)
  std::shared_ptr<TextureRefState> texture_refs;  // created by the first texture or surface reference call
  std::shared_ptr<TextureObjects> texture_objects;  // created by the first texture or surface object
  std::shared_ptr<ContextLocalStorage> context_storage;  // created by the first value stored per context

  Device& device(int ordinal) { return devices[static_cast<std::size_t>(ordinal)]; }
};

// The state of this process; a forked child gets a fresh one (see README, "fork").
State& state();

// Simulated latency (CUDASIM_*_LATENCY_US, CUDASIM_LATENCY) this thread owes for device memory it
// took or gave back, or for a call the latency model times, while holding State::mu; ~Locked pays it
// once the lock is released, so the sleep delays only the calling thread (or stream), never other
// threads' driver calls. In nanoseconds: the model's figures have fractions of a microsecond.
inline thread_local std::uint64_t t_owed_latency_ns = 0;
inline void owe_latency(std::uint64_t us) { t_owed_latency_ns += us * 1000; }
inline void owe_latency(const DriverLatency& latency, TimedCall call) {
  t_owed_latency_ns += static_cast<std::uint64_t>(latency.of(call) * 1000.0);
}

// Locks State::mu and checks cuInit succeeded.
struct Locked {
  std::unique_lock<std::mutex> lock;
  State& st;
  Locked() : lock(state().mu), st(state()) {}
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;
  ~Locked() {
    if (lock.owns_lock()) lock.unlock();
    const std::uint64_t owed = std::exchange(t_owed_latency_ns, 0);
    if (owed > 0) pay_latency(std::chrono::nanoseconds(owed));
  }
  // A sleep overshoots by tens of microseconds (timer slack), more than a modelled cuMemMap takes:
  // sleep all but the last 100 us, then wait out the rest on the clock.
  static void pay_latency(std::chrono::nanoseconds owed) {
    const auto until = std::chrono::steady_clock::now() + owed;
    constexpr std::chrono::microseconds kSpinPart{100};
    if (owed > kSpinPart) std::this_thread::sleep_for(owed - kSpinPart);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  // Every call but cuInit answers NOT_INITIALIZED until cuInit has succeeded.
  CUresult init_status() const {
    return st.initialized && st.init_result == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  }
};

// --- devices.cpp ---
bool valid_device(const State& st, CUdevice dev);
// The CUDA ordinal of simulated device number `physical` (as device numbers travel between processes,
// which may see different devices under different ordinals), or -1 when CUDA_VISIBLE_DEVICES hides it.
int ordinal_of_physical(const State& st, int physical);
// The driver version simulated (CUDASIM_DRIVER_VERSION, default 13000). Takes State::mu: call
// without it. Entry points newer than it are not answered by cuGetProcAddress, and the exported
// ones return CUDA_ERROR_NOT_SUPPORTED (a real older driver does not export them at all).
int driver_version();
// cuInit's status, then CUDA_ERROR_INVALID_DEVICE for an unknown ordinal.
inline CUresult device_status(const Locked& l, CUdevice dev) {
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  return valid_device(l.st, dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// --- contexts.cpp ---
// The calling thread's current context, checked alive. Needs State::mu held.
CUresult current_context(State& st, CUctx_st** out);
// Every stream of the context (legacy, per-thread, created, retired) for synchronisation.
std::vector<std::shared_ptr<CUstream_st>> context_streams(CUctx_st* ctx);
// Waits for all work in the context, then releases pool memory above thresholds. Locks itself.
void synchronize_context(CUctx_st* ctx);
// Waits for all work queued so far in every live context, on every device: before a mapping that
// any stream may still use goes (cuMemUnmap, cuMemSetAccess, cuIpcCloseMemHandle). Locks itself.
void wait_for_all_queued_work();
int context_device(CUctx_st* ctx);
// The device's primary context object, made (inactive) when it has none yet: the handle
// cuDevicePrimaryCtxRetain gives, without retaining it. Needs State::mu held and a valid device.
CUctx_st* primary_context_object(State& st, CUdevice dev);

// --- streams.cpp ---
// Resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or created) against the
// current context; `per_thread_default` selects what NULL means (_ptsz/_ptds entry points).
CUresult resolve_stream(State& st, CUstream handle, bool per_thread_default,
                        std::shared_ptr<CUstream_st>* out);
// Queues `op` with the legacy-default-stream ordering rules. Needs State::mu held. caller_waits:
// the caller then blocks on it with CUstream_st::run_or_wait_until() (streams.h).
std::uint64_t submit(State& st, const std::shared_ptr<CUstream_st>& stream, Operation op, bool caller_waits = false);
// Locks the state, checks cuInit, resolves the stream and returns body(state, stream), all under
// State::mu.
template <typename Body>
CUresult with_stream(CUstream handle, bool per_thread_default, Body body) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  std::shared_ptr<CUstream_st> stream;
  if (CUresult rc = resolve_stream(l.st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
  return body(l.st, stream);
}

// --- memory.cpp ---
// Finds the live allocation holding [ptr, ptr + bytes); null when none does. Needs State::mu.
const Allocation* find_allocation(State& st, std::uintptr_t ptr, std::size_t bytes);
// Whether `ptr` lies in an allocation with CU_POINTER_ATTRIBUTE_SYNC_MEMOPS set (cuPointerSetAttribute):
// its synchronous copies and sets return once done.
bool sync_memops(State& st, std::uintptr_t ptr);
// Maps `bytes` of simulated device memory, 2 MiB aligned from 2 MiB up, else page aligned.
Mapping map_device_memory(std::size_t bytes);
// ftruncate of a memfd that backs simulated device memory. A real device's memory is no file: a
// file-size limit (ulimit -f) refuses this one (false, EFBIG) without raising SIGXFSZ, which would end
// the program.
bool size_memory_file(int fd, std::uint64_t bytes);
// Poisons a freed range (PROT_NONE) for a while, then unmaps it.
void retire_mapping(State& st, Mapping mapping);
// Charges `bytes` to the device (counted against CUDASIM_FAIL_ALLOC_AFTER); false when full.
bool take_device_memory(State& st, Device& dev, std::uint64_t bytes);
void give_device_memory(Device& dev, std::uint64_t bytes);
// The device's capacity alone (context overheads): `bytes` more committed when they fit what every
// process sharing the device took (shared_device.h), or this process alone; false when full.
bool reserve_capacity(Device& dev, std::uint64_t bytes);
void release_capacity(Device& dev, std::uint64_t bytes);
// Memory taken on the device: by every process when it is shared, else by this one.
std::uint64_t device_used(Device& dev);
// Frees every synchronous allocation the context owns (context destruction).
void free_context_allocations(State& st, CUctx_st* ctx);
// New device memory in `ctx`, charged to its device as cuMemAlloc's is (no statistics counted), at
// *dptr; CUDA_ERROR_OUT_OF_MEMORY when the device has too little left. Needs State::mu.
CUresult allocate_device_memory(State& st, CUctx_st* ctx, std::size_t bytes, CUdeviceptr* dptr);
// New managed memory in `ctx` (managed.cpp), counted in the live and peak managed bytes only. Needs
// State::mu.
CUresult allocate_managed_memory(State& st, CUctx_st* ctx, std::size_t bytes, CUdeviceptr* dptr);
// Gives the allocation at `base` back (its device's charge, its mapping retired); no statistics
// counted. Needs State::mu.
void release_allocation(State& st, std::uintptr_t base);

// --- ipc.cpp ---
// map_device_memory backed by a memfd another process can open through a cuIpcGetMemHandle handle
// (named after `buffer_id`); private memory when no descriptor can be had. Needs State::mu.
Mapping map_exportable_memory(State& st, std::size_t bytes, std::uint64_t buffer_id);
// This process's random number, which names its exported files (so a reused pid never makes an
// old handle valid again). Needs State::mu.
std::uint64_t ipc_process_number(State& st);
// Opens the file process `pid` holds as descriptor `fd` (through /proc, which only the same user may
// do), when it is still a regular file with inode `inode`, a memfd whose name is `name`, of at least
// `min_size` bytes: what another process exported, checked afresh (-1 otherwise). Never blocks.
int open_exported_file(int pid, int fd, std::uint64_t inode, const std::string& name, std::uint64_t min_size);

// --- pools.cpp ---
CUmemoryPool create_default_pool(State& st, int device);
// Returns the pool allocation at `dptr` to its pool; CUDA_ERROR_INVALID_VALUE if there is none.
// With a stream (cuMemFreeAsync) other streams may reuse the block once the free has executed on
// it; without one (cuMemFree, which does not synchronise for pool memory) at once.
CUresult free_pool_memory(State& st, CUdeviceptr dptr, const std::shared_ptr<CUstream_st>& stream);
// Gives memory above each of the device's pools' release threshold back (synchronisation points).
void release_pools_above_threshold(State& st, int device);

// --- graphs.cpp --- (all need State::mu held)
// For work enqueued on `stream`: when the stream is capturing, records a node of `kind` and sets
// *captured (the caller must not submit the work); CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when its
// capture was invalidated; CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (invalidating them) for the legacy
// stream while a blocking stream of its context captures. Otherwise CUDA_SUCCESS, *captured false.
// `node`, when given, receives the node recorded (for the caller to keep its parameters).
CUresult capture_work(State& st, const std::shared_ptr<CUstream_st>& stream, NodeKind kind, bool* captured,
                      Operation op = {}, CUgraphNode_st** node = nullptr);
// A node of `kind` doing `op`, following `dependencies`, appended to `graph` (graph_exec.cpp builds
// graphs with it; capture too).
CUgraphNode_st* append_node(CUgraph_st* graph, NodeKind kind, std::vector<CUgraphNode_st*> dependencies, Operation op);
// A "potentially unsafe" call (cuMemAlloc, cuMemFree, ...): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
// invalidating the captures that prohibit it, when the calling thread's capture interaction mode
// forbids it (see cuThreadExchangeStreamCaptureMode).
CUresult check_unsafe_call(State& st);
// Synchronising or querying `stream`: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when it is capturing,
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream of a context with a capturing blocking
// stream (both invalidate the capture), in every mode.
CUresult check_stream_not_capturing(State& st, const std::shared_ptr<CUstream_st>& stream);
// Synchronising a context with a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (invalidates).
CUresult check_context_not_capturing(State& st, CUctx_st* ctx);
// Querying or synchronising an event last recorded into an ongoing capture: UNSUPPORTED (invalidates).
CUresult check_event_not_captured(State& st, CUevent_st& event);
void invalidate(Capture& capture);
// New memory owned by `graph` (not from any pool), for an allocation node made next.
CUresult allocate_graph_memory(State& st, CUgraph_st* graph, int device, std::size_t bytes, CUdeviceptr* dptr);
// What a free node of `graph` does at once: its own graph allocation becomes unknown to the program
// (kept for the graph's launches); anything else is INVALID_VALUE.
CUresult free_graph_memory(State& st, CUgraph_st* graph, CUdeviceptr dptr);
// A memory-allocation node on a capturing stream: new graph-owned memory (not from any pool).
CUresult graph_allocate(State& st, CUstream_st* stream, int device, std::size_t bytes, CUdeviceptr* dptr);
// A memory-free node: graph memory of this capture is released; pool memory is only recorded (it
// would be freed when the graph runs, which is not simulated); anything else is INVALID_VALUE.
CUresult graph_free(State& st, CUstream_st* stream, CUdeviceptr dptr);
// An event recorded on a capturing stream: it stands for what the stream has captured so far.
CUresult capture_event_record(State& st, const std::shared_ptr<CUstream_st>& stream, CUevent_st& event);
// A stream waiting for an event recorded in an ongoing capture: inside that capture, the stream
// follows the record too; a stream that captures nothing joins the capture (a fork), its work
// following the record; another capture's stream: CUDA_ERROR_STREAM_CAPTURE_MERGE.
CUresult capture_event_wait(State& st, const std::shared_ptr<CUstream_st>& stream, CUevent_st& event);
// Destroys a graph the program no longer holds (not in State::graphs) once no instantiation of it
// remains: its memory goes with it.
void release_unowned_graph(State& st, CUgraph_st* graph);
// Destroys the graph a child-graph node embeds, if any (the node or its graph is going).
void destroy_child_graph(State& st, CUgraphNode_st& node);
// Ends every capture of the context's streams (context destruction), destroying their graphs.
void abandon_captures(State& st, CUctx_st* ctx);
void abandon_capture(State& st, CUstream_st* stream);
// Whether a stream captures into `graph` now (cuStreamBeginCaptureToGraph): it can be neither
// instantiated nor destroyed until the capture ends.
bool graph_being_captured(const State& st, const CUgraph_st* graph);

// --- graph_exec.cpp ---
// Whether the edge data is all the default (zeroed, or none given): the only edges simulated. Other
// edges (ports, programmatic dependencies) belong to device-side launch ordering.
bool default_edges(const CUgraphEdgeData* edges, size_t count);
// (the rest need State::mu held)
// CUDA_SUCCESS for a graph the program holds or a stream captures into, else CUDA_ERROR_INVALID_VALUE.
CUresult check_graph(State& st, CUgraph graph);
bool has_memory_nodes(const CUgraph_st* graph);
// A live node: one of a graph the program holds (created, or returned by cuStreamEndCapture).
bool live_node(State& st, CUgraphNode node);
// cuInit's status, then INVALID_VALUE unless `node` is a live node of `kind`.
CUresult node_of_kind(Locked& l, CUgraphNode node, NodeKind kind);
// Locks, checks cuInit, the graph, the output and the dependencies, then appends the node that
// make(state, &op) describes (make returns its kind's validation result); keep(node), when given,
// records under the same lock what the node was made with.
CUresult add_graph_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count, NodeKind kind,
                        const std::function<CUresult(State&, Operation*)>& make,
                        const std::function<void(CUgraphNode_st*)>& keep = {});
// The work of a host, memset, copy or kernel node with these parameters, checked as cuGraphAdd*Node
// checks them (a kernel node does nothing: no device code runs).
CUresult host_node(const CUDA_HOST_NODE_PARAMS* p, Operation* op);
CUresult memset_node(State& st, const CUDA_MEMSET_NODE_PARAMS* p, Operation* op);
CUresult memcpy_node(State& st, const CUDA_MEMCPY3D* p, Operation* op);
CUresult kernel_node(State& st, const CUDA_KERNEL_NODE_PARAMS* p);
// Kernel node parameters in the other form (v1 has no kern and no ctx; v2's come out null).
template <typename To, typename From>
To kernel_params_as(const From& p) {
  To out{};
  out.func = p.func;
  out.gridDimX = p.gridDimX, out.gridDimY = p.gridDimY, out.gridDimZ = p.gridDimZ;
  out.blockDimX = p.blockDimX, out.blockDimY = p.blockDimY, out.blockDimZ = p.blockDimZ;
  out.sharedMemBytes = p.sharedMemBytes;
  out.kernelParams = p.kernelParams;
  out.extra = p.extra;
  return out;
}
// The context owning a kernel node's function (a module's), null for a library kernel, which is
// loaded in every context.
CUctx_st* kernel_context(State& st, const CUDA_KERNEL_NODE_PARAMS& p);
// What an executable graph takes from `graph` now (child graphs included); false when its edges
// make a cycle.
bool build_exec_graph(State& st, const CUgraph_st& graph, ExecGraph* out);
// The work of a whole executable graph (of nodes other than event nodes) run in order, as one operation.
Operation graph_work(const ExecGraph& graph);

// --- context_events.cpp --- (need State::mu held)
// A new stream of a context that cuCtxWaitEvent made wait: its work waits too.
void follow_context_waits(const std::shared_ptr<CUstream_st>& stream);

// --- stream_memops.cpp --- (need State::mu held)
// The work of `count` stream memory operations run in order, each checked as cuStreamBatchMemOp
// checks it (`v2`: the _v2 forms' rules).
CUresult batch_memops_work(State& st, const CUstreamBatchMemOpParams* ops, unsigned count, bool v2, Operation* op);
// ... of a batch memory-operation node's parameters (the _v2 rules, a live context or none).
CUresult batch_memop_node_work(State& st, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p, Operation* op);
// Records what a batch memory-operation node was made with (a copy of the array).
void keep_batch_memop_params(CUgraphNode_st* node, const CUDA_BATCH_MEM_OP_NODE_PARAMS& p);

// --- graph_conditional.cpp --- (need State::mu held, except add_conditional_node, which locks)
// cuGraphAddNode for CU_GRAPH_NODE_TYPE_CONDITIONAL: the node and its empty body graphs, handed
// out through p->phGraph_out.
CUresult add_conditional_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* dependencies, size_t count,
                              CUDA_CONDITIONAL_NODE_PARAMS* p);
// Whether `graph` (or a graph embedded in it) holds a conditional node: such graphs are not cloned.
bool has_conditional_nodes(const CUgraph_st& graph);
// What a launch of the conditional node does: the body its handle's value selects, run once (if,
// switch) or while the value is non-zero (while: for ever, since no device code runs to change it).
// False when a body holds a node of a type bodies may not hold.
bool conditional_work(State& st, const CUgraphNode_st& node, Operation* op);
// The handles of a graph that goes.
void forget_conditional_handles(State& st, const CUgraph_st* graph);

// --- user_objects.cpp ---
// The graph's user-object references go (cuGraphDestroy): objects left with none are destroyed.
void release_graph_user_objects(CUgraph_st* graph);
// A clone owns references of its own to the objects the original owns.
void copy_graph_user_objects(const CUgraph_st& from, CUgraph_st* to);
// New references to every object `graph` and its child graphs own, released with the result.
std::shared_ptr<void> hold_graph_user_objects(const CUgraph_st& graph);

// --- graph_params.cpp ---
// Whether a launch attribute's value lies where cuda.h bounds it (an access policy window's hit
// ratio and properties, known policies and domains); attributes with no bounds are valid.
bool launch_attribute_value_valid(CUlaunchAttributeID attr, const CUlaunchAttributeValue& value);

// --- events.cpp, streams.cpp --- (need State::mu held)
// An event recorded / waited for on `stream` at this point of its queue, as cuEventRecord and
// cuStreamWaitEvent do outside a capture (the event-record and event-wait nodes of a graph launch).
void record_event_on(State& st, const std::shared_ptr<CUstream_st>& stream, const std::shared_ptr<CUevent_st>& event);
void wait_event_on(State& st, const std::shared_ptr<CUstream_st>& stream, const CUevent_st& event);

// --- ipc_events.cpp ---
// The counters of a new interprocess event, in a memfd another process can open through its
// cuIpcGetEventHandle handle; null when no descriptor or memory can be had. Needs State::mu.
std::shared_ptr<IpcEventPage> create_ipc_event_page(State& st);
// A record of the event: the generation it takes (call at the record), then, when the stream
// reaches it, complete_ipc_record.
std::uint64_t begin_ipc_record(IpcEventPage& page);
void complete_ipc_record(IpcEventPage& page, std::uint64_t generation);
// The generation of the event's latest record (0: never recorded), and whether `generation` has
// completed (by whichever process recorded it).
std::uint64_t latest_ipc_record(const IpcEventPage& page);
bool ipc_record_done(const IpcEventPage& page, std::uint64_t generation);
// Blocks until `generation` has completed (polling: another process completes it).
void wait_ipc_record(const IpcEventPage& page, std::uint64_t generation);

// --- export_tables/context_local_storage.cpp ---
// Forgets what the context stores and calls each value's destruction callback, without State::mu
// (the owner frees its state through the driver): at the start of the context's destruction, while
// it is still alive. Locks itself.
void destroy_context_local_storage(CUctx_st* ctx);

// --- report.cpp ---
void note_requested_name(State& st, const char* name);

// --- kernels.cpp, peers.cpp --- (need State::mu held)
// Unloads the modules the context loaded (context destruction); libraries outlive contexts.
void unload_context_modules(State& st, CUctx_st* ctx);
// Ends peer access to and from the context (context destruction).
void forget_context_peers(State& st, CUctx_st* ctx);

// --- host_memory.cpp --- (need State::mu held)
// Whether [ptr, ptr + bytes) lies in one page-locked host range.
bool host_range_pinned(const State& st, std::uintptr_t ptr, std::size_t bytes);
// The page-locked host range holding `ptr` (its base and size), false when none does.
bool pinned_range_of(const State& st, std::uintptr_t ptr, std::uintptr_t* base, std::size_t* size);
// cuPointerGetAttribute for pinned host memory: false when `ptr` is not pinned, else true with *rc.
bool host_pointer_attribute(State& st, void* data, CUpointer_attribute attribute, CUdeviceptr ptr, CUresult* rc);

// --- copies.cpp ---
// Queues one copy or set on the stream `handle` names (stream 0: the legacy default stream, or the
// calling thread's with `per_thread_default`), after cuInit and the stream are checked:
// prepare(st, capturing, &wait, &op) validates under State::mu and gives the work and whether the
// call waits for it. On a capturing stream the work becomes a node of `kind` (keep(node) records
// its parameters) and a call that would wait is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
// Whether [ptr, ptr + bytes) may be one side of a copy as memory of `type` (DEVICE: inside one
// allocation or pinned range; HOST: not freed device memory nor inaccessible reserved space;
// UNIFIED: whichever it points into). Needs State::mu held.
bool transfer_range_valid(State& st, CUmemorytype type, std::uintptr_t ptr, std::size_t bytes);
CUresult enqueue_transfer(CUstream handle, bool per_thread_default, NodeKind kind,
                          const std::function<CUresult(State&, bool, bool*, Operation*)>& prepare,
                          const std::function<void(CUgraphNode_st*)>& keep);

// --- copies_3d.cpp ---
// The work of a 3D copy between host, device or unified memory and arrays, its operands checked as
// cuMemcpy3D checks them (a non-empty extent); sources are read when it runs. Needs State::mu held.
CUresult copy_operation(State& st, const CUDA_MEMCPY3D& p, Operation* op);

// --- arrays.cpp ---
// Destroys every array and mipmapped array the context owns, giving their memory back (context
// destruction). Needs State::mu held.
void free_context_arrays(State& st, CUctx_st* ctx);
// The bytes of a live CUDA array (level 0 of a plain array, rows of row_bytes without padding,
// `rows` rows per slice, `slices` slices: layers, cubemap faces or depth), kept alive by `storage`
// for as long as queued work holds it. False for an unknown handle or an array without memory
// (deferred mapping). Needs State::mu held.
struct ArrayLayout {
  std::shared_ptr<unsigned char> storage;
  std::size_t row_bytes = 0, rows = 0, slices = 0;
  unsigned element = 0;  // bytes per element: format bytes x channels
};
bool array_layout(State& st, CUarray array, ArrayLayout* out);
// Bytes per channel of a simulated array format; 0 for a format cuda.h lists that is not simulated,
// nullopt for a value that is no CUarray_format.
std::optional<unsigned> array_format_bytes(CUarray_format format);
// The descriptor of a live array / mipmapped array; null for an unknown handle. Needs State::mu held.
const CUDA_ARRAY3D_DESCRIPTOR* array_descriptor(State& st, CUarray array);
const CUDA_ARRAY3D_DESCRIPTOR* mipmapped_array_descriptor(State& st, CUmipmappedArray array);

// --- vmm.cpp --- (all need State::mu held)
// False when [ptr, ptr + bytes) overlaps a VMM mapping no device may write (read-only access).
bool vmm_range_writable(State& st, std::uintptr_t ptr, std::size_t bytes);
// True when [ptr, ptr + bytes) touches reserved address space (cuMemAddressReserve) that is not
// accessible mapped memory: such a "host" pointer is device address space no call may touch.
bool vmm_inaccessible(State& st, std::uintptr_t ptr, std::size_t bytes);
// cuPointerGetAttribute for a pointer inside a reserved range (mapped or not): true, with the
// result in *rc, when `ptr` lies in one; false when it is not VMM address space.
bool vmm_pointer_attribute(State& st, void* data, CUpointer_attribute attribute, CUdeviceptr ptr, CUresult* rc);
// Backs a deferred-mapping array (cuMemMapArrayAsync): *view shows bytes [offset, offset + bytes)
// of the physical allocation of `handle`, which must be usable and on `device`, `offset` a multiple
// of the 2 MiB granularity and the range inside the allocation (else CUDA_ERROR_INVALID_VALUE). The
// view counts as a mapping of the handle (keeping the memory after cuMemRelease) for as long as
// anything holds it; vmm_sweep_array_views then gives that mapping up.
CUresult vmm_map_array(State& st, CUmemGenericAllocationHandle handle, std::uint64_t offset, std::uint64_t bytes,
                       int device, std::shared_ptr<unsigned char>* view);
// Ends the mappings of array views nothing holds any more (freeing memory no handle keeps).
void vmm_sweep_array_views(State& st);

}  // namespace cudasim
