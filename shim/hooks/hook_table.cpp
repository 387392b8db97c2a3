// The hooked entry points (entry_points.def) and the matching of a driver entry point to its hook.
#include "hooks/hook_table.h"

#include <dlfcn.h>

#include <array>
#include <cstring>

#include "base/fork_safe_lock.h"
#include "driver/driver_object.h"
#include "driver/real_dlsym.h"
#include "driver/real_driver.h"
#include "driver/resolution_guard.h"
#include "hooks/hooks.h"

namespace gpumem::shim {
namespace {

template <typename Function>
void* address_of(Function* function) {
  return reinterpret_cast<void*>(function);
}

// The hooks of driver/entry_points.def: its HOOK entries and its HOOK_ONLY ones.
#define GPUMEM_IS_HOOK_CALL 0
#define GPUMEM_IS_HOOK_HOOK 1
constexpr std::size_t kHookCount = 0
#define GPUMEM_DRIVER_ENTRY(symbol, base, version, stream, use) + GPUMEM_IS_HOOK_##use
#define GPUMEM_DRIVER_HOOK_ONLY(symbol, function, base, version, stream) + 1
#include "driver/entry_points.def"
    ;

// The preloaded library's stubs (use_preload_stubs): hooks, then NVML's two queries.
constexpr std::size_t kPreloadStubs = kHookCount + 2;
std::array<std::atomic<void*>, kPreloadStubs> g_preload_stubs{};

// The address a program is handed for hook `index`: the preloaded library's stub when there is one.
void* handed_out(std::size_t index, void* function) noexcept {
  void* stub = g_preload_stubs[index].load(std::memory_order_acquire);
  return stub != nullptr ? stub : function;
}

// Every name listed here is exported by libgpumem.so (the build writes libgpumem.map from the same
// list). Built on first use rather than at load (function addresses are not constant expressions), so
// loading the shim runs none of its code.
#define GPUMEM_HOOK_ENTRY_CALL(symbol, base, version, stream)
#define GPUMEM_HOOK_ENTRY_HOOK(symbol, base, version, stream) \
  HookEntry{#symbol, #base, version, GPUMEM_STREAM_FLAGS(stream), handed_out(index++, address_of(&symbol)), \
            address_of(&symbol)},
const std::array<HookEntry, kHookCount>& hooks() noexcept {
  static const std::array<HookEntry, kHookCount> table = [] {
    std::size_t index = 0;
    return std::array<HookEntry, kHookCount>{{
#define GPUMEM_DRIVER_ENTRY(symbol, base, version, stream, use) GPUMEM_HOOK_ENTRY_##use(symbol, base, version, stream)
#define GPUMEM_DRIVER_HOOK_ONLY(symbol, function, base, version, stream) \
  HookEntry{#symbol, #base, version, GPUMEM_STREAM_FLAGS(stream), handed_out(index++, address_of(&function)), \
            address_of(&function)},
#include "driver/entry_points.def"
    }};
  }();
  return table;
}

// The driver's real addresses of each hooked name, two ways (its exported symbol, and its
// cuGetProcAddress answer), filled once under ProcessLock::hook_table when the driver is known.
// Invariant: g_resolved is set only after both arrays are complete; then they never change.
std::array<const void*, kHookCount> g_exported{};
std::array<const void*, kHookCount> g_answered{};
std::atomic<bool> g_resolved{false};

bool names_other_symbol(const void* entry, std::string_view name) noexcept {
  Dl_info info{};
  return dladdr(entry, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == entry &&
         name != info.dli_sname;
}

// Called with a ResolutionGuard held.
bool resolve_real_addresses() noexcept {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  void* driver = driver_handle(/*load=*/false);
  if (driver == nullptr) return false;
  try {
    const auto lock = lock_fork_safely(ProcessLock::hook_table);
    if (g_resolved.load(std::memory_order_relaxed)) return true;
    const auto proc_address = driver_proc_address_v2(/*load=*/false);
    for (std::size_t i = 0; i < kHookCount; ++i) {
      const HookEntry& hook = hooks()[i];
      g_exported[i] = real_symbol(driver, hook.name);
      void* answer = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      if (proc_address == nullptr ||
          proc_address(hook.base_name, &answer, hook.version, hook.flags, &status) !=
              CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS) {
        answer = nullptr;
      }
      // An answer that the driver exports under another name is some other version of the family
      // (a different ABI): never match it to this hook.
      if (answer != nullptr && answer != g_exported[i] && names_other_symbol(answer, hook.name)) {
        answer = nullptr;
      }
      g_answered[i] = answer;
    }
    dlerror();  // names the driver lacks must not leave an error behind for the program
    g_resolved.store(true, std::memory_order_release);
    return true;
  } catch (...) {  // std::mutex::lock failing: treat as unresolved, never throw into the program
    return false;
  }
}

const HookEntry* match_by_symbol_name(const void* entry) noexcept {
  Dl_info info{};
  if (dladdr(entry, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != entry) {
    return nullptr;
  }
  if (object_containing(entry) != driver_handle(/*load=*/false)) return nullptr;
  return find_hook_by_name(info.dli_sname);
}

}  // namespace

std::span<const HookEntry> hook_entries() noexcept { return std::span<const HookEntry>(hooks()); }

std::size_t hook_count() noexcept { return kHookCount; }

void use_preload_stubs(void* const* stubs, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count && i < kPreloadStubs; ++i) g_preload_stubs[i].store(stubs[i], std::memory_order_release);
}

void* preload_stub(std::size_t index) noexcept {
  return index < kPreloadStubs ? g_preload_stubs[index].load(std::memory_order_acquire) : nullptr;
}

const HookEntry* find_hook_by_name(std::string_view name) noexcept {
  if (!name.starts_with("cu")) return nullptr;
  for (const HookEntry& hook : hook_entries()) {
    if (name == hook.name) return &hook;
  }
  return nullptr;
}

const HookEntry* find_hook_by_address(const void* address) noexcept {
  for (const HookEntry& hook : hook_entries()) {
    if (address == hook.hook || address == hook.function) return &hook;
  }
  return nullptr;
}

const HookEntry* hook_for_driver_entry(const void* entry) noexcept {
  if (entry == nullptr || find_hook_by_address(entry) != nullptr) return nullptr;
  if (ResolutionGuard::active()) return nullptr;
  const ResolutionGuard guard;  // dladdr and the driver may be wrapped by tools that call back in
  if (resolve_real_addresses()) {
    for (std::size_t i = 0; i < kHookCount; ++i) {
      if (entry == g_exported[i] || entry == g_answered[i]) return &hooks()[i];
    }
  }
  return match_by_symbol_name(entry);
}

}  // namespace gpumem::shim
