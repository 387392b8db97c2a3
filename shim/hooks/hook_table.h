// The driver entry points the shim replaces, and how a real entry point is matched to its hook.
#pragma once

#include <cuda.h>

#include <atomic>
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
  void* hook;
};

std::span<const HookEntry> hook_entries() noexcept;

// The entry for an exact versioned name (e.g. "cuMemAlloc_v2"), or null when it is not hooked.
const HookEntry* find_hook_by_name(std::string_view name) noexcept;

// The entry whose hook is exactly `address`, or null.
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
