// NVML's memory queries, answered from the budget: a program (or the framework inside it) that loads
// NVML in the same process sees its device as large as its limit and its use as what the budget has
// charged, as cuMemGetInfo and cuDeviceTotalMem report it.
//
// NVML is not the driver: programs dlopen libnvidia-ml.so.1 and dlsym its entry points, or link it.
// The exported dlsym hands out these hooks for the two memory queries (remembering the real ones);
// a program linked against NVML binds to the exports below, which find the real ones with RTLD_NEXT.
// An NVML device is matched to a CUDA device by UUID. Where anything is missing (no CUDA yet, no
// budget, an NVML without nvmlDeviceGetUUID) the real answer is returned unchanged.
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "budget/budgets.h"
#include "hooks/hook_table.h"
#include "hooks/hooks.h"
#include "base/log.h"
#include "driver/real_dlsym.h"
#include "driver/real_driver.h"

// NVML's documented ABI for the calls used here (nvml.h is not part of the CUDA Toolkit), with nvml.h's
// own type names at global scope: the hooks then have exactly the function types of NVML's entry
// points, which matters to callers that check it (UBSan's -fsanitize=function) and to the calls to
// the real ones below.
typedef enum nvmlReturn_enum { NVML_SUCCESS = 0, NVML_ERROR_UNKNOWN = 999 } nvmlReturn_t;  // NOLINT: nvml.h's names
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

namespace {

constexpr nvmlReturn_t kNvmlSuccess = NVML_SUCCESS;
using MemoryInfo = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using MemoryInfoV2 = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using GetUuid = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);

constexpr std::string_view kMemoryInfo = "nvmlDeviceGetMemoryInfo";
constexpr std::string_view kMemoryInfoV2 = "nvmlDeviceGetMemoryInfo_v2";

std::atomic<MemoryInfo> g_memory_info{nullptr};
std::atomic<MemoryInfoV2> g_memory_info_v2{nullptr};
std::atomic<void*> g_nvml_handle{nullptr};  // the library the program's NVML came from

template <typename Function>
Function real_nvml(std::atomic<Function>& slot, std::string_view name) {
  if (Function known = slot.load(std::memory_order_acquire)) return known;
  // Linked directly: the next definition after ours.
  auto* found = reinterpret_cast<Function>(gpumem::shim::real_symbol(RTLD_NEXT, std::string(name).c_str()));
  if (found != nullptr) slot.store(found, std::memory_order_release);
  return found;
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML prints a CUDA device's UUID.
std::array<char, 64> uuid_text(const CUuuid& uuid) {
  std::array<char, 64> text{};
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::snprintf(text.data(), text.size(),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

// The CUDA device NVML calls `device`, or -1.
CUdevice cuda_device_of(nvmlDevice_t device) {
  using namespace gpumem::shim;
  const RealDriver& driver = real_driver();
  if (!driver.available || driver.cuDeviceGetCount == nullptr || driver.cuDeviceGetUuid_v2 == nullptr) return -1;
  void* library = g_nvml_handle.load(std::memory_order_acquire);
  auto get_uuid = reinterpret_cast<GetUuid>(real_symbol(library != nullptr ? library : RTLD_NEXT, "nvmlDeviceGetUUID"));
  dlerror();
  std::array<char, 96> nvml_uuid{};
  if (get_uuid == nullptr || get_uuid(device, nvml_uuid.data(), static_cast<unsigned int>(nvml_uuid.size())) != kNvmlSuccess) {
    return -1;
  }
  int count = 0;
  if (driver.cuDeviceGetCount(&count) != CUDA_SUCCESS) return -1;
  for (CUdevice ordinal = 0; ordinal < count; ++ordinal) {
    CUuuid uuid{};
    if (driver.cuDeviceGetUuid_v2(&uuid, ordinal) == CUDA_SUCCESS &&
        std::strcmp(uuid_text(uuid).data(), nvml_uuid.data()) == 0) {
      return ordinal;
    }
  }
  return -1;
}

// The device's budget seen as NVML figures: total = the limit, used = what is charged, free = the
// rest (never more than NVML saw free on the device). False when there is no budget to apply.
bool budget_view(nvmlDevice_t device, unsigned long long& total, unsigned long long& free, unsigned long long& used) {
  const CUdevice ordinal = cuda_device_of(device);
  if (ordinal < 0) return false;
  const gpumem::shim::DeviceBudget* budget = gpumem::shim::budget::of_device(ordinal);
  if (budget == nullptr) return false;
  gpumem::shim::budget::refresh_share(ordinal);  // a shared GPU: the allowance now
  total = budget->limit();
  used = std::min<unsigned long long>(budget->charged(), total);
  free = std::min<unsigned long long>(total - used, free);
  return true;
}

}  // namespace

namespace gpumem::shim {

bool is_nvml_hooked_name(const char* name) noexcept {
  return name != nullptr && name[0] == 'n' && (kMemoryInfo == name || kMemoryInfoV2 == name);
}

}  // namespace gpumem::shim

extern "C" {

GPUMEM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  const MemoryInfo real = real_nvml(g_memory_info, kMemoryInfo);
  if (real == nullptr) return NVML_ERROR_UNKNOWN;  // there is no NVML behind us
  const nvmlReturn_t result = real(device, memory);
  if (result != kNvmlSuccess) return result;
  try {
    budget_view(device, memory->total, memory->free, memory->used);
  } catch (...) {  // the real answer stands
  }
  return result;
}

GPUMEM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  const MemoryInfoV2 real = real_nvml(g_memory_info_v2, kMemoryInfoV2);
  if (real == nullptr) return NVML_ERROR_UNKNOWN;
  const nvmlReturn_t result = real(device, memory);
  if (result != kNvmlSuccess) return result;
  try {
    if (budget_view(device, memory->total, memory->free, memory->used)) memory->reserved = 0;
  } catch (...) {
  }
  return result;
}

}  // extern "C"

namespace gpumem::shim {

// The exported dlsym found `found` for `name` in `handle`: remember it, answer with our hook.
void* nvml_hook_for(void* handle, const char* name, void* found) noexcept {
  if (found == nullptr) return found;
  const bool v2 = kMemoryInfo != name;
  // What the program is handed: the preloaded library's stub when there is one (its stubs follow the
  // driver hooks, memory info first), else the function here.
  void* hook = preload_stub(hook_entries().size() + (v2 ? 1 : 0));
  if (hook == nullptr) {
    hook = v2 ? reinterpret_cast<void*>(&nvmlDeviceGetMemoryInfo_v2) : reinterpret_cast<void*>(&nvmlDeviceGetMemoryInfo);
  }
  if (found == hook) return found;
  if (v2) {
    g_memory_info_v2.store(reinterpret_cast<MemoryInfoV2>(found), std::memory_order_release);
  } else {
    g_memory_info.store(reinterpret_cast<MemoryInfo>(found), std::memory_order_release);
  }
  g_nvml_handle.store(handle, std::memory_order_release);
  log::at(LogLevel::debug, "dlsym(\"{}\") -> hook in libgpumem.so", name);
  return hook;
}

}  // namespace gpumem::shim
