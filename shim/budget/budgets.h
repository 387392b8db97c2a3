// The process's device budgets (device_budget.h), their limits from the policy, and the ledger of
// blocks whose free names only a pointer (pool blocks, managed memory, the program's own pools).
//
// Every function is thread-safe and never throws. Budgets exist only while the shim is active.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/log.h"
#include "budget/device_budget.h"
#include "share/ledger.h"

namespace gpumem::shim::budget {

inline constexpr int kMaxDevices = 64;

// The budget of `device` with its limit in force: set by the first memory manager made on the device
// (ContextRegistry), or here from the policy and the device's size when another path comes first.
// Null when the shim is inert, the ordinal is out of range, or the device cannot be queried.
DeviceBudget* of_device(CUdevice device) noexcept;
// The limit the policy gives `device` of `total` bytes (`free` of them free): Policy::device_limit,
// with the ranks that split the GPU counted by the UUIDs of the devices this process sees
// (Policy::ranks_sharing_gpu). Both the first memory manager of a device and any other path that
// comes first ask here. The first time for a device, how the limit came about is added to `messages`
// at info; a limit of 0 (less than one 256-byte granule: the device is not managed) adds the error line.
std::size_t policy_limit(CUdevice device, std::size_t total, std::size_t free, log::Pending& messages) noexcept;
// The identity policy_limit found for `device` ("GPU-" and the UUID), and how many ranks split it;
// empty and 1 before (read by the exit statistics, which call no CUDA function).
std::string device_uuid(CUdevice device);
unsigned ranks_sharing(CUdevice device) noexcept;
// The budget if its limit is already set, else null (never queries the driver).
DeviceBudget* existing(CUdevice device) noexcept;
// The slot of `device`, limit set or not (for the registry, which sets it); null when out of range.
DeviceBudget* slot(CUdevice device) noexcept;

// Charges `bytes` to `path` on `device`. When they do not fit and `path` is not the arena, the
// device's bfc arenas first give back wholly free regions (gpumem_trim), then it tries once more.
// A refusal is logged at warn naming `call`, the request and the budget. True when charged (also
// when the shim has no budget for the device: nothing to enforce).
bool charge(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call) noexcept;
// Whether this thread's last charge() was refused (by the budget or the GPU's ledger), for the
// out-of-memory report of the call it was made for: then the refusal was gpumem's, not the driver's.
bool last_charge_refused() noexcept;
// What refused this thread's last charge, or the driver call a charge paid for, since
// clear_refusal_cause(): for the out-of-memory report and the preallocation's line, so that each names
// the cause and the knob that would help.
enum class RefusalCause : std::uint8_t {
  none,       // nothing refused (a refusal was the caller's own: an arena at its limit)
  limit,      // the process's budget: the device's limit (limit_advice says what set it)
  share,      // the GPU's ledger: the guarantee, and what the other processes hold
  share_cap,  // the ledger, at the most this process may hold of a shared GPU (cap_advice)
  driver,     // the charge passed and the driver refused: memory outside gpumem's budget and ledger
};
RefusalCause last_refusal_cause() noexcept;
void clear_refusal_cause() noexcept;
void note_driver_refusal(CUresult result) noexcept;
// What set `device`'s limit and the knob that raises it ("set by GPUMEM_LIMIT; raise it", "0.75 of the
// device's total memory from default; raise GPUMEM_MEM_FRACTION or set GPUMEM_LIMIT", a cluster's
// bound); cap_advice: the same for the most it may hold of a shared GPU, empty when only the device
// bounds it. Ask the driver for the device's size (never at exit).
std::string limit_advice(CUdevice device);
std::string cap_advice(CUdevice device);
void refund(CUdevice device, BudgetPath path, std::size_t bytes) noexcept;
// The driver answered (either way) the call that a charge of `bytes` was made for. On a shared device
// the ledger counts a charge as not yet on the device until then (docs/sharing.md); every charge()
// that returned true is followed by this once its driver call returns.
void answered(CUdevice device, std::size_t bytes) noexcept;

// Whether `bytes` exceed `device`'s whole memory (a size near 2^64, say): no budget could hold them,
// so nothing is charged for them and the driver gives its own answer (an invalid size, or out of
// memory), as it would without the shim. Asks the driver only when `bytes` exceed the budget's limit.
bool beyond_device(CUdevice device, std::size_t bytes) noexcept;

// Every path pays before it asks the driver: charges `bytes` to `path` on `device`, runs `allocate`
// (the driver call, returning a CUresult), and refunds the charge if it failed. A refused charge
// answers CUDA_ERROR_OUT_OF_MEMORY without calling the driver.
template <typename Allocate>
CUresult charged(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call, Allocate&& allocate) {
  if (!charge(device, path, bytes, call)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = allocate();
  answered(device, bytes);
  if (result != CUDA_SUCCESS) {
    refund(device, path, bytes);
    note_driver_refusal(result);
  }
  return result;
}

// charged() for a size the program passed: a request beyond the device is the driver's to refuse
// (beyond_device), with its own answer; should the driver grant it after all, `undo` gives it back,
// and the answer is CUDA_ERROR_OUT_OF_MEMORY.
template <typename Allocate, typename Undo>
CUresult charged(CUdevice device, BudgetPath path, std::size_t bytes, std::string_view call, Allocate&& allocate,
                 Undo&& undo) {
  if (!beyond_device(device, bytes)) return charged(device, path, bytes, call, allocate);
  const CUresult result = allocate();
  if (result != CUDA_SUCCESS) return result;
  undo();
  return CUDA_ERROR_OUT_OF_MEMORY;
}

// The ledger: `key` (a device pointer, or an array handle) holds `bytes` charged to `path` on
// `device`. forget_block refunds and removes it; false when the key is not in the ledger.
// The block is taken to belong to the current context (its memory goes when that context is destroyed).
// `pool`: the stream-ordered pool the block came from, which keeps its memory when it is freed
// (pool_reserve.h); null for memory the driver takes back at the free.
void remember_block(std::uintptr_t key, CUdevice device, BudgetPath path, std::size_t bytes,
                    CUmemoryPool pool = nullptr) noexcept;
// The context is being destroyed, and every block it held with it: their charges are refunded.
void forget_context(CUcontext context) noexcept;
bool forget_block(std::uintptr_t key) noexcept;
// A forgotten block whose free failed: charged again, as before.
struct Forgotten {
  bool found = false;
  std::uintptr_t key = 0;
  CUdevice device = 0;
  BudgetPath path = BudgetPath::driver;
  std::size_t bytes = 0;
  CUmemoryPool pool = nullptr;
};
// Removes and refunds (a pool block: its charge moves to pool_reserve), reporting what it was.
Forgotten take_block(std::uintptr_t key) noexcept;
// The two halves of take_block: the block leaves the ledger still charged; then its charge goes.
Forgotten unlink_block(std::uintptr_t key) noexcept;
void release_block(const Forgotten& block) noexcept;
void restore_block(const Forgotten& block) noexcept;  // undoes take_block

// Frees the ledger's block `key` with `free` (a driver call returning a CUresult). The block leaves
// the ledger before the free, since another thread may be handed the address at once, but its charge
// goes only once the driver has the memory back: a charge made meanwhile never finds room the device
// does not have yet. A free that fails puts the block back.
template <typename Free>
CUresult free_block(std::uintptr_t key, Free&& free) {
  const Forgotten block = unlink_block(key);
  const CUresult result = free();
  if (result == CUDA_SUCCESS) {
    release_block(block);
  } else if (block.found) {
    remember_block(block.key, block.device, block.path, block.bytes, block.pool);
  }
  return result;
}

// What the device's memory managers gave back when a charge did not fit: the bytes released to the
// driver, and whether one of them keeps a preallocated region it cannot give back in part.
struct Reclaimed {
  std::size_t bytes = 0;
  bool preallocated = false;
};
// Gives back what the managers of `device` hold unused (gpumem_trim). The layer that owns the managers
// registers it (managers/context_registry.cpp), so the budget asks for memory back without calling up.
using Reclaimer = Reclaimed (*)(CUdevice device) noexcept;
void set_reclaimer(Reclaimer reclaimer) noexcept;

// --- A device shared with other processes (GPUMEM_SHARE=auto, docs/sharing.md) ---
// With sharing on, the device's budget joins the GPU's ledger when it is first set (of_device); every
// charge then reserves there first (waiting, inside the guarantee, for borrowers to give back), every
// refund gives back there, and the limit is the process's allowance.

// The device's ledger membership, or null (not shared, or not joined).
inline share::Member* shared(CUdevice device) noexcept { return share::member(device); }
// Others asked this process to give memory of `device` back: one relaxed load of a mapped word.
inline bool reclaim_requested(CUdevice device) noexcept {
  const share::Member* member = share::member(device);
  return member != nullptr && member->reclaim_requested() != 0;
}
// Serves such a request: what the device's managers hold unused goes back (the reclaimer), and the
// ledger hears how much. Call with no manager's lock held.
void serve_reclaim_request(CUdevice device) noexcept;
// The device's share as the registry sizes a new manager: joins the ledger if sharing is on (the
// caller holds no lock). nullopt when the device is not shared.
struct ShareTerms {
  std::size_t guarantee = 0;
  std::size_t allowance = 0;
  std::size_t cap = 0;  // GPUMEM_LIMIT or a cluster's bound, else the device's total: the most it may hold
};
std::optional<ShareTerms> share_terms(CUdevice device) noexcept;
// While one lives on a thread, a charge of `device` that must wait for others' memory asks them for
// `bytes` (less what this thread has charged since), not only for the piece it charges: an arena
// that maps a block (or its preallocation) piece by piece asks once for all of it, and the others
// give it back in one answer.
class ExpectedNeed {
 public:
  ExpectedNeed(CUdevice device, std::size_t bytes) noexcept;
  ~ExpectedNeed();
  ExpectedNeed(const ExpectedNeed&) = delete;
  ExpectedNeed& operator=(const ExpectedNeed&) = delete;

 private:
  CUdevice saved_device_;
  std::size_t saved_bytes_;
};
// How long this thread's last refused charge on a shared device waited for borrowed memory (ms; 0:
// it did not wait), for the out-of-memory report that follows it.
std::uint64_t last_share_wait_ms() noexcept;
// Looks at the ledger again so that the limit (cuMemGetInfo's total, NVML's) is the allowance now.
void refresh_share(CUdevice device) noexcept;
// A process that could not join its GPU's ledger because another process stayed inside an update
// (stopped) tries again, at most every 100 ms: one load when it is not locked out. Call with no
// manager's lock held.
void retry_join(CUdevice device) noexcept;

// True when some device has a budget (some path reached the shim in this process).
bool any() noexcept;

// The current context's device, or -1.
CUdevice current_device() noexcept;

}  // namespace gpumem::shim::budget
