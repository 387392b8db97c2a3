// Contexts. A context object is never freed, so a stale handle can be recognised as destroyed
// instead of being a dangling pointer. But, as a real driver may hand a freed handle's address out
// again, cuCtxCreate reuses the most recently destroyed (drained) context object that no thread
// still has on its context stack: from then on the old handle names the new context. Primary contexts keep their object across resets.
#pragma once

#include "streams.h"

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <thread>
#include <vector>

// Invariant: when alive, the context is in State::contexts and its device's committed memory
// includes one context overhead for it; `legacy` exists while alive.
struct CUctx_st {
  int device = 0;
  bool primary = false;
  bool alive = false;
  unsigned flags = 0;
  unsigned long long id = 0;
  // The usage count of a created context (cuCtxCreate: 1; cuCtxAttach adds one, cuCtxDetach takes
  // one and destroys the context at 0). A primary context counts its retains instead.
  int usage = 0;
  int stack_refs = 0;  // entries on threads' context stacks (under the State lock)
  std::shared_ptr<CUstream_st> legacy;
  std::map<std::thread::id, std::shared_ptr<CUstream_st>> per_thread;
  // Created streams, kept (also after cuStreamDestroy) until they are known to be drained.
  std::vector<std::shared_ptr<CUstream_st>> streams;
  // cuCtxSetLimit / cuCtxSetCacheConfig (context_settings.cpp): set afresh at each activation.
  std::array<std::size_t, CU_LIMIT_MAX> limits{};
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  // cuCtxWaitEvent (context_events.cpp): the stream points every stream of the context, including
  // streams made later, waits for; guarded by State::mu, dropped once reached.
  std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> waits;
};

namespace cudasim {
// The limits and cache configuration of a context as it is activated (context_settings.cpp).
void reset_context_settings(CUctx_st* ctx);
// A stream priority brought into the device's range, as cuStreamCreateWithPriority documents.
int clamp_stream_priority(int priority);
}  // namespace cudasim
