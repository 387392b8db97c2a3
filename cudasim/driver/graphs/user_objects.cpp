// User objects (cuUserObjectCreate, cuUserObjectRetain, cuUserObjectRelease) and the references
// graphs own to them (cuGraphRetainUserObject, cuGraphReleaseUserObject).
//
// An object counts references: the caller's, each graph's (a clone owns as many as its original;
// a child-graph node's graph its own), and each executable graph's, taken at instantiation and
// given back once it is destroyed and its queued launches have run. When the count reaches zero
// the destructor runs on a thread of its own, never the caller's (cuda.h: "executed by a shared
// internal thread"; CU_USER_OBJECT_NO_DESTRUCTOR_SYNC: nothing waits for it). Counts are atomic, so
// a stream's worker can give back an executable graph's references without taking the driver's
// lock. Objects are never freed, so a handle released to zero is recognised as invalid.
#include "state.h"

#include <atomic>
#include <climits>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

struct CUuserObject_st {
  void* ptr = nullptr;
  CUhostFn destroy = nullptr;
  std::atomic<long long> refs{0};
};

namespace {

std::mutex g_objects_mu;
std::unordered_set<CUuserObject_st*> g_live_objects;  // guarded by g_objects_mu

bool live(CUuserObject_st* object) {
  std::lock_guard lock(g_objects_mu);
  return g_live_objects.contains(object);
}

// "Must be nonzero and not larger than INT_MAX."
bool valid_count(unsigned count) { return count != 0 && count <= static_cast<unsigned>(INT_MAX); }

void retain(CUuserObject_st* object, unsigned count) { object->refs.fetch_add(count); }

void release(CUuserObject_st* object, unsigned count) {
  if (object->refs.fetch_sub(count) != count) return;
  {
    std::lock_guard lock(g_objects_mu);
    g_live_objects.erase(object);
  }
  std::thread([fn = object->destroy, ptr = object->ptr] { fn(ptr); }).detach();
}

// The references an executable graph holds; given back when the last holder lets go.
struct HeldReferences {
  std::map<CUuserObject_st*, unsigned> refs;
  HeldReferences(const HeldReferences&) = delete;
  HeldReferences& operator=(const HeldReferences&) = delete;
  explicit HeldReferences(std::map<CUuserObject_st*, unsigned> taken) : refs(std::move(taken)) {}
  ~HeldReferences() {
    for (const auto& [object, count] : refs) release(object, count);
  }
};

void collect(const CUgraph_st& graph, std::map<CUuserObject_st*, unsigned>* refs) {
  for (const auto& [object, count] : graph.user_refs) (*refs)[object] += count;
  for (const auto& node : graph.nodes) {
    if (node->child != nullptr) collect(*node->child, refs);
  }
}

}  // namespace

namespace cudasim {

void release_graph_user_objects(CUgraph_st* graph) {
  for (const auto& [object, count] : std::exchange(graph->user_refs, {})) release(object, count);
}

void copy_graph_user_objects(const CUgraph_st& from, CUgraph_st* to) {
  for (const auto& [object, count] : from.user_refs) retain(object, count);
  to->user_refs = from.user_refs;
}

std::shared_ptr<void> hold_graph_user_objects(const CUgraph_st& graph) {
  std::map<CUuserObject_st*, unsigned> refs;
  collect(graph, &refs);
  if (refs.empty()) return nullptr;
  for (const auto& [object, count] : refs) retain(object, count);
  return std::make_shared<HeldReferences>(std::move(refs));
}

}  // namespace cudasim

using namespace cudasim;

CUDASIM_EXPORT CUresult cuUserObjectCreate(CUuserObject* object_out, void* ptr, CUhostFn destroy,
                                           unsigned int initialRefcount, unsigned int flags) {
  if (object_out == nullptr || destroy == nullptr || !valid_count(initialRefcount) ||
      flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
    return CUDA_ERROR_INVALID_VALUE;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  }
  auto* object = new CUuserObject_st();
  object->ptr = ptr;
  object->destroy = destroy;
  object->refs = initialRefcount;
  std::lock_guard lock(g_objects_mu);
  g_live_objects.insert(object);
  *object_out = object;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count) {
  if (!valid_count(count) || !live(object)) return CUDA_ERROR_INVALID_VALUE;
  retain(object, count);
  return CUDA_SUCCESS;
}

// Releasing more references than exist would destroy the object under its other owners.
CUDASIM_EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count) {
  if (!valid_count(count) || !live(object) || object->refs.load() < count) return CUDA_ERROR_INVALID_VALUE;
  release(object, count);
  return CUDA_SUCCESS;
}

// CU_GRAPH_USER_OBJECT_MOVE hands the caller's references to the graph instead of making new ones.
CUDASIM_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
                                                unsigned int flags) {
  if (!valid_count(count) || (flags != 0 && flags != CU_GRAPH_USER_OBJECT_MOVE)) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  if (!live(object)) return CUDA_ERROR_INVALID_VALUE;
  if (flags == 0) retain(object, count);
  graph->user_refs[object] += count;
  return CUDA_SUCCESS;
}

// Only references the graph owns.
CUDASIM_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count) {
  if (!valid_count(count)) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_graph(l.st, graph); rc != CUDA_SUCCESS) return rc;
  auto owned = graph->user_refs.find(object);
  if (owned == graph->user_refs.end() || owned->second < count) return CUDA_ERROR_INVALID_VALUE;
  if ((owned->second -= count) == 0) graph->user_refs.erase(owned);
  release(object, count);
  return CUDA_SUCCESS;
}
