// The driver entry points the shim replaces, and how a real entry point is matched to its hook.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <span>
#include <string_view>

namespace gpumem::shim {

// One hooked entry point. Invariant: `name` is the exact versioned symbol the driver exports, and
// (base_name, version, flags) is a cuGetProcAddress request the driver answers with it; `hook` is
// our exported function of that name and signature.
struct HookEntry {
  const char* name;
  const char* base_name;
  int version;
  cuuint64_t flags;
  void* hook;      // what a program is handed: the preloaded library's stub, or `function` itself
  void* function;  // the hook's function here
};

std::span<const HookEntry> hook_entries() noexcept;
// hook_entries().size(), without building the table.
std::size_t hook_count() noexcept;

// Behind the preloaded library (preload/, api/core_interface.h) the hooks a program is handed are its
// exported stubs, which jump to the functions here: set before anything reads the hook table. `stubs` holds one per
// hook, in hook_entries()'s order, then NVML's two memory queries (preload_stub()).
void use_preload_stubs(void* const* stubs, std::size_t count) noexcept;
// The preloaded library's stub at `index` (as in use_preload_stubs), or null without one.
void* preload_stub(std::size_t index) noexcept;

// dlsym on a real handle for a name the shim hooks (hooks/dlsym_hook.cpp): the real answer, or the hook
// standing in for it.
void* dlsym_with_handle(void* handle, const char* name) noexcept;
// NVML's memory queries (hooks/nvml_hooks.cpp): whether `name` is one, and the hook to hand out for it.
bool is_nvml_hooked_name(const char* name) noexcept;
void* nvml_hook_for(void* handle, const char* name, void* found) noexcept;

// The entry for an exact versioned name (e.g. "cuMemAlloc_v2"), or null when it is not hooked.
const HookEntry* find_hook_by_name(std::string_view name) noexcept;

// The entry whose hook (or its function here) is exactly `address`, or null.
const HookEntry* find_hook_by_address(const void* address) noexcept;

// The hook standing in for `entry`, an entry point the driver handed out: matched by address
// against the driver's own answer for each hooked name, then by the symbol name dladdr gives for
// it within the driver. Null when `entry` is not a hooked driver entry point (or is one of ours).
const HookEntry* hook_for_driver_entry(const void* entry) noexcept;

// Set by every hook: the program's CUDA calls reach the shim (read by gpumem_is_active()).
inline std::atomic<bool> g_hook_reached{false};
inline void note_hook_reached() noexcept {
  if (!g_hook_reached.load(std::memory_order_relaxed)) {
    g_hook_reached.store(true, std::memory_order_relaxed);
  }
}

}  // namespace gpumem::shim
