// Which memory manager serves which CUDA context. Memory belongs to a context, so each context gets its
// own manager, created at its first allocation from the process policy and the device's size.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <optional>

#include "base/log.h"
#include "budget/budgets.h"
#include "managers/memory_manager.h"

namespace gpumem::shim {

// Invariants: a slot's `manager` is set before its `context` is published (release) and is never
// deleted: a thread that found it may still be using it after the context was forgotten, and a
// destroyed context's memory is already gone with the driver. Lookups are lock-free scans of at most
// `slots_in_use_` slots; creation and forgetting take ProcessLock::registry.
class ContextRegistry {
 public:
  // The process's registry (leaked on purpose: hooks may run during static destruction).
  static ContextRegistry& instance();

  // The current context's manager; with `create`, made on first use. Null when the shim is inert
  // (bad environment, mode off), no context is current, or no manager could be made.
  MemoryManager* current(bool create);
  MemoryManager* find(CUcontext context) const noexcept;
  // The manager of the first managed context on `device`, or null.
  MemoryManager* first_on_device(CUdevice device) const noexcept;
  // The manager that handed out `ptr`, in any context.
  MemoryManager* owner_of(CUdeviceptr ptr) const;

  // The context is being destroyed: its manager is dropped (its memory goes with the context).
  void forget(CUcontext context);
  // The device's primary context is being reset.
  void forget_primary_context(CUdevice device);
  // Logs (at info) the summary of every manager whose context is still registered: at process exit,
  // for the contexts nothing destroyed. Calls no CUDA function.
  void log_live_summaries() const noexcept;
  // Calls visit(manager, live) for every manager this process made (up to kMaxManagersKept, in the
  // order they were made), `live` false once its context is gone. Lock-free; calls no CUDA function.
  template <typename Visit>
  void for_each_manager(Visit&& visit) const {
    const std::size_t made = std::min(managers_made_.load(std::memory_order_acquire), kMaxManagersKept);
    for (std::size_t i = 0; i < made; ++i) {
      if (MemoryManager* manager = made_[i].load(std::memory_order_acquire)) visit(*manager, is_live(manager));
    }
  }
  // The registry if some hook has reached it in this process, else null (never creates it).
  static const ContextRegistry* existing() noexcept;

 private:
  struct Slot {
    std::atomic<CUcontext> context{nullptr};
    std::atomic<MemoryManager*> manager{nullptr};
  };
  static constexpr std::size_t kMaxContexts = 64;
  static constexpr std::size_t kMaxManagersKept = 4096;  // for the exit statistics

  bool is_live(const MemoryManager* manager) const noexcept;
  // The context's peer access ends with it (peer_access.h); takes no lock of the registry.
  void forget_peer_access(CUcontext context) const;

  ContextRegistry();
  // What it has to say goes to `messages`, to be logged once the lock is released.
  // `share`: the device's share when it is shared with other processes (budget::share_terms).
  MemoryManager* create_locked(CUcontext context, const std::optional<budget::ShareTerms>& share,
                               log::Pending& messages);
  static void reset_in_child() noexcept;

  std::array<Slot, kMaxContexts> slots_;
  std::atomic<std::size_t> slots_in_use_{0};  // high-water mark of used slots
  // Every manager made (they are never deleted), for the statistics of retired contexts.
  std::array<std::atomic<MemoryManager*>, kMaxManagersKept> made_{};
  std::atomic<std::size_t> managers_made_{0};
};

}  // namespace gpumem::shim
