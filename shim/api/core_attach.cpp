// gpumem_core_attach: the core's one export, through which the preloaded library fills its table.
#include <cstring>

#include "api/core_interface.h"
#include "driver/driver_object.h"
#include "driver/real_dlsym.h"
#include "hooks/hook_table.h"
#include "hooks/hooks.h"

#ifndef GPUMEM_VERSION
#error "GPUMEM_VERSION must be defined by the build"
#endif

extern "C" {
// Defined in hooks/nvml_hooks.cpp (NVML's types are private to it: only their addresses are needed).
int nvmlDeviceGetMemoryInfo();
int nvmlDeviceGetMemoryInfo_v2();
int gpumem_is_active(void);
}

namespace {

template <typename Function>
void* address_of(Function* function) {
  return reinterpret_cast<void*>(function);
}

}  // namespace

extern "C" GPUMEM_EXPORT int gpumem_core_attach(const gpumem_preload_side* preload, void** targets,
                                                gpumem_core_api* api) {
  using namespace gpumem::shim;
  if (preload == nullptr || targets == nullptr || api == nullptr || preload->version == nullptr ||
      std::strcmp(preload->version, GPUMEM_VERSION) != 0 || preload->stub_count != hook_count() + 2 ||
      preload->stubs == nullptr) {
    return -1;
  }
  // Before anything reads the hook table: the look-ups and the addresses handed out are the preloaded
  // library's.
  use_preload_dlsym(preload->real_dlsym, preload->next_symbol);
  note_preload_object(preload->stubs[0]);
  use_preload_stubs(preload->stubs, preload->stub_count);
  // The functions behind the stubs, in the same order: the hooks', then NVML's, then dlsym on a handle.
  std::size_t index = 0;
  for (const HookEntry& hook : hook_entries()) targets[index++] = hook.function;
  targets[index++] = address_of(&nvmlDeviceGetMemoryInfo);
  targets[index++] = address_of(&nvmlDeviceGetMemoryInfo_v2);
  targets[index] = address_of(&gpumem::shim::dlsym_with_handle);
  *api = gpumem_core_api{&gpumem_is_active, &gpumem_get_stats, &gpumem_get_path_stats, &gpumem_trim, &gpumem_dump};
  return 0;
}
