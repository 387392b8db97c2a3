// cuGetProcAddress (CUDA 11.3 signature) and cuGetProcAddress_v2: ask the real driver, then hand
// out our hook in place of the exact versioned entry point it returned, if that one is hooked.
#include "driver/driver_object.h"
#include "hooks/hook_table.h"
#include "hooks/hooks.h"
#include "policy/process_policy.h"
#include "base/log.h"
#include "driver/resolution_guard.h"

namespace gpumem::shim {
namespace {

void swap_in_hook(const char* symbol, void** entry, int cuda_version, cuuint64_t flags) noexcept {
  if (entry == nullptr || *entry == nullptr || ResolutionGuard::active()) return;
  // A driver whose own table binds to exported names (no -Bsymbolic) may hand out our hook itself.
  const HookEntry* hook = find_hook_by_address(*entry);
  if (hook == nullptr) hook = hook_for_driver_entry(*entry);
  if (hook == nullptr) return;
  *entry = hook->hook;
  log::at(LogLevel::debug, "cuGetProcAddress(\"{}\", {}, flags={}) -> {} hook in libgpumem.so", symbol,
             cuda_version, flags, hook->name);
}

}  // namespace
}  // namespace gpumem::shim

extern "C" {

GPUMEM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                   cuuint64_t flags,
                                                   CUdriverProcAddressQueryResult* symbolStatus) {
  using namespace gpumem::shim;
  note_hook_reached();
  if (policy_refuses_cuda()) return CUDA_ERROR_NOT_INITIALIZED;  // GPUMEM_STRICT: no driver for the runtime
  const auto real = driver_proc_address_v2(/*load=*/true);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (result == CUDA_SUCCESS) swap_in_hook(symbol, pfn, cudaVersion, flags);
  return result;
}

GPUMEM_EXPORT CUresult CUDAAPI cuGetProcAddress_v11030_hook(const char* symbol, void** pfn,
                                                            int cuda_version, cuuint64_t flags) {
  using namespace gpumem::shim;
  note_hook_reached();
  if (policy_refuses_cuda()) return CUDA_ERROR_NOT_INITIALIZED;  // GPUMEM_STRICT: no driver for the runtime
  const auto real = driver_proc_address_v1(/*load=*/true);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(symbol, pfn, cuda_version, flags);
  if (result == CUDA_SUCCESS) swap_in_hook(symbol, pfn, cuda_version, flags);
  return result;
}

}  // extern "C"
