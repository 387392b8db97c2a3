// The allocation paths outside the memory managers, each charged to the device's budget
// (budget/budgets.h): virtual memory management (cuMemCreate, with the refund when the memory is
// really freed: released and unmapped, vmm_ledger.h), managed memory, CUDA arrays and mipmapped
// arrays; and cuDeviceTotalMem, which reports the budget's limit. The hooks call these.
#include <algorithm>
#include <functional>

#include "base/fork_safe_lock.h"
#include "budget/budgets.h"
#include "budget/vmm_ledger.h"
#include "checked_size.h"
#include "services/other_paths.h"
#include "driver/real_driver.h"
#include "managers/context_registry.h"

namespace gpumem::shim {
namespace {

VmmLedger& vmm_ledger() {
  static VmmLedger* const ledger = new VmmLedger();  // leaked: hooks may run during exit
  return *ledger;
}

// Calls `use(ledger)` with the process's VMM ledger locked.
template <typename Use>
auto with_vmm_ledger(Use&& use) {
  const auto lock = lock_fork_safely(ProcessLock::vmm_ledger);
  return use(vmm_ledger());
}

CUresult missing_entry_point() {
  return real_driver().available ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
}

std::size_t format_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;
  }
}

// The bytes an array of this shape holds, when the driver cannot say (no
// cuArrayGetMemoryRequirements before CUDA 11.6): its elements, without the driver's padding.
// A shape past 2^64 bytes saturates: no budget fits it, so it is refused before the driver is asked.
std::size_t estimated_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned int levels) {
  std::size_t total = 0;
  std::size_t width = std::max<std::size_t>(d.Width, 1), height = std::max<std::size_t>(d.Height, 1),
              depth = std::max<std::size_t>(d.Depth, 1);
  const std::size_t element = saturating_mul<std::size_t>(d.NumChannels, format_bytes(d.Format));
  for (unsigned int level = 0; level < std::max(levels, 1u); ++level) {
    const std::size_t level_bytes =
        saturating_mul(saturating_mul(saturating_mul(width, height), depth), element);
    total = saturating_add(total, level_bytes);
    width = std::max<std::size_t>(width / 2, 1);
    height = std::max<std::size_t>(height / 2, 1);
    depth = std::max<std::size_t>(depth / 2, 1);
  }
  return total;
}

// Creates an array charged before the driver is asked, by the bytes of its elements (`estimate`):
// an array's size with the driver's padding is known only once it exists (`exact_bytes`), and then
// the difference is charged or refunded. Over the budget before, nothing is created; over it after
// (the padding did not fit), the array is destroyed at once. Either way the call answers
// CUDA_ERROR_OUT_OF_MEMORY, as if the driver had refused it.
template <typename Handle, typename Create, typename ExactBytes, typename Destroy>
CUresult create_array_charged(Handle* handle, CUdevice device, std::size_t estimate, const char* call,
                              Create&& create, ExactBytes&& exact_bytes, Destroy&& destroy) {
  // The first path to charge a device makes its budget.
  if (handle == nullptr || device < 0 || budget::of_device(device) == nullptr) return create();
  // A shape beyond the whole device is the driver's to refuse (budgets.h, beyond_device): nothing is
  // charged before it answers.
  const std::size_t charged = budget::beyond_device(device, estimate) ? 0 : estimate;
  if (charged > 0 && !budget::charge(device, BudgetPath::arrays, charged, call)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult created = create();
  if (charged > 0) budget::answered(device, charged);
  if (created != CUDA_SUCCESS) {
    if (charged > 0) budget::refund(device, BudgetPath::arrays, charged);
    return created;
  }
  const std::size_t bytes = exact_bytes(*handle);
  const bool padding_charged = bytes <= charged || budget::charge(device, BudgetPath::arrays, bytes - charged, call);
  if (bytes > charged && padding_charged) budget::answered(device, bytes - charged);  // on the device already
  if (!padding_charged) {
    destroy(*handle);
    *handle = nullptr;
    if (charged > 0) budget::refund(device, BudgetPath::arrays, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (bytes < charged) budget::refund(device, BudgetPath::arrays, charged - bytes);
  budget::remember_block(reinterpret_cast<std::uintptr_t>(*handle), device, BudgetPath::arrays, bytes);
  return CUDA_SUCCESS;
}

template <typename Handle, typename Destroy>
CUresult destroy_array(Handle handle, Destroy&& destroy) {
  return budget::free_block(reinterpret_cast<std::uintptr_t>(handle), [&] { return destroy(handle); });
}

}  // namespace

CUresult device_total_mem(size_t* bytes, CUdevice device) {
  const RealDriver& driver = real_driver();
  if (driver.cuDeviceTotalMem_v2 == nullptr) return missing_entry_point();
  const CUresult result = driver.cuDeviceTotalMem_v2(bytes, device);
  if (result != CUDA_SUCCESS) return result;
  // The program sees the device as big as its budget, as cuMemGetInfo and NVML report it (on a
  // shared GPU its allowance now).
  if (const DeviceBudget* budget = budget::of_device(device)) {
    budget::refresh_share(device);
    *bytes = budget->limit();
  }
  return CUDA_SUCCESS;
}

CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                    unsigned long long flags) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemCreate == nullptr) return missing_entry_point();
  // Only device memory is charged; bad arguments get the driver's own answer.
  if (handle == nullptr || prop == nullptr || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return driver.cuMemCreate(handle, size, prop, flags);
  }
  const CUdevice device = prop->location.id;
  const CUresult result = budget::charged(
      device, BudgetPath::vmm, size, "cuMemCreate", [&] { return driver.cuMemCreate(handle, size, prop, flags); },
      [&] { driver.cuMemRelease(*handle); });
  if (result == CUDA_SUCCESS && budget::existing(device) != nullptr) {
    with_vmm_ledger([&](VmmLedger& ledger) { ledger.created(*handle, device, size); });
  }
  return result;
}

CUresult mem_release(CUmemGenericAllocationHandle handle) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemRelease == nullptr) return missing_entry_point();
  const CUresult result = driver.cuMemRelease(handle);
  if (result == CUDA_SUCCESS) {
    const auto charge = with_vmm_ledger([&](VmmLedger& ledger) { return ledger.released(handle); });
    if (charge) budget::refund(charge->device, BudgetPath::vmm, charge->bytes);
  }
  return result;
}

CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                 unsigned long long flags) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemMap == nullptr) return missing_entry_point();
  const CUresult result = driver.cuMemMap(ptr, size, offset, handle, flags);
  if (result == CUDA_SUCCESS) {
    with_vmm_ledger([&](VmmLedger& ledger) { ledger.mapped(static_cast<std::uintptr_t>(ptr), size, handle); });
  }
  return result;
}

CUresult mem_unmap(CUdeviceptr ptr, size_t size) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemUnmap == nullptr) return missing_entry_point();
  const CUresult result = driver.cuMemUnmap(ptr, size);
  if (result == CUDA_SUCCESS) {
    with_vmm_ledger([&](VmmLedger& ledger) {
      ledger.unmapped(static_cast<std::uintptr_t>(ptr), size,
                      [](int device, std::size_t bytes) { budget::refund(device, BudgetPath::vmm, bytes); });
    });
  }
  return result;
}

CUresult mem_retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemRetainAllocationHandle == nullptr) return missing_entry_point();
  // A block a manager handed out is cuMemAlloc memory to the program, whatever backs it (a VMM-backed
  // arena maps its own): the driver's answer for that is CUDA_ERROR_INVALID_VALUE, and the arena's
  // handle must never reach the program (releasing it would free memory under the arena's blocks).
  const ContextRegistry* registry = ContextRegistry::existing();
  if (addr != nullptr && registry != nullptr && registry->owner_of(reinterpret_cast<CUdeviceptr>(addr)) != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUresult result = driver.cuMemRetainAllocationHandle(handle, addr);
  if (result == CUDA_SUCCESS && handle != nullptr) with_vmm_ledger([&](VmmLedger& ledger) { ledger.retained(*handle); });
  return result;
}

CUresult mem_alloc_managed(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  const RealDriver& driver = real_driver();
  if (driver.cuMemAllocManaged == nullptr) return missing_entry_point();
  // Charged to the current device: it is where the memory lives whenever the program's kernels use
  // it, and where a device without concurrent managed access must find room for all of it.
  const CUdevice device = budget::current_device();
  if (dptr == nullptr || bytes == 0 || device < 0) return driver.cuMemAllocManaged(dptr, bytes, flags);
  const CUresult result = budget::charged(
      device, BudgetPath::managed, bytes, "cuMemAllocManaged", [&] { return driver.cuMemAllocManaged(dptr, bytes, flags); },
      [&] { driver.cuMemFree_v2(*dptr); });
  if (result == CUDA_SUCCESS) budget::remember_block(static_cast<std::uintptr_t>(*dptr), device, BudgetPath::managed, bytes);
  return result;
}

namespace {

std::size_t array_bytes(CUarray array, CUdevice device, const CUDA_ARRAY3D_DESCRIPTOR& shape) {
  const RealDriver& driver = real_driver();
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
  if (driver.cuArrayGetMemoryRequirements != nullptr &&
      driver.cuArrayGetMemoryRequirements(&requirements, array, device) == CUDA_SUCCESS) {
    return requirements.size;
  }
  return estimated_bytes(shape, 1);
}

CUresult create_array(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& shape, const char* call,
                      const std::function<CUresult()>& create) {
  const CUdevice device = budget::current_device();
  return create_array_charged(handle, device, estimated_bytes(shape, 1), call, create,
                              [&](CUarray array) { return array_bytes(array, device, shape); },
                              [](CUarray array) { real_driver().cuArrayDestroy(array); });
}

}  // namespace

CUresult array_create(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  const RealDriver& driver = real_driver();
  if (driver.cuArrayCreate_v2 == nullptr || driver.cuArrayDestroy == nullptr) return missing_entry_point();
  if (descriptor == nullptr) return driver.cuArrayCreate_v2(handle, descriptor);  // the driver's answer
  CUDA_ARRAY3D_DESCRIPTOR shape{};
  shape.Width = descriptor->Width;
  shape.Height = descriptor->Height;
  shape.Format = descriptor->Format;
  shape.NumChannels = descriptor->NumChannels;
  return create_array(handle, shape, "cuArrayCreate", [&] { return driver.cuArrayCreate_v2(handle, descriptor); });
}

CUresult array_3d_create(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  const RealDriver& driver = real_driver();
  if (driver.cuArray3DCreate_v2 == nullptr || driver.cuArrayDestroy == nullptr) return missing_entry_point();
  if (descriptor == nullptr) return driver.cuArray3DCreate_v2(handle, descriptor);
  return create_array(handle, *descriptor, "cuArray3DCreate",
                      [&] { return driver.cuArray3DCreate_v2(handle, descriptor); });
}

CUresult array_destroy(CUarray handle) {
  const RealDriver& driver = real_driver();
  if (driver.cuArrayDestroy == nullptr) return missing_entry_point();
  return destroy_array(handle, [&](CUarray array) { return driver.cuArrayDestroy(array); });
}

CUresult mipmapped_array_create(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor,
                                unsigned int levels) {
  const RealDriver& driver = real_driver();
  if (driver.cuMipmappedArrayCreate == nullptr || driver.cuMipmappedArrayDestroy == nullptr) {
    return missing_entry_point();
  }
  if (descriptor == nullptr) return driver.cuMipmappedArrayCreate(handle, descriptor, levels);
  const CUdevice device = budget::current_device();
  return create_array_charged(
      handle, device, estimated_bytes(*descriptor, levels), "cuMipmappedArrayCreate",
      [&] { return driver.cuMipmappedArrayCreate(handle, descriptor, levels); },
      [&](CUmipmappedArray array) {
        CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
        return driver.cuMipmappedArrayGetMemoryRequirements != nullptr &&
                       driver.cuMipmappedArrayGetMemoryRequirements(&requirements, array, device) == CUDA_SUCCESS
                   ? static_cast<std::size_t>(requirements.size)
                   : estimated_bytes(*descriptor, levels);
      },
      [&](CUmipmappedArray array) { driver.cuMipmappedArrayDestroy(array); });
}

CUresult mipmapped_array_destroy(CUmipmappedArray handle) {
  const RealDriver& driver = real_driver();
  if (driver.cuMipmappedArrayDestroy == nullptr) return missing_entry_point();
  return destroy_array(handle, [&](CUmipmappedArray array) { return driver.cuMipmappedArrayDestroy(array); });
}

}  // namespace gpumem::shim
