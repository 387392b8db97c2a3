// Helpers shared by the runtime tests (each is compiled twice: against the shared and the static
// simulated runtime). Public CUDA runtime API only.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace runtime_test {

// Error codes print as their names in failure messages.
inline std::string name(cudaError_t error) { return cudaGetErrorName(error); }

// The tests describe their platform with CUDASIM_* variables alone: the driver's own
// CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER, when the machine running them sets one, are dropped
// before main (the driver reads them at cuInit); tests of them set them in a child.
inline const bool kDeviceSelectionCleared = [] {
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("CUDA_DEVICE_ORDER");
  return true;
}();

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

// Internal linkage, unlike the helpers around it: a test compiled with
// CUDA_API_PER_THREAD_DEFAULT_STREAM (test_runtime_per_thread.cpp) calls cudaStreamQuery_ptsz here,
// and one inline definition shared by every file would have all of them query whichever stream the
// linker's copy names.
namespace {

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

}  // namespace

// A fat binary whose only content is a string table naming one kernel, behind the wrapper nvcc's host
// code passes to the runtime (fatbinary_section.h): enough for the simulator, which looks entry
// points up by name and runs no device code.
struct FakeFatbin {
  std::vector<unsigned char> bytes;
  struct Wrapper {
    int magic = 0x466243B1;
    int version = 1;
    const void* data = nullptr;
    void* unused = nullptr;
  } wrapper;

  explicit FakeFatbin(const std::string& kernel) {
    const std::string body = std::string("\0.strtab\0", 9) + kernel + std::string("\0", 1);
    const std::uint32_t magic = 0xBA55ED50;
    const std::uint16_t version = 1, header = 16;
    const std::uint64_t size = body.size();
    bytes.resize(16 + body.size());
    std::memcpy(bytes.data(), &magic, 4);
    std::memcpy(bytes.data() + 4, &version, 2);
    std::memcpy(bytes.data() + 6, &header, 2);
    std::memcpy(bytes.data() + 8, &size, 8);
    std::memcpy(bytes.data() + 16, body.data(), body.size());
    wrapper.data = bytes.data();
  }
};

}  // namespace runtime_test

#define REQUIRE_CUDA(call) REQUIRE(runtime_test::name(call) == "cudaSuccess")
#define CHECK_CUDA(call) CHECK(runtime_test::name(call) == "cudaSuccess")
