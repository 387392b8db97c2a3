// Device memory used as a program ends, run as a child process by the exit tests
// (test_runtime_process.cpp for the runtime, test_driver_exit.cpp for the driver): from the
// destructor of a thread_local object of the main thread, from the destructor of a static object
// and from an atexit handler, all made before the first CUDA call. exit() runs the thread_local
// destructors first, in the reverse order of construction (so any thread_local object the driver
// made later is gone by then), then the static destructors and atexit handlers, in the reverse
// order of registration: after the static objects made since, such as those of a driver loaded by
// that first call (the runtime loads libcuda.so.1 then). Built through the runtime API
// (EXIT_CHILD_RUNTIME, linked to the shared or the static simulated runtime) and through the
// driver API (linked to libcuda.so.1).
//
// Prints "<phase>.<call>=<status>" for every call (phase: main, thread_local, static, atexit;
// status a number, 0 for success) and "<phase>.readback=ok" when the bytes copied back are those
// copied in.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifdef EXIT_CHILD_RUNTIME
#include <cuda_runtime_api.h>
#else
#include <cuda.h>
#endif

namespace {

constexpr std::size_t kBlockSize = std::size_t{1} << 20;

void print_status(const char* phase, const char* call, int status) {
  std::printf("%s.%s=%d\n", phase, call, status);
  std::fflush(stdout);
}

void print_readback(const char* phase, std::uint32_t written, std::uint32_t read) {
  std::printf("%s.readback=%s\n", phase, written == read ? "ok" : "mismatch");
  std::fflush(stdout);
}

#ifdef EXIT_CHILD_RUNTIME

void start(const char*) {}  // the runtime loads the driver and makes its context at its first call

// A block allocated, written, read back and freed; stream-ordered memory; a device synchronisation.
void use_device(const char* phase, std::uint32_t pattern) {
  void* block = nullptr;
  print_status(phase, "malloc", cudaMalloc(&block, kBlockSize));
  std::uint32_t back = 0;
  print_status(phase, "copy_in", cudaMemcpy(block, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
  print_status(phase, "copy_out", cudaMemcpy(&back, block, sizeof back, cudaMemcpyDeviceToHost));
  print_readback(phase, pattern, back);
  print_status(phase, "free", cudaFree(block));
  void* pooled = nullptr;
  print_status(phase, "malloc_async", cudaMallocAsync(&pooled, kBlockSize, nullptr));
  print_status(phase, "free_async", cudaFreeAsync(pooled, nullptr));
  print_status(phase, "synchronize", cudaDeviceSynchronize());
}

#else

CUcontext g_primary = nullptr;

void start(const char* phase) {
  print_status(phase, "init", cuInit(0));
  print_status(phase, "retain", cuDevicePrimaryCtxRetain(&g_primary, 0));
  print_status(phase, "set_current", cuCtxSetCurrent(g_primary));
}

// The same through the driver API, in the context main made current (the thread's context stack
// must still be there).
void use_device(const char* phase, std::uint32_t pattern) {
  CUcontext current = nullptr;
  print_status(phase, "get_current", cuCtxGetCurrent(&current));
  std::printf("%s.current=%s\n", phase, current == g_primary ? "primary" : "other");
  CUdeviceptr block = 0;
  print_status(phase, "malloc", cuMemAlloc(&block, kBlockSize));
  std::uint32_t back = 0;
  print_status(phase, "copy_in", cuMemcpyHtoD(block, &pattern, sizeof pattern));
  print_status(phase, "copy_out", cuMemcpyDtoH(&back, block, sizeof back));
  print_readback(phase, pattern, back);
  print_status(phase, "free", cuMemFree(block));
  CUdeviceptr pooled = 0;
  print_status(phase, "malloc_async", cuMemAllocAsync(&pooled, kBlockSize, nullptr));
  print_status(phase, "free_async", cuMemFreeAsync(pooled, nullptr));
  print_status(phase, "synchronize", cuCtxSynchronize());
}

#endif

// Uses the device in its destructor, as the phase it is named after.
struct UsesDeviceWhenDestroyed {
  const char* phase;
  std::uint32_t pattern;
  ~UsesDeviceWhenDestroyed() { use_device(phase, pattern); }
};

thread_local UsesDeviceWhenDestroyed uses_device_as_thread_ends{"thread_local", 0x7715EAD0u};

void use_device_at_exit() { use_device("atexit", 0xA7E71700u); }

}  // namespace

int main() {
  (void)uses_device_as_thread_ends.phase;  // first use: its destructor is registered now
  std::atexit(use_device_at_exit);
  static UsesDeviceWhenDestroyed uses_device_at_teardown{"static", 0x57A71C00u};  // before the handler
  start("main");
  use_device("main", 0x3A1A0000u);
  return 0;
}
