// Context-local storage ({C693336E-1121-DF11-A8C3-68F355D89593}, "v0301"): a value per (context,
// key), with a callback the driver calls when the context is destroyed. NVIDIA's runtime keeps its
// state for each context there (so a context another library made or destroyed is recognised).
// Unlike the other tables it holds entry points from slot 0 (no size).
#include "export_tables.h"

#include "../contexts.h"
#include "../state.h"

#include <map>
#include <utility>
#include <vector>

using namespace cudasim;
using namespace cudasim::export_tables;

namespace cudasim {

using StorageDestructor = void (*)(CUcontext, void* key, void* value);

// What every live context stores, by context then key. Guarded by State::mu (State owns it, so a
// forked child starts with none).
struct ContextLocalStorage {
  struct Value {
    void* value = nullptr;
    StorageDestructor destructor = nullptr;
  };
  std::map<CUctx_st*, std::map<void*, Value>> contexts;
};

}  // namespace cudasim

namespace {

constexpr Table kTable = Table::ContextLocalStorage;

ContextLocalStorage& storage(State& st) {
  if (!st.context_storage) st.context_storage = std::make_shared<ContextLocalStorage>();
  return *st.context_storage;
}

// NULL: the calling thread's current context. Otherwise a live context.
CUresult storage_context(State& st, CUcontext* ctx) {
  if (*ctx == nullptr) return current_context(st, ctx);
  if (st.contexts.count(*ctx) != 0) return CUDA_SUCCESS;
  return (*ctx)->alive ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

// Slot 0: stores `value` under `key` in the context (replacing what the key held, whose callback is
// not called), with the callback the context's destruction calls.
CUresult put(CUcontext ctx, void* key, void* value, StorageDestructor destructor) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = storage_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  storage(l.st).contexts[ctx][key] = {value, destructor};
  return CUDA_SUCCESS;
}

// Slot 1: forgets `key` in the context (its callback is not called).
CUresult forget(CUcontext ctx, void* key) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = storage_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  auto& contexts = storage(l.st).contexts;
  if (auto it = contexts.find(ctx); it != contexts.end()) it->second.erase(key);
  return CUDA_SUCCESS;
}

// Slot 2: the value stored under `key`; CUDA_ERROR_INVALID_HANDLE when there is none.
CUresult get(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = storage_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  auto& contexts = storage(l.st).contexts;
  const auto it = contexts.find(ctx);
  if (it == contexts.end()) return CUDA_ERROR_INVALID_HANDLE;
  const auto entry = it->second.find(key);
  if (entry == it->second.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = entry->second.value;
  return CUDA_SUCCESS;
}

}  // namespace

void cudasim::destroy_context_local_storage(CUctx_st* ctx) {
  std::map<void*, ContextLocalStorage::Value> values;
  {
    Locked l;
    if (!l.st.context_storage) return;
    auto& contexts = l.st.context_storage->contexts;
    const auto it = contexts.find(ctx);
    if (it == contexts.end()) return;
    values = std::move(it->second);
    contexts.erase(it);
  }
  // Without the driver's lock: the owner frees its state through the driver.
  for (const auto& [key, value] : values) {
    if (value.destructor != nullptr) value.destructor(ctx, key, value.value);
  }
}

const TableInfo& cudasim::export_tables::context_local_storage() {
  return define_table<kTable, 4>("CONTEXT_LOCAL_STORAGE_INTERFACE_V0301", uuid("{C693336E-1121-DF11-A8C3-68F355D89593}"), false, [](auto& b) {
    b.template set<0, put>(Knowledge::Known, "store a value under a key in a context (NULL: the current one), with its destruction callback");
    b.template set<1, forget>(Knowledge::Known, "forget a key in a context");
    b.template set<2, get>(Knowledge::Known, "the value stored under a key in a context (CUDA_ERROR_INVALID_HANDLE: none)");
  });
}
