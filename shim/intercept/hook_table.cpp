#include "intercept/hook_table.h"

#include <dlfcn.h>

#include <array>
#include <cstring>
#include <mutex>

#include "intercept/driver_object.h"
#include "fork_safe_lock.h"
#include "intercept/hooks.h"
#include "intercept/real_dlsym.h"
#include "intercept/resolution_guard.h"

namespace gpumem::shim {
namespace {

constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

template <typename Function>
void* address_of(Function* function) {
  return reinterpret_cast<void*>(function);
}

constexpr std::size_t kHookCount = 42;

// Every versioned name listed here is exported by libgpumem.so (see libgpumem.map). Built on first
// use rather than at load (function addresses are not constant expressions), so loading the shim
// runs none of its code.
const std::array<HookEntry, kHookCount>& hooks() noexcept {
  static const std::array<HookEntry, kHookCount> table{{
      {"cuGetProcAddress", "cuGetProcAddress", 11030, kLegacy,
       address_of(&cuGetProcAddress_v11030_hook)},
      {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, kLegacy, address_of(&cuGetProcAddress_v2)},
      {"cuMemAlloc_v2", "cuMemAlloc", 3020, kLegacy, address_of(&cuMemAlloc_v2)},
      {"cuMemFree_v2", "cuMemFree", 3020, kLegacy, address_of(&cuMemFree_v2)},
      {"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, kLegacy, address_of(&cuMemAllocPitch_v2)},
      {"cuMemGetInfo_v2", "cuMemGetInfo", 3020, kLegacy, address_of(&cuMemGetInfo_v2)},
      {"cuMemAllocAsync", "cuMemAllocAsync", 11020, kLegacy, address_of(&cuMemAllocAsync)},
      {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, kPerThread,
       address_of(&cuMemAllocAsync_ptsz)},
      {"cuMemFreeAsync", "cuMemFreeAsync", 11020, kLegacy, address_of(&cuMemFreeAsync)},
      {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, kPerThread,
       address_of(&cuMemFreeAsync_ptsz)},
      {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, kLegacy,
       address_of(&cuMemAllocFromPoolAsync)},
      {"cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 11020, kPerThread,
       address_of(&cuMemAllocFromPoolAsync_ptsz)},
      {"cuCtxSynchronize", "cuCtxSynchronize", 2000, kLegacy, address_of(&cuCtxSynchronize)},
      {"cuCtxSynchronize_v2", "cuCtxSynchronize", 13000, kLegacy, address_of(&cuCtxSynchronize_v2)},
      {"cuCtxDestroy_v2", "cuCtxDestroy", 4000, kLegacy, address_of(&cuCtxDestroy_v2)},
      {"cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", 11000, kLegacy,
       address_of(&cuDevicePrimaryCtxReset_v2)},
      {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease", 7000, kLegacy,
       address_of(&cuDevicePrimaryCtxRelease_v7000_hook)},
      {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 11000, kLegacy,
       address_of(&cuDevicePrimaryCtxRelease_v2)},
      {"cuIpcGetMemHandle", "cuIpcGetMemHandle", 4010, kLegacy, address_of(&cuIpcGetMemHandle)},
      {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle", 11000, kLegacy, address_of(&cuIpcOpenMemHandle_v2)},
      {"cuIpcCloseMemHandle", "cuIpcCloseMemHandle", 4010, kLegacy, address_of(&cuIpcCloseMemHandle)},
      {"cuStreamBeginCapture_v2", "cuStreamBeginCapture", 10010, kLegacy,
       address_of(&cuStreamBeginCapture_v2)},
      {"cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCapture", 10010, kPerThread,
       address_of(&cuStreamBeginCapture_v2_ptsz)},
      {"cuStreamEndCapture", "cuStreamEndCapture", 10000, kLegacy, address_of(&cuStreamEndCapture)},
      {"cuStreamEndCapture_ptsz", "cuStreamEndCapture", 10000, kPerThread,
       address_of(&cuStreamEndCapture_ptsz)},
      // Pointer queries: a block of a VMM-backed arena is answered as the allocation it is.
      {"cuMemGetAddressRange_v2", "cuMemGetAddressRange", 3020, kLegacy, address_of(&cuMemGetAddressRange_v2)},
      {"cuPointerGetAttribute", "cuPointerGetAttribute", 4000, kLegacy, address_of(&cuPointerGetAttribute)},
      {"cuPointerGetAttributes", "cuPointerGetAttributes", 7000, kLegacy, address_of(&cuPointerGetAttributes)},
      // Peer access, passed on to a VMM-backed arena's mappings.
      {"cuCtxEnablePeerAccess", "cuCtxEnablePeerAccess", 4000, kLegacy, address_of(&cuCtxEnablePeerAccess)},
      {"cuCtxDisablePeerAccess", "cuCtxDisablePeerAccess", 4000, kLegacy, address_of(&cuCtxDisablePeerAccess)},
      // The other paths that take device memory, charged to the budget.
      {"cuDeviceTotalMem_v2", "cuDeviceTotalMem", 3020, kLegacy, address_of(&cuDeviceTotalMem_v2)},
      {"cuMemCreate", "cuMemCreate", 10020, kLegacy, address_of(&cuMemCreate)},
      {"cuMemRelease", "cuMemRelease", 10020, kLegacy, address_of(&cuMemRelease)},
      {"cuMemMap", "cuMemMap", 10020, kLegacy, address_of(&cuMemMap)},
      {"cuMemUnmap", "cuMemUnmap", 10020, kLegacy, address_of(&cuMemUnmap)},
      {"cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 11000, kLegacy,
       address_of(&cuMemRetainAllocationHandle)},
      {"cuMemAllocManaged", "cuMemAllocManaged", 6000, kLegacy, address_of(&cuMemAllocManaged)},
      {"cuArrayCreate_v2", "cuArrayCreate", 3020, kLegacy, address_of(&cuArrayCreate_v2)},
      {"cuArray3DCreate_v2", "cuArray3DCreate", 3020, kLegacy, address_of(&cuArray3DCreate_v2)},
      {"cuArrayDestroy", "cuArrayDestroy", 2000, kLegacy, address_of(&cuArrayDestroy)},
      {"cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 5000, kLegacy, address_of(&cuMipmappedArrayCreate)},
      {"cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 5000, kLegacy, address_of(&cuMipmappedArrayDestroy)},
  }};
  return table;
}

// The driver's real addresses of each hooked name, two ways (its exported symbol, and its
// cuGetProcAddress answer), filled once under g_mutex when the driver is known.
// Invariant: g_resolved is set only after both arrays are complete; then they never change.
std::array<const void*, kHookCount> g_exported{};
std::array<const void*, kHookCount> g_answered{};
std::atomic<bool> g_resolved{false};
std::mutex g_mutex;

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
    const auto lock = lock_fork_safely<g_mutex>();
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

const HookEntry* find_hook_by_name(std::string_view name) noexcept {
  if (!name.starts_with("cu")) return nullptr;
  for (const HookEntry& hook : hook_entries()) {
    if (name == hook.name) return &hook;
  }
  return nullptr;
}

const HookEntry* find_hook_by_address(const void* address) noexcept {
  for (const HookEntry& hook : hook_entries()) {
    if (address == hook.hook) return &hook;
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
