// __device__ and __constant__ variables: their registration by nvcc's host code (__cudaRegisterVar),
// their device storage, and the calls that name them by symbol (cudaGetSymbolAddress,
// cudaGetSymbolSize, cudaMemcpyToSymbol / FromSymbol and their async forms, and the symbol copy
// nodes of graphs).
//
// A symbol is the address of the variable's host shadow, which nvcc's host code defines with the
// variable's type and initialiser. The simulated device runs no code, so no module holds the
// variable: the first use of a symbol in a context gives it device memory there (cuMemAlloc of its
// size), filled from the host shadow, as loading the module would fill it from the image. The
// storage lives as long as the context; cudaDeviceReset forgets it with the primary context.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "graph_nodes.h"
#include "operations.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

namespace cudasim::runtime {
namespace {

struct Variable {
  void** binary = nullptr;
  size_t size = 0;
};

// Registrations happen in static constructors, possibly from several shared objects; uses from any
// thread. Never destroyed: programs unregister from atexit handlers.
struct Symbols {
  std::mutex mutex;
  std::map<const void*, Variable> variables;                    // by host shadow address
  std::map<std::pair<const void*, CUcontext>, CUdeviceptr> storage;  // per variable and context
};

// Set once symbols() made the registry: forgetting a context's storage needs none made, so a runtime
// that registers no variable allocates nothing for them (and leaks nothing when it is unloaded).
std::atomic<Symbols*> g_made_symbols{nullptr};

Symbols& symbols() {
  static Symbols* const s = [] {
    auto* made = new Symbols;
    g_made_symbols.store(made, std::memory_order_release);
    return made;
  }();
  return *s;
}

// The device address of the variable `symbol` names in the current context, allocated and filled on
// first use; cudaErrorInvalidSymbol for an address that is no registered variable.
cudaError_t symbol_storage(const void* symbol, CUdeviceptr* address, size_t* size) {
  return with_context([&]() -> cudaError_t {
    CUcontext context = nullptr;
    if (cudaError_t status = call_driver<&DriverTable::cuCtxGetCurrent>(&context); status != cudaSuccess) return status;
    Symbols& s = symbols();
    std::lock_guard lock(s.mutex);
    auto it = s.variables.find(symbol);
    if (symbol == nullptr || it == s.variables.end()) return cudaErrorInvalidSymbol;
    *size = it->second.size;
    auto [slot, added] = s.storage.try_emplace({symbol, context}, 0);
    if (added) {
      CUdeviceptr allocated = 0;
      cudaError_t status = call_driver<&DriverTable::cuMemAlloc>(&allocated, it->second.size);
      if (status == cudaSuccess) status = call_driver<&DriverTable::cuMemcpyHtoD>(allocated, symbol, it->second.size);
      if (status != cudaSuccess) {
        if (allocated != 0) call_driver<&DriverTable::cuMemFree>(allocated);
        s.storage.erase(slot);
        return status;
      }
      slot->second = allocated;
    }
    *address = slot->second;
    return cudaSuccess;
  });
}

// The device address of `count` bytes at `offset` in the variable (cudaErrorInvalidValue beyond it).
cudaError_t symbol_range(const void* symbol, size_t count, size_t offset, void** address) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (cudaError_t status = symbol_storage(symbol, &base, &size); status != cudaSuccess) return status;
  if (offset > size || count > size - offset) return cudaErrorInvalidValue;
  *address = reinterpret_cast<void*>(base + offset);
  return cudaSuccess;
}

// A symbol is device memory: a copy to it comes from the host or the device, one from it goes to
// either; any other kind is cudaErrorInvalidMemcpyDirection, as documented.
bool kind_to_symbol(cudaMemcpyKind kind) {
  return kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault;
}
bool kind_from_symbol(cudaMemcpyKind kind) {
  return kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault;
}

// A 1D copy node's parameters: `count` bytes at `offset` of the variable, from `other` (to_symbol)
// or to it.
cudaError_t symbol_copy_node(bool to_symbol, const void* symbol, void* other, size_t count, size_t offset,
                             cudaMemcpyKind kind, CUDA_MEMCPY3D* copy) {
  if (to_symbol ? !kind_to_symbol(kind) : !kind_from_symbol(kind)) return cudaErrorInvalidMemcpyDirection;
  void* device = nullptr;
  if (cudaError_t status = symbol_range(symbol, count, offset, &device); status != cudaSuccess) return status;
  return to_symbol ? driver_copy_1d(device, other, count, kind, copy) : driver_copy_1d(other, device, count, kind, copy);
}

constexpr bool kToSymbol = true;
constexpr bool kFromSymbol = false;

// Runs node_call(copy) with a symbol copy's node parameters, once they are valid.
template <typename NodeCall>
cudaError_t with_symbol_copy(bool to_symbol, const void* symbol, const void* other, size_t count, size_t offset,
                             cudaMemcpyKind kind, NodeCall node_call) {
  CUDA_MEMCPY3D copy{};
  if (cudaError_t status = symbol_copy_node(to_symbol, symbol, const_cast<void*>(other), count, offset, kind, &copy);
      status != cudaSuccess)
    return status;
  return node_call(copy);
}

}  // namespace

cudaError_t copy_to_symbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind kind,
                           CUstream stream, Completion completion) {
  if (!kind_to_symbol(kind)) return cudaErrorInvalidMemcpyDirection;
  void* device = nullptr;
  if (cudaError_t status = symbol_range(symbol, count, offset, &device); status != cudaSuccess) return status;
  return copy(device, src, count, kind, stream, completion);
}

cudaError_t copy_from_symbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind,
                             CUstream stream, Completion completion) {
  if (!kind_from_symbol(kind)) return cudaErrorInvalidMemcpyDirection;
  void* device = nullptr;
  if (cudaError_t status = symbol_range(symbol, count, offset, &device); status != cudaSuccess) return status;
  return copy(dst, device, count, kind, stream, completion);
}

void forget_binary_variables(void** binary) {
  Symbols& s = symbols();
  std::lock_guard lock(s.mutex);
  for (auto it = s.variables.begin(); it != s.variables.end();) {
    if (it->second.binary != binary) {
      ++it;
      continue;
    }
    // The memory stays with its context (freed with it): unregistering runs at exit.
    std::erase_if(s.storage, [symbol = it->first](const auto& entry) { return entry.first.first == symbol; });
    it = s.variables.erase(it);
  }
}

void forget_symbol_storage(CUcontext context) {
  Symbols* made = g_made_symbols.load(std::memory_order_acquire);
  if (made == nullptr) return;
  Symbols& s = *made;
  std::lock_guard lock(s.mutex);
  std::erase_if(s.storage, [context](const auto& entry) { return entry.first.second == context; });
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

// Not declared by the toolkit's headers outside nvcc; the signature is that of crt/host_runtime.h.
extern "C" __attribute__((visibility("default"))) void __cudaRegisterVar(void** fatCubinHandle, char* hostVar,
                                                                         char* /*deviceAddress*/,
                                                                         const char* /*deviceName*/, int /*ext*/,
                                                                         size_t size, int /*constant*/,
                                                                         int /*global*/) {
  if (hostVar == nullptr || size == 0) return;
  Symbols& s = symbols();
  std::lock_guard lock(s.mutex);
  s.variables[hostVar] = Variable{fatCubinHandle, size};
}

extern "C" {

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  return api_call([&] {
    if (devPtr == nullptr) return cudaErrorInvalidValue;
    CUdeviceptr address = 0;
    size_t size = 0;
    const cudaError_t status = symbol_storage(symbol, &address, &size);
    if (status == cudaSuccess) *devPtr = reinterpret_cast<void*>(address);
    return status;
  });
}
cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  return api_call([&] {
    if (size == nullptr) return cudaErrorInvalidValue;
    CUdeviceptr address = 0;
    return symbol_storage(symbol, &address, size);
  });
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind) {
  return api_call([&] { return copy_to_symbol(symbol, src, count, offset, kind, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind kind) {
  return api_call([&] { return copy_from_symbol(dst, symbol, count, offset, kind, nullptr, Completion::kSynchronous); });
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] { return copy_to_symbol(symbol, src, count, offset, kind, stream, Completion::kAsynchronous); });
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  return api_call([&] { return copy_from_symbol(dst, symbol, count, offset, kind, stream, Completion::kAsynchronous); });
}

cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                           const void* symbol, const void* src, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_symbol_copy(kToSymbol, symbol, src, count, offset, kind, [&](const CUDA_MEMCPY3D& copy) {
      return call_driver<&DriverTable::cuGraphAddMemcpyNode>(pGraphNode, graph, pDependencies, numDependencies, &copy,
                                                             current_context_handle());
    });
  });
}
cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t* pDependencies, size_t numDependencies, void* dst,
                                             const void* symbol, size_t count, size_t offset,
                                             enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_symbol_copy(kFromSymbol, symbol, dst, count, offset, kind, [&](const CUDA_MEMCPY3D& copy) {
      return call_driver<&DriverTable::cuGraphAddMemcpyNode>(pGraphNode, graph, pDependencies, numDependencies, &copy,
                                                             current_context_handle());
    });
  });
}
cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void* symbol, const void* src,
                                                 size_t count, size_t offset, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_symbol_copy(kToSymbol, symbol, src, count, offset, kind, [&](const CUDA_MEMCPY3D& copy) {
      return call_driver<&DriverTable::cuGraphMemcpyNodeSetParams>(node, &copy);
    });
  });
}
cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void* dst, const void* symbol, size_t count,
                                                   size_t offset, enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_symbol_copy(kFromSymbol, symbol, dst, count, offset, kind, [&](const CUDA_MEMCPY3D& copy) {
      return call_driver<&DriverTable::cuGraphMemcpyNodeSetParams>(node, &copy);
    });
  });
}
cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                     const void* symbol, const void* src, size_t count, size_t offset,
                                                     enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_symbol_copy(kToSymbol, symbol, src, count, offset, kind, [&](const CUDA_MEMCPY3D& copy) {
      return call_driver<&DriverTable::cuGraphExecMemcpyNodeSetParams>(hGraphExec, node, &copy,
                                                                       current_context_handle());
    });
  });
}
cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void* dst,
                                                       const void* symbol, size_t count, size_t offset,
                                                       enum cudaMemcpyKind kind) {
  return api_call([&] {
    return with_symbol_copy(kFromSymbol, symbol, dst, count, offset, kind, [&](const CUDA_MEMCPY3D& copy) {
      return call_driver<&DriverTable::cuGraphExecMemcpyNodeSetParams>(hGraphExec, node, &copy,
                                                                       current_context_handle());
    });
  });
}

}  // extern "C"
