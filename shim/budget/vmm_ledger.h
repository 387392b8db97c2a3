// What the budget knows of virtual-memory-management allocations (cuMemCreate): the driver frees a
// physical allocation only when its handle has been released as often as it was created or retained
// AND every mapping of it is gone. The charge is refunded at exactly that point.
//
// Pure bookkeeping (no CUDA calls, no lock: its user serialises the calls, services/other_paths.cpp
// under ProcessLock::vmm_ledger), unit-tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

#include "checked_size.h"

namespace gpumem::shim {

// Invariants: every handle in handles_ has references >= 0 and mappings >= 0, and is erased (its
// charge refunded) as soon as both are 0; every entry of mappings_ names a handle in handles_ and
// covers [start, start + size) of the address space, without overlapping another entry.
class VmmLedger {
 public:
  struct Charge {
    int device = 0;
    std::size_t bytes = 0;
  };

  // A handle the driver just created, charged `bytes` on `device`.
  void created(std::uint64_t handle, int device, std::size_t bytes) {
    handles_[handle] = Entry{device, bytes, 1, 0};
  }
  // cuMemRetainAllocationHandle returned `handle`: one more reference.
  void retained(std::uint64_t handle) {
    if (const auto found = handles_.find(handle); found != handles_.end()) ++found->second.references;
  }
  // cuMemRelease(handle) succeeded: the charge to refund, if that freed the memory.
  std::optional<Charge> released(std::uint64_t handle) {
    const auto found = handles_.find(handle);
    if (found == handles_.end() || found->second.references == 0) return std::nullopt;
    --found->second.references;
    return settle(found);
  }
  // cuMemMap(start, size, ..., handle) succeeded.
  void mapped(std::uintptr_t start, std::size_t size, std::uint64_t handle) {
    const auto found = handles_.find(handle);
    if (found == handles_.end()) return;  // not charged here (imported, or made before the shim)
    ++found->second.mappings;
    mappings_[start] = Mapping{size, handle};
  }
  // cuMemUnmap(start, size) succeeded: every mapping inside the range is gone. The charges that
  // freed memory, summed per device in `refund(device, bytes)`.
  template <typename Refund>
  void unmapped(std::uintptr_t start, std::size_t size, Refund&& refund) {
    auto mapping = mappings_.lower_bound(start);
    while (mapping != mappings_.end() && mapping->first < saturating_add(start, size)) {
      const auto handle = handles_.find(mapping->second.handle);
      mapping = mappings_.erase(mapping);
      if (handle == handles_.end()) continue;
      --handle->second.mappings;
      if (const auto charge = settle(handle)) refund(charge->device, charge->bytes);
    }
  }
  std::size_t live_handles() const {
    return handles_.size();
  }

 private:
  struct Entry {
    int device;
    std::size_t bytes;
    int references;
    int mappings;
  };
  struct Mapping {
    std::size_t size;
    std::uint64_t handle;
  };
  using Handles = std::unordered_map<std::uint64_t, Entry>;

  std::optional<Charge> settle(Handles::iterator entry) {
    if (entry->second.references > 0 || entry->second.mappings > 0) return std::nullopt;
    const Charge charge{entry->second.device, entry->second.bytes};
    handles_.erase(entry);
    return charge;
  }

  Handles handles_;
  std::map<std::uintptr_t, Mapping> mappings_;
};

}  // namespace gpumem::shim
