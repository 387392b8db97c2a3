// The tools tables: what NVIDIA's runtime asks of the driver for profiling and debugging tools
// (CUPTI's callbacks). No tool attaches to the simulator, so the runtime is told none is enabled.
#include "export_tables.h"

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

using namespace cudasim::export_tables;

namespace {

// Driver-owned memory the runtime reads its tool callback switches from (and may write): zeroed,
// so no callback is enabled. Sizes as the public record gives them (as element counts; the memory
// holds at least that many 4-byte elements).
alignas(16) unsigned g_callback_switches[1024];
alignas(16) unsigned g_callback_state[16];
constexpr std::size_t kCallbackSwitches = 1024;
constexpr std::size_t kCallbackState = 14;

// Slot 2 of the tools' thread-local storage: the calling thread's current context (NULL: none).
// cuBLASLt calls it, then hands the context to slot 4 of the tools' context table.
CUresult thread_context(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetCurrent(ctx);
}

// Slot 4 of the tools' context table: a context's unique identifier (cuCtxGetId), which cuBLASLt
// keys its per-context state by.
CUresult context_id(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetId(ctx, id);
}

// Slot 2 of the callback hooks: the switches' memory and size.
void callback_switches(void** memory, std::size_t* size) {
  if (memory != nullptr) *memory = g_callback_switches;
  if (size != nullptr) *size = kCallbackSwitches;
}

// Slot 6: a second, smaller area of the same kind.
void callback_state(void** memory, std::size_t* size) {
  if (memory != nullptr) *memory = g_callback_state;
  if (size != nullptr) *size = kCallbackState;
}

// What slot 7 of the tools' module table calls once per function: the caller's value, the
// function, and a second value the public records read from the function's driver object (its
// meaning is not recorded).
using FunctionVisitor = void (*)(void* user_data, CUfunction function, std::uint64_t value);

// Slot 7 of the tools' module table: calls `visit` once for each function of `module`, in the
// image's order, and answers 1 (what the public records return after calling it); 0 when the
// module is no live one or `visit` is NULL (or the handles do not fit in memory), with nothing
// called. The context is the module's (the records pass it first); the simulator finds a module's
// functions without it. The callback's third argument is the function's module: the records' value
// comes from a driver object the simulator does not have, and cuFFT, which calls this when it makes
// a plan, makes its plans with it.
int iterate_module_functions(CUcontext, CUmodule module, FunctionVisitor visit, void* user_data) {
  if (visit == nullptr) return 0;
  unsigned count = 0;
  if (cuModuleGetFunctionCount(&count, module) != CUDA_SUCCESS) return 0;
  std::vector<CUfunction> functions;
  try {
    functions.resize(count);
  } catch (const std::bad_alloc&) {
    return 0;  // no exception crosses the table's C interface
  }
  if (count != 0 && cuModuleEnumerateFunctions(functions.data(), count, module) != CUDA_SUCCESS) return 0;
  for (CUfunction function : functions) visit(user_data, function, reinterpret_cast<std::uintptr_t>(module));
  return 1;
}

}  // namespace

const TableInfo& cudasim::export_tables::tools_runtime_callback_hooks() {
  return define_table<Table::ToolsRuntimeCallbackHooks, 7>("TOOLS_RUNTIME_CALLBACK_HOOKS", uuid("{A094798C-2E74-2E74-93F2-0800200C0A66}"), true, [](auto& b) {
    b.template set<2, callback_switches>(Knowledge::Inferred,
                                "driver-owned memory of the runtime's tool callback switches and its size (zeroed: no tool)");
    b.template set<6, callback_state>(Knowledge::Inferred, "a second such area and its size (zeroed)");
  });
}

// The tools' thread-local storage table: the public record knows its size and names slot 2 (the
// thread's context).
const TableInfo& cudasim::export_tables::tools_tls() {
  return define_table<Table::ToolsTls, 4>("TOOLS_TLS", uuid("{42D85A81-23F6-CB47-8298-F6E78A3AECDC}"), true, [](auto& b) {
    b.template set<2, thread_context>(Knowledge::Inferred, "the calling thread's current context (cuCtxGetCurrent)");
  });
}

// The tools' view of contexts (the public record: 94 entries in CUDA 13, among them a context's
// device and its number). cuBLASLt reads a context's identifier through slot 4; cuFFT asks for the
// table when it makes a plan.
const TableInfo& cudasim::export_tables::tools_context() {
  return define_table<Table::ToolsContext, 95>("TOOLS_CONTEXT", uuid("{21318C60-9714-3248-8CA6-41FF7324C8F2}"), true, [](auto& b) {
    b.template set<4, context_id>(Knowledge::Inferred, "a context's unique identifier (cuCtxGetId)");
  });
}

// The tools' view of modules (the public record names it CU_ETID_ToolsModule; other public records
// name slots of it, one of them "iterate on functions"). The size is not published: 32 slots.
// cuFFT calls slot 7 when it makes a plan.
const TableInfo& cudasim::export_tables::tools_module() {
  return define_table<Table::ToolsModule, 32>("TOOLS_MODULE", uuid("{6E163FBE-B958-444D-835C-E182AFF1991E}"), true, [](auto& b) {
    b.template set<7, iterate_module_functions>(Knowledge::Inferred,
                                                "calls a callback once per function of a module; answers 1");
  });
}
