// Counts the heap allocations made on the calling thread inside cuMemAlloc and cuMemFree (driver
// API), after a warm-up. Under gpumem's bfc mode the hook -> arena -> return path
// must make none; over the plain simulated driver the count shows the probe works (its driver
// allocates host memory per block).
//
// malloc and friends are defined here, so they interpose on glibc's for the whole process (the shim
// and libstdc++'s operator new included); only the main thread counts, as the simulator's stream
// threads allocate on their own.
//
// usage: mem_hot_path OPERATIONS [SYNC_EVERY]   prints heap_allocs=N operations=N
// SYNC_EVERY: steps between the program's context synchronisations (default 1000; 0: never)
#include <cuda.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* memory, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
void __libc_free(void* memory);
}

namespace {

thread_local bool t_counting = false;
thread_local std::size_t t_heap_allocs = 0;

void count() noexcept {
  if (t_counting) ++t_heap_allocs;
}

}  // namespace

extern "C" {
void* malloc(std::size_t size) {
  count();
  return __libc_malloc(size);
}
void* calloc(std::size_t count_of, std::size_t size) {
  count();
  return __libc_calloc(count_of, size);
}
void* realloc(void* memory, std::size_t size) {
  count();
  return __libc_realloc(memory, size);
}
void* memalign(std::size_t alignment, std::size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) { return memalign(alignment, size); }
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  void* memory = memalign(alignment, size);
  if (memory == nullptr) return 12;  // ENOMEM
  *out = memory;
  return 0;
}
void free(void* memory) { __libc_free(memory); }
}

namespace {

constexpr int kLive = 32;  // blocks held at once
constexpr std::size_t kSizes[] = {256, 1000, 4096, 65536, 300000, 1 << 20, 3 << 20, 777};

bool check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "mem_hot_path: %s failed (%d)\n", what, static_cast<int>(result));
  return false;
}

// `operations` allocations, each freeing the block allocated kLive steps before; the context is
// synchronised every `sync_every` steps (0: never), as a program does between phases of work.
// With `count`, only the cuMemFree/cuMemAlloc calls are counted, not the synchronisations.
bool churn(int operations, int sync_every, CUdeviceptr (&live)[kLive], bool count) {
  for (int step = 0; step < operations; ++step) {
    CUdeviceptr& slot = live[step % kLive];
    t_counting = count;
    const CUresult freed = slot != 0 ? cuMemFree(slot) : CUDA_SUCCESS;
    const CUresult allocated = cuMemAlloc(&slot, kSizes[step % (sizeof(kSizes) / sizeof(kSizes[0]))]);
    t_counting = false;
    if (!check(freed, "cuMemFree") || !check(allocated, "cuMemAlloc")) return false;
    if (sync_every > 0 && step % sync_every == sync_every - 1 && !check(cuCtxSynchronize(), "cuCtxSynchronize")) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int operations = argc > 1 ? std::atoi(argv[1]) : 0;
  const int sync_every = argc > 2 ? std::atoi(argv[2]) : 1000;
  if (operations <= 0 || sync_every < 0) {
    std::fprintf(stderr, "usage: mem_hot_path OPERATIONS [SYNC_EVERY]\n");
    return 2;
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (!check(cuInit(0), "cuInit") || !check(cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") ||
      !check(cuCtxSetCurrent(context), "cuCtxSetCurrent")) {
    return 1;
  }
  CUdeviceptr live[kLive] = {};
  // Warm-up: the arena, its records and maps grow to their high-water mark.
  if (!churn(operations, sync_every, live, false)) return 1;
  const bool ok = churn(operations, sync_every, live, true);
  const std::size_t heap_allocs = t_heap_allocs;
  for (CUdeviceptr block : live) {
    if (block != 0) cuMemFree(block);
  }
  if (!ok) return 1;
  std::printf("heap_allocs=%zu\noperations=%d\n", heap_allocs, operations);
  return 0;
}
