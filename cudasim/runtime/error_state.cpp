#include "error_state.h"

#include <atomic>

#include "driver_table.h"

namespace cudasim::runtime {
namespace {

// Invariant: never holds cudaErrorNotReady.
thread_local cudaError_t thread_last_error = cudaSuccess;

// Invariant: cudaSuccess or one of the codes for which is_sticky() holds.
std::atomic<int> process_sticky_error{cudaSuccess};

// The errors CUDA documents as corrupting the context ("the process must be terminated and
// relaunched" / "all existing device memory allocations are invalid").
bool is_sticky(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
      return true;
    default:
      return false;
  }
}

}  // namespace

cudaError_t finish(cudaError_t error) {
  if (error == cudaSuccess || error == cudaErrorNotReady) return error;
  thread_last_error = error;
  if (is_sticky(error)) {
    int expected = cudaSuccess;
    process_sticky_error.compare_exchange_strong(expected, error);
  }
  return error;
}

cudaError_t peek_last_error() {
  if (const cudaError_t ready = driver_status(); ready != cudaSuccess) return ready;
  const cudaError_t sticky = sticky_error();
  return sticky != cudaSuccess ? sticky : thread_last_error;
}

cudaError_t take_last_error() {
  if (const cudaError_t ready = driver_status(); ready != cudaSuccess) return ready;
  const cudaError_t sticky = sticky_error();
  const cudaError_t last = thread_last_error;
  thread_last_error = cudaSuccess;
  return sticky != cudaSuccess ? sticky : last;
}

cudaError_t sticky_error() { return static_cast<cudaError_t>(process_sticky_error.load()); }

void clear_sticky_error() { process_sticky_error.store(cudaSuccess); }

}  // namespace cudasim::runtime
