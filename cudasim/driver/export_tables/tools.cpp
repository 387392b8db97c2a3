// The tools tables: what NVIDIA's runtime asks of the driver for profiling and debugging tools
// (CUPTI's callbacks). No tool attaches to the simulator, so the runtime is told none is enabled.
#include "export_tables.h"

#include <cstring>

using namespace cudasim::export_tables;

namespace {

// Driver-owned memory the runtime reads its tool callback switches from (and may write): zeroed,
// so no callback is enabled. Sizes as the public record gives them (as element counts; the memory
// holds at least that many 4-byte elements).
alignas(16) unsigned g_callback_switches[1024];
alignas(16) unsigned g_callback_state[16];
constexpr std::size_t kCallbackSwitches = 1024;
constexpr std::size_t kCallbackState = 14;

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

}  // namespace

const TableInfo& cudasim::export_tables::tools_runtime_callback_hooks() {
  return define_table<Table::ToolsRuntimeCallbackHooks, 7>("TOOLS_RUNTIME_CALLBACK_HOOKS", uuid("{A094798C-2E74-2E74-93F2-0800200C0A66}"), true, [](auto& b) {
    b.template set<2, callback_switches>(Knowledge::Inferred,
                                "driver-owned memory of the runtime's tool callback switches and its size (zeroed: no tool)");
    b.template set<6, callback_state>(Knowledge::Inferred, "a second such area and its size (zeroed)");
  });
}

// The tools' thread-local storage table: the public record knows its size and no entry.
const TableInfo& cudasim::export_tables::tools_tls() {
  return define_table<Table::ToolsTls, 4>("TOOLS_TLS", uuid("{42D85A81-23F6-CB47-8298-F6E78A3AECDC}"), true, no_entries);
}
