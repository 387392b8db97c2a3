// Helpers shared by the runtime tests (each is compiled twice: against the shared and the static
// simulated runtime). Public CUDA runtime API only.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace runtime_test {

// Error codes print as their names in failure messages.
inline std::string name(cudaError_t error) { return cudaGetErrorName(error); }

// Size units for readability.
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// The simulated platform the Meson test() sets up: CUDASIM_DEVICES=2,
// CUDASIM_DEVICE_MEMORY=4GiB,2GiB, default context overhead.
constexpr size_t kDevice0Memory = 4 * kGiB;
constexpr size_t kDevice1Memory = 2 * kGiB;

// A host function that blocks its stream until open() is called; `ran` says whether it finished.
// Invariant: the object outlives the stream work it was enqueued in (tests synchronise first).
class Gate {
 public:
  static void CUDART_CB wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    while (!gate->opened_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    gate->ran_.store(true);
  }
  void open() { opened_.store(true); }
  bool ran() const { return ran_.load(); }

 private:
  std::atomic<bool> opened_{false};
  std::atomic<bool> ran_{false};
};

// Polls until the stream has finished or about 5 s passed; returns the last query result. Used
// only so that a wrong answer fails the test instead of hanging it.
inline cudaError_t wait_for_stream(cudaStream_t stream) {
  cudaError_t status = cudaErrorNotReady;
  for (int attempt = 0; attempt < 5000 && status == cudaErrorNotReady; ++attempt) {
    status = cudaStreamQuery(stream);
    if (status == cudaErrorNotReady) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

}  // namespace runtime_test

#define REQUIRE_CUDA(call) REQUIRE(runtime_test::name(call) == "cudaSuccess")
#define CHECK_CUDA(call) CHECK(runtime_test::name(call) == "cudaSuccess")
