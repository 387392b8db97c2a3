// cuGetExportTable: the private tables by UUID, and the counts of what was asked and called.
#include "export_tables.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

using namespace cudasim::export_tables;

namespace {

const TableInfo& table_info(Table table) {
  switch (table) {
    case Table::CudartInterface: return cudart_interface();
    case Table::ContextLocalStorage: return context_local_storage();
    case Table::ToolsRuntimeCallbackHooks: return tools_runtime_callback_hooks();
    case Table::ToolsTls: return tools_tls();
    case Table::ContextChecks: return context_checks();
    case Table::IntegrityCheck: return integrity_check();
    case Table::DeviceExtendedRt: return device_extended_rt();
    case Table::CtxCreateBypass: return ctx_create_bypass();
    case Table::ToolsContext: return tools_context();
    case Table::ToolsModule: return tools_module();
    case Table::Unnamed1734: return unnamed_1734();
    case Table::HeapAccess:
    case Table::Count: break;
  }
  return heap_access();
}

// Plain arrays of atomics: usable from any thread, at exit, and in a forked child, with no lock.
std::atomic<std::uint64_t> g_calls[kTableCount][kMaxSlots];
std::atomic<bool> g_unknown_said[kTableCount][kMaxSlots];

// Tables asked for, known or not, in the order first asked (a few dozen at most: the UUIDs
// NVIDIA's libraries know). Guarded by g_requests_mu, which no other lock nests in.
struct Request {
  CUuuid id;
  std::uint64_t count;
};
std::mutex g_requests_mu;
std::vector<Request>* g_requests = new std::vector<Request>();  // never freed: read at exit

std::string uuid_text(const CUuuid& id) {
  char text[39];
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  std::snprintf(text, sizeof text, "{%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X}", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

const TableInfo* find_table(const CUuuid& id) {
  for (std::size_t t = 0; t < kTableCount; ++t) {
    const TableInfo& info = table_info(static_cast<Table>(t));
    if (std::memcmp(info.id.bytes, id.bytes, sizeof id.bytes) == 0) return &info;
  }
  return nullptr;
}

// Counts the request; true the first time this UUID is asked.
bool note_request(const CUuuid& id) {
  std::lock_guard lock(g_requests_mu);
  for (Request& r : *g_requests) {
    if (std::memcmp(r.id.bytes, id.bytes, sizeof id.bytes) == 0) {
      ++r.count;
      return false;
    }
  }
  g_requests->push_back({id, 1});
  return true;
}

}  // namespace

namespace cudasim::export_tables {

void count_call(Table table, std::size_t index) noexcept {
  g_calls[static_cast<std::size_t>(table)][index].fetch_add(1, std::memory_order_relaxed);
}

void unknown_call(Table table, std::size_t index) noexcept {
  count_call(table, index);
  if (!g_unknown_said[static_cast<std::size_t>(table)][index].exchange(true)) {
    const TableInfo& info = table_info(table);
    std::fprintf(stderr,
                 "cudasim: cuGetExportTable: entry %zu of table %s %s is not simulated; it returns "
                 "CUDA_ERROR_NOT_SUPPORTED\n",
                 index, info.name, uuid_text(info.id).c_str());
  }
}

const char* knowledge_name(Knowledge knowledge) {
  switch (knowledge) {
    case Knowledge::Known: return "known";
    case Knowledge::Inferred: return "inferred";
    case Knowledge::Unknown: break;
  }
  return "unknown";
}

std::vector<TableRequest> requests() {
  std::lock_guard lock(g_requests_mu);
  std::vector<TableRequest> out;
  for (const Request& r : *g_requests) {
    const TableInfo* info = find_table(r.id);
    out.push_back({uuid_text(r.id), info != nullptr ? info->name : "", r.count});
  }
  return out;
}

std::vector<SlotCalls> calls() {
  std::vector<SlotCalls> out;
  for (std::size_t t = 0; t < kTableCount; ++t) {
    const TableInfo& info = table_info(static_cast<Table>(t));
    for (std::size_t i = 0; i < info.slot_count; ++i) {
      const std::uint64_t n = g_calls[t][i].load(std::memory_order_relaxed);
      if (n > 0) out.push_back({info.name, i, info.knowledge[i], n});
    }
  }
  return out;
}

}  // namespace cudasim::export_tables

// Works before cuInit, as the runtime asks for its tables first. An unknown UUID: said once on
// stderr, CUDA_ERROR_NOT_SUPPORTED and *ppExportTable NULL.
CUDASIM_EXPORT CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool first = note_request(*pExportTableId);
  const TableInfo* info = find_table(*pExportTableId);
  if (info == nullptr) {
    *ppExportTable = nullptr;
    if (first) {
      std::fprintf(stderr, "cudasim: cuGetExportTable: table %s is not simulated; it returns CUDA_ERROR_NOT_SUPPORTED\n",
                   uuid_text(*pExportTableId).c_str());
    }
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *ppExportTable = info->slots;
  return CUDA_SUCCESS;
}
