// NVIDIA's private driver interfaces: cuGetExportTable(&table, &uuid) hands out a table of entry
// points named by a UUID. NVIDIA's runtime (libcudart_static.a, which every NVIDIA library links
// too) reaches the driver through them beside cuGetProcAddress. No header declares them; what is
// simulated follows what projects that run unmodified CUDA binaries on other drivers have
// published (table UUIDs, entry indices, arguments, meaning), built on the simulator's public
// calls. cudasim/export_tables.md lists every table and entry, whether its meaning is known,
// inferred or unknown, and what NVIDIA's programs and libraries asked for.
//
// A table is an array of pointer-sized slots. Most begin with their own size in bytes (slot 0) and
// hold entry points from slot 1; the context-local storage table holds entry points from slot 0.
// Every slot of a table that is not a simulated entry is an "unknown" entry: it returns
// CUDA_ERROR_NOT_SUPPORTED, reads no argument, and its first call says so on stderr (table and
// index). Every call of every entry is counted for the report (export_table_calls).
#pragma once

#include "../cuda_api.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cudasim::export_tables {

// The tables the simulator hands out, in the report's order.
enum class Table : unsigned {
  CudartInterface,
  ContextLocalStorage,
  ToolsRuntimeCallbackHooks,
  ToolsTls,
  ContextChecks,
  IntegrityCheck,
  DeviceExtendedRt,
  CtxCreateBypass,
  HeapAccess,
  ToolsContext,
  ToolsModule,
  Unnamed1734,
  Count,
};
inline constexpr std::size_t kTableCount = static_cast<std::size_t>(Table::Count);
// No table has more slots than this (the counters are kept per slot).
inline constexpr std::size_t kMaxSlots = 96;

// How much is known of an entry: Known (meaning and arguments published, and consistent with
// what NVIDIA's libraries do with the answer here), Inferred (the published arguments, a meaning
// read from how the callers use it), Unknown (not simulated: an error).
enum class Knowledge : unsigned char { Unknown, Inferred, Known };

// One table as cuGetExportTable hands it out, and what the simulator knows of each slot.
struct TableInfo {
  Table table = Table::Count;
  const char* name = "";  // as the public record names it
  CUuuid id{};
  bool sized = true;  // slot 0 holds the table's size in bytes
  const void* const* slots = nullptr;
  std::size_t slot_count = 0;
  const Knowledge* knowledge = nullptr;  // per slot (slot 0 of a sized table: Known)
  const char* const* meaning = nullptr;  // per slot: one line, empty for unknown slots
};

// Counts one call of slot `index` of `table`.
void count_call(Table table, std::size_t index) noexcept;
// An unknown entry was called: counted, and said once per slot on stderr.
void unknown_call(Table table, std::size_t index) noexcept;

template <Table T, std::size_t I>
CUresult unknown_entry() noexcept {
  unknown_call(T, I);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// A simulated entry `F` in slot I of table T, counted at each call.
template <Table T, std::size_t I, auto F>
struct Counted;
template <Table T, std::size_t I, typename R, typename... Args, R (*F)(Args...)>
struct Counted<T, I, F> {
  static R call(Args... args) {
    count_call(T, I);
    return F(args...);
  }
};

// Builds the slots of table T: its size (when sized), then unknown entries everywhere but where
// set<I, F>() puts a simulated one. Made once, in static storage: the runtime keeps the pointer.
template <Table T, std::size_t N>
class TableBuilder {
  static_assert(N <= kMaxSlots);

 public:
  explicit TableBuilder(bool sized) : sized_(sized) {
    fill(std::make_index_sequence<N>{});
    if (sized) {
      slots_[0] = reinterpret_cast<const void*>(N * sizeof(void*));
      knowledge_[0] = Knowledge::Known;
      meaning_[0] = "the table's size in bytes";
    }
  }
  template <std::size_t I, auto F>
  TableBuilder& set(Knowledge knowledge, const char* meaning) {
    static_assert(I < N);
    slots_[I] = reinterpret_cast<const void*>(&Counted<T, I, F>::call);
    knowledge_[I] = knowledge;
    meaning_[I] = meaning;
    return *this;
  }
  TableInfo info(const char* name, CUuuid id) const {
    return {T, name, id, sized_, slots_.data(), N, knowledge_.data(), meaning_.data()};
  }

 private:
  template <std::size_t... I>
  void fill(std::index_sequence<I...>) {
    ((slots_[I] = reinterpret_cast<const void*>(&unknown_entry<T, I>)), ...);
    knowledge_.fill(Knowledge::Unknown);
    meaning_.fill("");
  }
  bool sized_;
  std::array<const void*, N> slots_{};
  std::array<Knowledge, N> knowledge_{};
  std::array<const char*, N> meaning_{};
};

// Table T of N slots, made once, in static storage (the runtime keeps the pointer): `setup` puts
// the simulated entries in its TableBuilder (b.template set<I, F>(...)).
template <Table T, std::size_t N, typename Setup>
const TableInfo& define_table(const char* name, CUuuid id, bool sized, Setup setup) {
  static const TableBuilder<T, N> slots = [&] {
    TableBuilder<T, N> b(sized);
    setup(b);
    return b;
  }();
  static const TableInfo info = slots.info(name, id);
  return info;
}
// The setup of a table with no simulated entry.
inline constexpr auto no_entries = [](auto&) {};

// The tables (one function per file that defines one).
const TableInfo& cudart_interface();
const TableInfo& context_local_storage();
const TableInfo& tools_runtime_callback_hooks();
const TableInfo& tools_tls();
const TableInfo& context_checks();
const TableInfo& integrity_check();
const TableInfo& device_extended_rt();
const TableInfo& ctx_create_bypass();
const TableInfo& heap_access();
const TableInfo& tools_context();
const TableInfo& tools_module();
const TableInfo& unnamed_1734();

// A UUID from its registry spelling, "{6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9}": its bytes in the
// order written.
constexpr CUuuid uuid(const char (&text)[39]) {
  auto nibble = [](char c) -> int {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c - 'a' + 10;
  };
  CUuuid id{};
  std::size_t byte = 0;
  for (std::size_t i = 1; i + 1 < 38 && byte < 16;) {
    if (text[i] == '-') {
      ++i;
      continue;
    }
    id.bytes[byte++] = static_cast<char>(nibble(text[i]) * 16 + nibble(text[i + 1]));
    i += 2;
  }
  return id;
}

// What the report says (export_table_requests, export_table_calls).
struct TableRequest {
  std::string uuid;  // as written above
  std::string name;  // the table's, or empty when the simulator has no such table
  std::uint64_t count = 0;
};
struct SlotCalls {
  std::string table;
  std::size_t index = 0;
  Knowledge knowledge = Knowledge::Unknown;
  std::uint64_t calls = 0;
};
std::vector<TableRequest> requests();
std::vector<SlotCalls> calls();
const char* knowledge_name(Knowledge knowledge);

}  // namespace cudasim::export_tables
