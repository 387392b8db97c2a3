// Which loaded object is the CUDA driver, and single entry-point resolution that never returns a hook.
#include "driver/driver_object.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "driver/real_dlsym.h"

namespace gpumem::shim {
namespace {

constexpr const char* kDriverSoname = "libcuda.so.1";

// Invariant: null until the driver is known, then that driver's link map for the process lifetime
// (set once by compare-and-swap; a fork child inherits the same mappings, so it stays valid there).
std::atomic<void*> g_driver{nullptr};
std::atomic<void*> g_proc_address_v2{nullptr};
std::atomic<void*> g_proc_address_v1{nullptr};

std::atomic<void*> g_preload_object{nullptr};

void* own_object() noexcept {
  static std::atomic<void*> own{nullptr};
  void* object = own.load(std::memory_order_acquire);
  if (object == nullptr) {
    object = object_containing(reinterpret_cast<const void*>(&own_object));
    own.store(object, std::memory_order_release);
  }
  return object;
}

bool is_own_object(const void* object) noexcept {
  return object != nullptr && (object == own_object() || object == g_preload_object.load(std::memory_order_acquire));
}

// True when `object` itself (not one of its dependencies) defines cuGetProcAddress_v2.
bool defines_driver_api(void* object) noexcept {
  const void* entry = real_symbol(object, "cuGetProcAddress_v2");
  if (entry == nullptr) dlerror();  // our probe must not leave an error for the program to read
  return entry != nullptr && object_containing(entry) == object;
}

void* cached_symbol(std::atomic<void*>& cache, const char* name, bool load) noexcept {
  void* entry = cache.load(std::memory_order_acquire);
  if (entry != nullptr) return entry;
  void* driver = driver_handle(load);
  if (driver == nullptr) return nullptr;
  entry = real_symbol(driver, name);
  if (entry == nullptr || is_own_address(entry)) return nullptr;
  cache.store(entry, std::memory_order_release);
  return entry;
}

// True when `entry` is the exact address of an exported symbol named other than `name`.
bool exported_under_other_name(const void* entry, const char* name) noexcept {
  Dl_info info{};
  return dladdr(entry, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == entry &&
         std::strcmp(info.dli_sname, name) != 0;
}

}  // namespace

void* object_containing(const void* address) noexcept {
  if (address == nullptr) return nullptr;
  Dl_info info{};
  link_map* object = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&object), RTLD_DL_LINKMAP) == 0)
    return nullptr;
  return object;
}

bool is_own_address(const void* address) noexcept { return is_own_object(object_containing(address)); }

void note_preload_object(const void* address) noexcept {
  g_preload_object.store(object_containing(address), std::memory_order_release);
}

bool adopt_driver_object(void* object) noexcept {
  if (object == nullptr || is_own_object(object)) return false;
  void* current = g_driver.load(std::memory_order_acquire);
  if (current != nullptr) return current == object;
  if (!defines_driver_api(object)) return false;
  return g_driver.compare_exchange_strong(current, object, std::memory_order_acq_rel) ||
         current == object;
}

void* driver_handle(bool load) noexcept {
  void* driver = g_driver.load(std::memory_order_acquire);
  if (driver != nullptr) return driver;
  void* handle = dlopen(kDriverSoname, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr && load) handle = dlopen(kDriverSoname, RTLD_NOW);
  if (handle == nullptr) {
    dlerror();
    return nullptr;
  }
  // The handle keeps its reference for the process lifetime: the hooks may need the driver until
  // exit.
  adopt_driver_object(handle);
  return g_driver.load(std::memory_order_acquire);
}

PFN_cuGetProcAddress_v12000 driver_proc_address_v2(bool load) noexcept {
  return reinterpret_cast<PFN_cuGetProcAddress_v12000>(
      cached_symbol(g_proc_address_v2, "cuGetProcAddress_v2", load));
}

PFN_cuGetProcAddress_v11030 driver_proc_address_v1(bool load) noexcept {
  return reinterpret_cast<PFN_cuGetProcAddress_v11030>(
      cached_symbol(g_proc_address_v1, "cuGetProcAddress", load));
}

void* driver_entry_point(const char* versioned_name, const char* base_name, int version,
                         cuuint64_t flags) noexcept {
  void* entry = nullptr;
  if (const auto proc_address = driver_proc_address_v2(/*load=*/true)) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (proc_address(base_name, &entry, version, flags, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS) {
      entry = nullptr;
    }
  }
  // A driver older than `version` answers with its newest older form, another ABI (cuCtxSynchronize
  // for the 13.0 cuCtxSynchronize_v2): it lacks this entry point, even if something exports the name.
  // Our hooks carry the driver's names, so this holds when the answer is one of them too.
  if (entry != nullptr && exported_under_other_name(entry, versioned_name)) return nullptr;
  if (entry == nullptr || is_own_address(entry)) {
    void* driver = driver_handle(/*load=*/true);
    entry = driver == nullptr ? nullptr : real_symbol(driver, versioned_name);
    if (entry == nullptr) dlerror();
  }
  return entry != nullptr && !is_own_address(entry) ? entry : nullptr;
}

}  // namespace gpumem::shim
