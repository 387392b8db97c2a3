// Reclaim without the program's help (GPUMEM_SHARE=auto, docs/sharing.md "Reclaim"): one thread per
// shared device, started when the device joins its GPU's ledger, sleeps on its slot's futex word and
// gives back what the process holds unused when another member asks, whether or not the program ever
// calls CUDA again.
//
// Why it cannot deadlock or harm the program:
// - It never waits for a lock a program thread may hold for long: an arena's lock is tried (a busy
//   arena is tried again, backing off from 1 to 16 ms), a manager retired meanwhile is skipped. The
//   ledger's own locks it takes as every visit does (at most 2 s once, for a member stopped inside an
//   update), never while it holds an arena's lock longer than one bounded step.
// - It never waits for the device and never synchronises a context or stream: fenced memory goes back
//   once its event has completed (queried), a deferred free's once an event recorded on its context
//   (cuCtxRecordEvent) has completed. cuMemUnmap itself waits for the device's queued work, with the
//   arena's lock held: so nothing is unmapped before such an event, recorded at the request, has
//   completed; the unmapping then waits at most for work queued since (a program computing in one
//   kernel for an hour gives back after it; one computing in steps, between two).
// - It makes no driver call while a graph capture is under way, nor while a ReclaimHold lives (a
//   capture beginning, a context being destroyed, the process exiting): those wait for a step under
//   way to end, and no step starts meanwhile.
// - Every signal is blocked in it, so the program's handlers never run there. It is detached and
//   never joined; it touches only objects the shim leaks (members, managers), so nothing it uses is
//   destroyed at exit. At exit (an atexit handler) it stops before its next step, and the handler
//   waits for the step under way, at most kExitPatienceNs.
// - A forked child has no such thread: its state is reset there, and the child starts its own when it
//   joins the ledger afresh.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "share/ledger.h"

namespace gpumem::shim::budget {

// How long a ReclaimHold, or the exit, waits at most for a step under way (a driver call that never
// returns must not hang the program).
inline constexpr std::uint64_t kExitPatienceNs = 2'000'000'000;
// With no request, the thread looks again this often, and publishes what the process holds idle when
// the program has allocated or freed since (others count it as lendable).
inline constexpr std::uint64_t kIdleFigureEveryNs = 250'000'000;

// What the device's managers gave back for the thread (the registry's, set_idle_reclaimer).
struct IdleReclaimed {
  std::size_t bytes = 0;        // given back to the driver
  std::size_t idle = 0;         // still held unused (fenced memory included)
  std::size_t in_use = 0;       // in live blocks
  std::uint64_t calls = 0;      // allocations and frees served so far (to tell whether figures moved)
  bool busy = false;            // an arena was locked by the program: try again shortly
  bool fences_pending = false;  // memory waits for the device: fenced, or work still queued (an event,
                                // queried again shortly)
};
// Gives back up to about `want` bytes (0: only the figures) that the managers of `device` hold unused,
// under the rules above. The layer that owns the managers registers it (managers/context_registry.cpp).
using IdleReclaimer = IdleReclaimed (*)(CUdevice device, std::size_t want) noexcept;
void set_idle_reclaimer(IdleReclaimer reclaimer) noexcept;

// Starts the thread of `device` once per process (a forked child: once more). Call with no lock held.
// False, with one line said once, when no thread could be made: requests are then answered at the
// program's own calls, as by a member without one.
bool start_reclaim_thread(CUdevice device, share::Member& member) noexcept;

// While one lives, the threads start no step, and its constructor waits (at most kExitPatienceNs) for
// a step under way to end: around a capture's beginning (cuCtxRecordEvent or cuMemFree would end the
// capture) and a context's destruction (the thread must not use it meanwhile). Two atomic operations
// when no thread runs.
class ReclaimHold {
 public:
  ReclaimHold() noexcept;
  ~ReclaimHold();
  ReclaimHold(const ReclaimHold&) = delete;
  ReclaimHold& operator=(const ReclaimHold&) = delete;
};

// For a manager between steps of a give-back: true when a ReclaimHold waits or the process exits.
bool reclaim_should_yield() noexcept;

}  // namespace gpumem::shim::budget
