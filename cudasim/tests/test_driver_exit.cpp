// The simulated driver used after main: exit_child.cpp, built through the driver API and run as a
// child process, calls it from the destructors of a thread_local and of a static object and from
// an atexit handler. exit() destroys the main thread's thread_local objects first (the driver's
// too, had it any with a destructor), so the thread's context stack must outlive them; the report,
// written as the driver is unloaded, must count their calls.
#include "child_process.h"

#include <catch2/catch.hpp>
#include <cuda.h>

#include <string>

using runtime_test::exit_child_failing_after_main;
using runtime_test::exit_child_observed;
using runtime_test::exit_child_success;
using runtime_test::Observations;

TEST_CASE("driver calls from exit-time destructors and atexit handlers work", "[driver][exit]") {
  CHECK(exit_child_observed(DRIVER_TEST_EXIT_CHILD, {}) == exit_child_success(true));
}

TEST_CASE("fault rules apply to driver calls after main", "[driver][exit]") {
  // cuMemFreeAsync then has nothing to free.
  Observations expected = exit_child_failing_after_main(true, {{"malloc_async", std::to_string(CUDA_ERROR_OUT_OF_MEMORY)},
                                                               {"free_async", std::to_string(CUDA_ERROR_INVALID_VALUE)}});
  expected["report.pool.async_allocs"] = expected["report.pool.async_frees"] = "1";  // main's only
  CHECK(exit_child_observed(DRIVER_TEST_EXIT_CHILD, {{"CUDASIM_FAULTS", "cuMemAllocAsync@2+"}}) == expected);
}
