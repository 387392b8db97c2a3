// Helpers shared by the simulated driver's tests. Public driver API (cuda.h) only; the Gate and
// the size units come from the runtime tests' helpers (header-only, no runtime calls made).
#pragma once

#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "runtime_support.h"

namespace driver_test {

// A host function that blocks its stream until open(); `ran` says whether it finished.
using runtime_test::Gate;
using runtime_test::kGiB;
using runtime_test::kMiB;

// Initialises the driver and makes device 0's primary context current (once per process).
inline CUcontext primary_context() {
  static CUcontext ctx = [] {
    CUcontext c = nullptr;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS) std::abort();
    return c;
  }();
  cuCtxSetCurrent(ctx);
  return ctx;
}

// A new non-blocking stream of the current context (one that does not wait for the legacy stream).
inline CUstream non_blocking_stream() {
  CUstream stream = nullptr;
  if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuStreamCreate failed\n");
    std::abort();
  }
  return stream;
}

// Initialises the driver and makes device 0's primary context current; false on any failure.
// For forked children, which start with a fresh driver.
inline bool start_primary_context() {
  CUcontext ctx = nullptr;
  return cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
         cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

// The simulated latency the latency tests configure, in the child that sets it.
inline constexpr auto kTestLatency = std::chrono::milliseconds(200);

// For forked children: sets CUDASIM_ALLOC_LATENCY_US and CUDASIM_FREE_LATENCY_US to kTestLatency,
// then starts the primary context; false on any failure.
inline bool start_with_test_latencies() {
  setenv("CUDASIM_ALLOC_LATENCY_US", "200000", 1);
  setenv("CUDASIM_FREE_LATENCY_US", "200000", 1);
  return start_primary_context();
}

// True if `call` returns CUDA_SUCCESS and takes at least kTestLatency.
template <typename Call>
bool succeeds_slowly(Call call) {
  const auto start = std::chrono::steady_clock::now();
  return call() == CUDA_SUCCESS && std::chrono::steady_clock::now() - start >= kTestLatency;
}

// Runs `body` in a forked child, which starts with a fresh, uninitialised driver (and its own
// environment), and returns the child's exit status (0: success; signals read as 1000 + number).
inline int in_child(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

// Inside in_child bodies: report the failed condition and fail the child.
#define CHILD_CHECK(condition)                                                          \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      std::fprintf(stderr, "%s:%d: child check failed: %s\n", __FILE__, __LINE__, #condition); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

// An array descriptor of these extents, format, channels and flags.
inline CUDA_ARRAY3D_DESCRIPTOR array_descriptor(size_t width, size_t height, size_t depth, CUarray_format format,
                                                unsigned channels, unsigned flags = 0) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = width;
  desc.Height = height;
  desc.Depth = depth;
  desc.Format = format;
  desc.NumChannels = channels;
  desc.Flags = flags;
  return desc;
}

// A 1D copy node's parameters: `bytes` from host memory to device memory.
inline CUDA_MEMCPY3D copy_1d(CUdeviceptr dst, const void* src_host, size_t bytes) {
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = src_host;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = dst;
  p.WidthInBytes = bytes;
  p.Height = 1;
  p.Depth = 1;
  return p;
}

// Appends `value` to a shared log from a stream, to observe execution order.
struct Step {
  std::string* log;
  char value;
  static void CUDA_CB run(void* self) {
    auto* step = static_cast<Step*>(self);
    step->log->push_back(step->value);
  }
};

}  // namespace driver_test
