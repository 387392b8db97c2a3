// The stand-in runtime of cudart_stub.h. Each entry point has the exact declaration of the toolkit's
// cuda_runtime_api.h (included, so the compiler checks it); the program links no CUDA runtime.
#include "cudart_stub.h"

#include <cuda_runtime_api.h>

#include <unordered_map>

namespace gpumem::bench {
namespace {

constexpr std::uintptr_t kBase = std::uintptr_t{1} << 59;  // non-canonical: any access faults
constexpr std::size_t kAlignment = 256;                     // cudaMalloc's documented minimum

StubRuntimeCounters g_counters;
bool g_track_bytes = false;
std::unordered_map<std::uintptr_t, std::size_t> g_sizes;  // while tracking
std::uintptr_t g_next = kBase;
std::uintptr_t g_next_event = 1;
int g_device = 0;

}  // namespace

void stub_runtime_reset(bool track_bytes) {
  g_counters = {};
  g_sizes.clear();
  g_track_bytes = track_bytes;
}

void stub_runtime_track_bytes(bool track_bytes) {
  g_track_bytes = track_bytes;
  if (!track_bytes) g_sizes.clear();
}

StubRuntimeCounters stub_runtime_counters() { return g_counters; }

}  // namespace gpumem::bench

using gpumem::bench::g_counters;
using gpumem::bench::g_device;
using gpumem::bench::g_next;
using gpumem::bench::g_next_event;
using gpumem::bench::g_sizes;
using gpumem::bench::g_track_bytes;
using gpumem::bench::kAlignment;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return cudaErrorInvalidValue;
  const std::size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  *devPtr = reinterpret_cast<void*>(g_next);
  if (g_track_bytes) {
    g_sizes.emplace(g_next, size);
    g_counters.held_bytes += size;
    if (g_counters.held_bytes > g_counters.peak_held_bytes) g_counters.peak_held_bytes = g_counters.held_bytes;
  }
  g_next += rounded == 0 ? kAlignment : rounded;
  ++g_counters.mallocs;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  ++g_counters.frees;
  if (g_track_bytes) {
    const auto found = g_sizes.find(reinterpret_cast<std::uintptr_t>(devPtr));
    if (found != g_sizes.end()) {
      g_counters.held_bytes -= found->second;
      g_sizes.erase(found);
    }
  }
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  g_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  if (event == nullptr) return cudaErrorInvalidValue;
  *event = reinterpret_cast<cudaEvent_t>(g_next_event++);
  ++g_counters.events_created;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t /*event*/, cudaStream_t /*stream*/) {
  ++g_counters.events_recorded;
  return cudaSuccess;
}

// No device: whatever an event follows has completed.
cudaError_t cudaEventQuery(cudaEvent_t /*event*/) { return cudaSuccess; }

cudaError_t cudaEventDestroy(cudaEvent_t /*event*/) { return cudaSuccess; }

}  // extern "C"
