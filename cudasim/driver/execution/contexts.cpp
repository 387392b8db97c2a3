// The process state, per-thread context stacks, context life cycle and the cuCtx* /
// cuDevicePrimaryCtx* entry points.
#include "contexts.h"

#include "faults.h"
#include "shared_device.h"
#include "state.h"
#include "texture_objects.h"

#include <pthread.h>

#include <cstdio>

#include <algorithm>
#include <atomic>

using namespace cudasim;

namespace {

std::atomic<State*> g_state{nullptr};
std::atomic<std::uint64_t> g_epoch{0};
std::atomic<unsigned long long> g_next_context_id{1};

// A forked child starts with a fresh, uninitialised driver: the parent's worker threads do not
// exist there and its locks may be held. The parent's state is left behind (leaked) on purpose.
void reset_after_fork() {
  drop_shared_devices_in_child();
  auto* fresh = new State();
  fresh->epoch = ++g_epoch;
  fresh->before_fork = g_state.load();
  g_state.store(fresh);
}

struct ThreadContexts {
  std::uint64_t epoch = 0;
  std::vector<CUctx_st*> stack;
};

// A thread's context stack lives on the heap, named by a trivially destructible thread_local and
// freed by a pthread key destructor when the thread ends. A thread_local object would be destroyed
// by exit() before the program's atexit handlers and static destructors run, and those may still
// call the driver; exit() runs no key destructor, so the main thread's stack outlives them all.
thread_local ThreadContexts* t_contexts = nullptr;
pthread_key_t g_contexts_key;
const bool g_contexts_key_made = [] {
  return pthread_key_create(&g_contexts_key, [](void* stack) {
           t_contexts = nullptr;  // a later key destructor calling the driver starts a fresh stack
           delete static_cast<ThreadContexts*>(stack);
         }) == 0;
}();

ThreadContexts& thread_contexts() {
  if (t_contexts == nullptr) {
    t_contexts = new ThreadContexts();
    if (g_contexts_key_made) pthread_setspecific(g_contexts_key, t_contexts);
  }
  return *t_contexts;
}

std::vector<CUctx_st*>& context_stack(State& st) {
  ThreadContexts& contexts = thread_contexts();
  if (contexts.epoch != st.epoch) {
    contexts.stack.clear();  // another State's contexts (before a fork): their counts do not matter
    contexts.epoch = st.epoch;
  }
  return contexts.stack;
}

// Stack changes keep CUctx_st::stack_refs (a context on some thread's stack is never recycled).
void stack_push(std::vector<CUctx_st*>& stack, CUctx_st* ctx) {
  stack.push_back(ctx);
  ++ctx->stack_refs;
}
void stack_pop(std::vector<CUctx_st*>& stack) {
  if (stack.back() != nullptr) --stack.back()->stack_refs;
  stack.pop_back();
}
void stack_replace_top(std::vector<CUctx_st*>& stack, CUctx_st* ctx) {
  stack_pop(stack);
  stack_push(stack, ctx);
}

// Makes a context usable: charges the context overhead and creates its legacy default stream.
CUresult activate_context(State& st, CUctx_st* ctx) {
  Device& dev = st.device(ctx->device);
  if (!reserve_capacity(dev, st.config.context_overhead)) {
    // A device too small for any context is the configuration's doing: said once, as no driver would.
    static bool said = false;
    if (dev.total < st.config.context_overhead && !said) {
      said = true;
      std::fprintf(stderr, "cudasim: device %d has %llu bytes (CUDASIM_DEVICE_MEMORY), less than the %llu bytes a "
                   "context takes (CUDASIM_CONTEXT_OVERHEAD): every context creation fails with "
                   "CUDA_ERROR_OUT_OF_MEMORY\n", dev.ordinal, static_cast<unsigned long long>(dev.total),
                   static_cast<unsigned long long>(st.config.context_overhead));
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  dev.stats.contexts_created++;
  ctx->alive = true;
  ctx->id = g_next_context_id++;
  reset_context_settings(ctx);
  ctx->legacy = std::make_shared<CUstream_st>();
  ctx->legacy->ctx = ctx;
  ctx->legacy->kind = StreamKind::Legacy;
  st.contexts.insert(ctx);
  return CUDA_SUCCESS;
}

// Calls the destruction callbacks of what the context stores (export tables), waits for its work, then
// frees everything it owns (memory, streams, events).
void deactivate_context(CUctx_st* ctx) {
  destroy_context_local_storage(ctx);
  synchronize_context(ctx);
  Locked l;
  State& st = l.st;
  if (!ctx->alive) return;
  abandon_captures(st, ctx);
  free_context_allocations(st, ctx);
  free_context_arrays(st, ctx);
  free_context_texture_objects(st, ctx);
  unload_context_modules(st, ctx);
  forget_context_peers(st, ctx);
  for (auto& [thread, stream] : ctx->per_thread) stream->retire();
  for (auto& stream : ctx->streams) {
    stream->retire();
    st.streams.erase(stream.get());
  }
  ctx->legacy->retire();
  ctx->per_thread.clear();
  ctx->streams.clear();
  ctx->legacy.reset();
  std::erase_if(st.events, [ctx](const auto& entry) { return entry.second->ctx == ctx; });
  st.contexts.erase(ctx);
  release_capacity(st.device(ctx->device), st.config.context_overhead);
  ctx->alive = false;
}

CUresult check_context_handle(State& st, CUcontext ctx) {
  if (st.contexts.count(ctx) != 0) return CUDA_SUCCESS;
  return ctx != nullptr && ctx->alive == false ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                               : CUDA_ERROR_INVALID_CONTEXT;
}

// Entry points taking an optional context: NULL means the calling thread's current one.
CUresult context_or_current(State& st, CUcontext* ctx) {
  return *ctx == nullptr ? current_context(st, ctx) : check_context_handle(st, *ctx);
}

__attribute__((constructor)) void register_fork_handler() {
  state();
  pthread_atfork(nullptr, nullptr, reset_after_fork);
}

}  // namespace

namespace cudasim {

State& state() {
  State* st = g_state.load();
  if (st == nullptr) {
    auto* fresh = new State();  // never deleted: no destructor may run at exit
    fresh->epoch = ++g_epoch;
    if (g_state.compare_exchange_strong(st, fresh)) return *fresh;
    delete fresh;
  }
  return *st;
}

CUresult current_context(State& st, CUctx_st** out) {
  auto& stack = context_stack(st);
  if (stack.empty() || stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!stack.back()->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = stack.back();
  return CUDA_SUCCESS;
}

int context_device(CUctx_st* ctx) { return ctx->device; }

std::vector<std::shared_ptr<CUstream_st>> context_streams(CUctx_st* ctx) {
  State& st = state();
  // Forget destroyed streams once they have drained.
  std::erase_if(ctx->streams, [&st](const std::shared_ptr<CUstream_st>& s) {
    return st.streams.count(s.get()) == 0 && s->reached(s->last_submitted());
  });
  std::vector<std::shared_ptr<CUstream_st>> all(ctx->streams.begin(), ctx->streams.end());
  for (auto& [thread, stream] : ctx->per_thread) all.push_back(stream);
  if (ctx->legacy) all.push_back(ctx->legacy);
  return all;
}

void wait_for_all_queued_work() {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> targets;
  {
    Locked l;
    for (CUctx_st* ctx : l.st.contexts) {
      for (auto& stream : context_streams(ctx)) targets.emplace_back(stream, stream->last_submitted());
    }
  }
  for (auto& [stream, seq] : targets) stream->wait_until(seq);
}

void synchronize_context(CUctx_st* ctx) {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> targets;
  {
    Locked l;
    if (!ctx->alive) return;
    for (auto& stream : context_streams(ctx)) targets.emplace_back(stream, stream->last_submitted());
  }
  for (auto& [stream, seq] : targets) stream->wait_until(seq);
  Locked l;
  release_pools_above_threshold(l.st, ctx->device);
}

}  // namespace cudasim

namespace {

// The most recently destroyed created context, to be handed out again (see contexts.h), or null.
CUctx_st* destroyed_context(State& st) {
  for (auto it = st.context_objects.rbegin(); it != st.context_objects.rend(); ++it) {
    CUctx_st* ctx = *it;
    if (!ctx->primary && !ctx->alive && ctx->stack_refs == 0 && ctx->streams.empty() && ctx->per_thread.empty()) {
      return ctx;
    }
  }
  return nullptr;
}

CUresult ctx_create(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* recycled = destroyed_context(l.st);
  CUctx_st* ctx = recycled != nullptr ? recycled : new CUctx_st();  // never freed: see contexts.h
  ctx->device = dev;
  ctx->flags = flags;
  ctx->usage = 1;
  if (CUresult rc = activate_context(l.st, ctx); rc != CUDA_SUCCESS) {
    if (recycled == nullptr) delete ctx;
    return rc;
  }
  if (recycled == nullptr) l.st.context_objects.push_back(ctx);
  stack_push(context_stack(l.st), ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}

// Frees a created context and pops it if it is current on the calling thread. Locks itself.
void destroy_created_context(CUctx_st* ctx) {
  deactivate_context(ctx);
  Locked l;
  auto& stack = context_stack(l.st);
  if (!stack.empty() && stack.back() == ctx) stack_pop(stack);
}

CUresult ctx_destroy(CUcontext ctx) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_context_handle(l.st, ctx); rc != CUDA_SUCCESS) return rc;
    if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  }
  destroy_created_context(ctx);
  return CUDA_SUCCESS;
}

CUresult ctx_synchronize(CUcontext ctx) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = context_or_current(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
    // Potentially unsafe during capture, and never possible with a capturing stream in the context.
    if (CUresult rc = check_unsafe_call(l.st); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_context_not_capturing(l.st, ctx); rc != CUDA_SUCCESS) return rc;
    l.st.device(ctx->device).stats.context_syncs++;
  }
  synchronize_context(ctx);
  return CUDA_SUCCESS;
}

CUresult ctx_get_device(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = context_or_current(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult primary_release(CUdevice dev) {
  CUctx_st* ctx = nullptr;
  {
    Locked l;
    if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
    Device& d = l.st.device(dev);
    if (d.primary_refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d.primary_refcount > 0) return CUDA_SUCCESS;
    ctx = d.primary;
  }
  deactivate_context(ctx);
  return CUDA_SUCCESS;
}

CUresult primary_reset(CUdevice dev) {
  CUctx_st* ctx = nullptr;
  {
    Locked l;
    if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
    Device& d = l.st.device(dev);
    d.primary_refcount = 0;
    ctx = d.primary;
  }
  if (ctx != nullptr) deactivate_context(ctx);
  return CUDA_SUCCESS;
}

CUresult primary_set_flags(CUdevice dev, unsigned flags) {
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  Device& d = l.st.device(dev);
  d.primary_flags = flags;
  if (d.primary != nullptr && d.primary->alive) d.primary->flags = flags;  // the _v2 form may change an active one
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return ctx_create(pctx, flags, dev);
}
CUDASIM_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return ctx_create(pctx, flags, dev);
}
CUDASIM_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                       unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return ctx_create(pctx, flags, dev);  // execution affinity is accepted and ignored
}
CUDASIM_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                       unsigned int flags, CUdevice dev) {
  if (driver_version() < 12050) return CUDA_ERROR_NOT_SUPPORTED;  // new in 12.5
  if (ctxCreateParams != nullptr && ctxCreateParams->numExecAffinityParams < 0)
    return CUDA_ERROR_INVALID_VALUE;
  return ctx_create(pctx, flags, dev);  // affinity and CIG parameters are accepted and ignored
}
CUDASIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }
CUDASIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }

CUDASIM_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  auto& stack = context_stack(l.st);
  *pctx = stack.empty() ? nullptr : stack.back();
  return CUDA_SUCCESS;
}

namespace {
// Whether `ctx` is a device's primary context object (compared, never dereferenced: any handle
// may be passed).
bool is_primary_context_object(State& st, CUcontext ctx) {
  return std::any_of(st.devices.begin(), st.devices.end(), [ctx](const Device& d) { return d.primary == ctx; });
}
}  // namespace

CUDASIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  auto& stack = context_stack(l.st);
  if (ctx == nullptr) {
    if (!stack.empty()) stack_pop(stack);
    return CUDA_SUCCESS;
  }
  // A primary context's handle stays valid while it is inactive: NVIDIA's runtime makes it current
  // before it retains it (cudaSetDevice). Calls that need the context then find it inactive.
  const bool inactive_primary = l.st.contexts.count(ctx) == 0 && is_primary_context_object(l.st, ctx);
  if (!inactive_primary) {
    if (CUresult rc = check_context_handle(l.st, ctx); rc != CUDA_SUCCESS) return rc;
  }
  if (stack.empty()) stack_push(stack, ctx);
  else stack_replace_top(stack, ctx);
  return CUDA_SUCCESS;
}

namespace {
CUresult ctx_push(CUcontext ctx) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_context_handle(l.st, ctx); rc != CUDA_SUCCESS) return rc;
  stack_push(context_stack(l.st), ctx);
  return CUDA_SUCCESS;
}
CUresult ctx_pop(CUcontext* pctx) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  auto& stack = context_stack(l.st);
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = stack.back();
  stack_pop(stack);
  return CUDA_SUCCESS;
}
}  // namespace

CUDASIM_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }
CUDASIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
CUDASIM_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) { return ctx_pop(pctx); }
CUDASIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return ctx_pop(pctx); }
CUDASIM_EXPORT CUresult cuCtxGetDevice(CUdevice* device) { return ctx_get_device(device, nullptr); }
CUDASIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (driver_version() < 13000) return CUDA_ERROR_NOT_SUPPORTED;  // new in 13.0
  return ctx_get_device(device, ctx);
}
CUDASIM_EXPORT CUresult cuCtxSynchronize() {
  CUDASIM_FAULT_POINT("cuCtxSynchronize");
  return ctx_synchronize(nullptr);
}
CUDASIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  CUDASIM_FAULT_POINT("cuCtxSynchronize_v2");
  if (driver_version() < 13000) return CUDA_ERROR_NOT_SUPPORTED;  // new in 13.0
  return ctx_synchronize(ctx);
}

CUDASIM_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = context_or_current(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  *version = 3020;  // the API version every context created through the v2 ABI reports
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = context_or_current(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  *ctxId = ctx->id;
  return CUDA_SUCCESS;
}

CUctx_st* cudasim::primary_context_object(State& st, CUdevice dev) {
  Device& d = st.device(dev);
  if (d.primary == nullptr) {
    d.primary = new CUctx_st();  // one per device, reused after reset: see contexts.h
    d.primary->device = dev;
    d.primary->primary = true;
    st.context_objects.push_back(d.primary);
  }
  return d.primary;
}

CUDASIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  Device& d = l.st.device(dev);
  primary_context_object(l.st, dev);
  if (!d.primary->alive) {
    d.primary->flags = d.primary_flags;
    if (CUresult rc = activate_context(l.st, d.primary); rc != CUDA_SUCCESS) return rc;
  }
  d.primary_refcount++;
  *pctx = d.primary;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
CUDASIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
CUDASIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }
CUDASIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
CUDASIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}
CUDASIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}

CUDASIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  CUDASIM_FAULT_POINT("cuDevicePrimaryCtxGetState");
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  Device& d = l.st.device(dev);
  *flags = d.primary_flags;
  *active = d.primary != nullptr && d.primary->alive ? 1 : 0;
  return CUDA_SUCCESS;
}

// --- the deprecated usage count ---
// A created context's usage count starts at 1; a primary context's is its retain count, so
// attaching to it retains it and detaching releases it as cuDevicePrimaryCtxRelease does.

CUDASIM_EXPORT CUresult cuCtxAttach(CUcontext* pctx, unsigned int flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pctx == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (ctx->primary) l.st.device(ctx->device).primary_refcount++;
  else ctx->usage++;
  *pctx = ctx;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuCtxDetach(CUcontext ctx) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_context_handle(l.st, ctx); rc != CUDA_SUCCESS) return rc;
    // It must be current to the calling thread.
    CUctx_st* current = nullptr;
    if (current_context(l.st, &current) != CUDA_SUCCESS || current != ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx->primary && --ctx->usage > 0) return CUDA_SUCCESS;
  }
  if (ctx->primary) return primary_release(ctx->device);
  destroy_created_context(ctx);
  return CUDA_SUCCESS;
}
