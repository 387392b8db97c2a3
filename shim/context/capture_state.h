// Whether the program may be capturing a stream into a CUDA graph right now. While a capture is
// under way the driver refuses a context synchronisation (and, in global capture mode, other
// "potentially unsafe" calls) and invalidates the capture, so the shim must not make those calls
// on its own initiative: it grows, defers or hands the request to the driver instead.
//
// Counted by the cuStreamBeginCapture/cuStreamEndCapture hooks. Errs on the side of "capturing": a
// capture the count never sees end (its stream destroyed mid-capture) leaves it raised, which costs
// memory (growth instead of a synchronisation), never safety.
#pragma once

namespace gpumem::shim::capture_state {

void began() noexcept;
void ended() noexcept;
bool active() noexcept;

}  // namespace gpumem::shim::capture_state
