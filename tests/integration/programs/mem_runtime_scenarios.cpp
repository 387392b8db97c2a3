// Memory scenarios through the CUDA runtime API, run with and without the shim. Each scenario prints
// `key=value` lines for the test driver and exits 0 when every CUDA call behaved as the scenario
// expects; data checks are printed (intact=0|1) so the driver decides what each mode must show.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpumem.h"
#include "mem_scenario_support.h"
#include "runtime_check.h"

namespace {

using mem_scenarios::ReuseBuffers;

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

void sleep_200ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// 10k mixed requests (allocate 60%, free 40%), sizes 1 B .. 1 MiB; a few blocks get data checked.
int churn(int operations) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size_of(1, 1 << 20);
  std::vector<void*> live;
  int allocations = 0;
  for (int i = 0; i < operations; ++i) {
    if (live.empty() || rng() % 10 < 6) {
      void* p = nullptr;
      CHECK_CUDA(cudaMalloc(&p, size_of(rng)));
      ++allocations;
      if (address(p) % 256 != 0) {
        std::fprintf(stderr, "misaligned %p\n", p);
        return 1;
      }
      if (i % 1000 == 0) {  // data round trip
        const std::uint32_t pattern = 0xC0FFEE00u + static_cast<std::uint32_t>(i);
        std::uint32_t back = 0;
        CHECK_CUDA(cudaMemcpy(p, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(&back, p, sizeof back, cudaMemcpyDeviceToHost));
        if (back != pattern) return 1;
      }
      live.push_back(p);
    } else {
      const std::size_t victim = rng() % live.size();
      CHECK_CUDA(cudaFree(live[victim]));
      live[victim] = live.back();
      live.pop_back();
    }
  }
  for (void* p : live) CHECK_CUDA(cudaFree(p));
  std::printf("operations=%d\nallocations=%d\n", operations, allocations);
  return 0;
}

// A block is freed while a slow copy queued on a non-blocking stream will still write it 200 ms
// later; a block of the same size is then allocated and filled synchronously. The program's data is
// intact only if the freed block was not handed out again before the copy ended.
int deferred_free(std::size_t bytes) {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ReuseBuffers data(bytes);
  void* first = nullptr;
  CHECK_CUDA(cudaMalloc(&first, bytes));
  CHECK_CUDA(cudaLaunchHostFunc(stream, sleep_200ms, nullptr));
  CHECK_CUDA(cudaMemcpyAsync(first, data.late.data(), bytes, cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaFree(first));
  void* second = nullptr;
  CHECK_CUDA(cudaMalloc(&second, bytes));
  CHECK_CUDA(cudaMemcpy(second, data.mine.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(data.back.data(), second, bytes, cudaMemcpyDeviceToHost));
  std::printf("reused=%d\nintact=%d\n", second == first ? 1 : 0, data.intact() ? 1 : 0);
  CHECK_CUDA(cudaFree(second));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

// Stream-ordered reuse on one stream: a block freed on stream A behind a 200 ms host function is
// asked for again on A, written there in stream order and read back.
int same_stream(std::size_t bytes) {
  cudaStream_t a = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  ReuseBuffers data(bytes);
  void* first = nullptr;
  CHECK_CUDA(cudaMallocAsync(&first, bytes, a));
  CHECK_CUDA(cudaLaunchHostFunc(a, sleep_200ms, nullptr));
  CHECK_CUDA(cudaMemcpyAsync(first, data.late.data(), bytes, cudaMemcpyHostToDevice, a));
  CHECK_CUDA(cudaFreeAsync(first, a));
  void* again = nullptr;
  CHECK_CUDA(cudaMallocAsync(&again, bytes, a));
  CHECK_CUDA(cudaMemcpyAsync(again, data.mine.data(), bytes, cudaMemcpyHostToDevice, a));
  CHECK_CUDA(cudaMemcpyAsync(data.back.data(), again, bytes, cudaMemcpyDeviceToHost, a));
  CHECK_CUDA(cudaFreeAsync(again, a));
  CHECK_CUDA(cudaStreamSynchronize(a));
  std::printf("same_stream_reuse=%d\nintact=%d\n", again == first ? 1 : 0, data.intact() ? 1 : 0);
  CHECK_CUDA(cudaStreamDestroy(a));
  return 0;
}

// Stream-ordered: a block freed on stream A while a slow copy on A still writes it is reused at
// once on A (ordered after the copy), and never handed to stream B before the copy ended.
int async_streams(std::size_t bytes) {
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  ReuseBuffers data(bytes);

  void* first = nullptr;
  CHECK_CUDA(cudaMallocAsync(&first, bytes, a));
  CHECK_CUDA(cudaFreeAsync(first, a));
  void* again = nullptr;
  CHECK_CUDA(cudaMallocAsync(&again, bytes, a));
  std::printf("same_stream_reuse=%d\n", again == first ? 1 : 0);

  CHECK_CUDA(cudaLaunchHostFunc(a, sleep_200ms, nullptr));
  CHECK_CUDA(cudaMemcpyAsync(again, data.late.data(), bytes, cudaMemcpyHostToDevice, a));
  CHECK_CUDA(cudaFreeAsync(again, a));
  void* other = nullptr;
  CHECK_CUDA(cudaMallocAsync(&other, bytes, b));
  CHECK_CUDA(cudaMemcpyAsync(other, data.mine.data(), bytes, cudaMemcpyHostToDevice, b));
  CHECK_CUDA(cudaStreamSynchronize(b));
  CHECK_CUDA(cudaStreamSynchronize(a));
  CHECK_CUDA(cudaMemcpy(data.back.data(), other, bytes, cudaMemcpyDeviceToHost));
  std::printf("cross_stream_reused=%d\ncross_stream_intact=%d\n", other == again ? 1 : 0,
              data.intact() ? 1 : 0);

  // A synchronous allocation never gets a block whose stream-ordered free has not completed.
  CHECK_CUDA(cudaLaunchHostFunc(b, sleep_200ms, nullptr));
  CHECK_CUDA(cudaMemcpyAsync(other, data.late.data(), bytes, cudaMemcpyHostToDevice, b));
  CHECK_CUDA(cudaFreeAsync(other, b));
  void* sync_block = nullptr;
  CHECK_CUDA(cudaMalloc(&sync_block, bytes));
  CHECK_CUDA(cudaMemcpy(sync_block, data.mine.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaStreamSynchronize(b));
  CHECK_CUDA(cudaMemcpy(data.back.data(), sync_block, bytes, cudaMemcpyDeviceToHost));
  std::printf("sync_after_async_intact=%d\n", data.intact() ? 1 : 0);
  CHECK_CUDA(cudaFree(sync_block));
  CHECK_CUDA(cudaStreamDestroy(a));
  CHECK_CUDA(cudaStreamDestroy(b));
  return 0;
}

// Stream 0 is the legacy default stream (one stream shared by all threads) or, when built with
// CUDA_API_PER_THREAD_DEFAULT_STREAM, each thread's own default stream. A worker thread frees a block
// on its stream 0 behind a slow copy; the main thread then allocates and fills a block on its own
// stream 0. Shared legacy stream: the late copy is ordered before the new owner's work; per-thread
// streams: the block must not be handed out before the copy ended.
int default_streams(std::size_t bytes) {
  ReuseBuffers data(bytes);
  void* first = nullptr;
  cudaError_t worker_status = cudaSuccess;
  std::thread worker([&] {
    const auto step = [&worker_status](cudaError_t status) {
      if (worker_status == cudaSuccess) worker_status = status;
    };
    step(cudaMallocAsync(&first, bytes, 0));
    step(cudaLaunchHostFunc(0, sleep_200ms, nullptr));
    step(cudaMemcpyAsync(first, data.late.data(), bytes, cudaMemcpyHostToDevice, 0));
    step(cudaFreeAsync(first, 0));
  });
  worker.join();  // the worker's copy is still queued; its stream lives on
  CHECK_CUDA(worker_status);
  void* second = nullptr;
  CHECK_CUDA(cudaMallocAsync(&second, bytes, 0));
  CHECK_CUDA(cudaMemcpyAsync(second, data.mine.data(), bytes, cudaMemcpyHostToDevice, 0));
  CHECK_CUDA(cudaStreamSynchronize(0));
  CHECK_CUDA(cudaDeviceSynchronize());  // the worker's stream too
  CHECK_CUDA(cudaMemcpy(data.back.data(), second, bytes, cudaMemcpyDeviceToHost));
  std::printf("reused=%d\nintact=%d\n", second == first ? 1 : 0, data.intact() ? 1 : 0);
  CHECK_CUDA(cudaFreeAsync(second, 0));
  CHECK_CUDA(cudaStreamSynchronize(0));
  return 0;
}

// Asks the shim for its figures through the C API, found at run time (absent without the shim).
int stats(int operations) {
  const int status = churn(operations);
  void* keep = nullptr;
  CHECK_CUDA(cudaMalloc(&keep, 1 << 20));
  using GetStats = int (*)(int, gpumem_stats*);
  const auto get_stats = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "gpumem_get_stats"));
  if (get_stats == nullptr) {
    std::printf("stats=absent\n");
  } else {
    gpumem_stats figures{};
    std::printf("stats=%d\nother_device=%d\nnull_out=%d\n", get_stats(0, &figures), get_stats(7, &figures),
                get_stats(0, nullptr));
    get_stats(0, &figures);
    std::printf("allocs=%llu\nfrees=%llu\nbytes_limit=%llu\nbytes_in_use=%llu\nbytes_reserved=%llu\nregions=%llu\n"
                "driver_allocs=%llu\npeak_bytes_reserved=%llu\n",
                figures.allocs, figures.frees, figures.bytes_limit, figures.bytes_in_use,
                figures.bytes_reserved, figures.regions, figures.driver_allocs, figures.peak_bytes_reserved);
  }
  CHECK_CUDA(cudaFree(keep));
  return status;
}

// Holds `count` blocks of `bytes` at once (growth mode reserves regions as they fill), then frees
// them; `rounds` times.
int hold(int count, std::size_t bytes, int rounds = 1) {
  for (int round = 0; round < rounds; ++round) {
    std::vector<void*> live(static_cast<std::size_t>(count), nullptr);
    for (void*& p : live) CHECK_CUDA(cudaMalloc(&p, bytes));
    for (void* p : live) CHECK_CUDA(cudaFree(p));
  }
  std::printf("held=%d\nrounds=%d\n", count, rounds);
  return 0;
}

// Three blocks of `bytes`; the middle one freed and the arena trimmed (gpumem_trim, when loaded),
// then a block of the same size. Over a VMM-backed arena the trim unmaps the hole's memory and the
// new block, which lands in the hole, has it mapped again; the neighbours keep their data.
int vmm_holes(std::size_t bytes) {
  const auto trim = reinterpret_cast<long long (*)(int)>(dlsym(RTLD_DEFAULT, "gpumem_trim"));
  std::vector<unsigned char> first(bytes, 0xa1), third(bytes, 0xc3), fourth(bytes, 0xd4), back(bytes);
  void* blocks[4] = {};
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMalloc(&blocks[i], bytes));
  CHECK_CUDA(cudaMemcpy(blocks[0], first.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(blocks[2], third.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaFree(blocks[1]));
  std::printf("trimmed=%lld\n", trim != nullptr ? trim(0) : -1);
  CHECK_CUDA(cudaMalloc(&blocks[3], bytes));
  std::printf("reused_hole=%d\n", blocks[3] == blocks[1] ? 1 : 0);
  CHECK_CUDA(cudaMemcpy(blocks[3], fourth.data(), bytes, cudaMemcpyHostToDevice));
  bool intact = true;
  CHECK_CUDA(cudaMemcpy(back.data(), blocks[3], bytes, cudaMemcpyDeviceToHost));
  intact = intact && back == fourth;
  CHECK_CUDA(cudaMemcpy(back.data(), blocks[0], bytes, cudaMemcpyDeviceToHost));
  intact = intact && back == first;
  CHECK_CUDA(cudaMemcpy(back.data(), blocks[2], bytes, cudaMemcpyDeviceToHost));
  intact = intact && back == third;
  std::printf("intact=%d\n", intact ? 1 : 0);
  for (void* block : {blocks[0], blocks[2], blocks[3]}) CHECK_CUDA(cudaFree(block));
  return 0;
}

// Fills small regions, frees everything, then asks for one block that fits under the limit only if
// the free regions are given back first (garbage collection).
int garbage_collection(int count, std::size_t bytes, std::size_t big) {
  hold(count, bytes);
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, big);
  std::printf("big=%s\n", cudaGetErrorName(status));
  if (status == cudaSuccess) CHECK_CUDA(cudaFree(p));
  cudaGetLastError();
  return 0;
}

int mem_info() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("before_free=%zu\nbefore_total=%zu\n", free_bytes, total_bytes);
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, 64u << 20));
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("after_free=%zu\nafter_total=%zu\n", free_bytes, total_bytes);
  CHECK_CUDA(cudaFree(p));
  return 0;
}

int out_of_memory(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  std::printf("status=%s\n", cudaGetErrorName(status));
  cudaGetLastError();  // clear it, then show the device still works
  void* small = nullptr;
  CHECK_CUDA(cudaMalloc(&small, 4096));
  CHECK_CUDA(cudaFree(small));
  return 0;
}

int bad_frees() {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, 4096));
  void* q = nullptr;
  CHECK_CUDA(cudaMalloc(&q, 4096));
  std::printf("interior=%s\n", cudaGetErrorName(cudaFree(static_cast<char*>(q) + 256)));
  cudaGetLastError();
  CHECK_CUDA(cudaFree(p));
  std::printf("double=%s\n", cudaGetErrorName(cudaFree(p)));
  cudaGetLastError();
  int host_object = 0;
  std::printf("foreign=%s\n", cudaGetErrorName(cudaFree(&host_object)));
  cudaGetLastError();
  // The arena is still sound: q is still live and holds its data, and new blocks work.
  const std::uint32_t pattern = 0x12345678u;
  std::uint32_t back = 0;
  CHECK_CUDA(cudaMemcpy(q, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(&back, q, sizeof back, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(q));
  void* r = nullptr;
  CHECK_CUDA(cudaMalloc(&r, 8192));
  CHECK_CUDA(cudaFree(r));
  std::printf("after_ok=%d\n", back == pattern ? 1 : 0);
  return 0;
}

// Stream-ordered calls the driver refuses: cudaFreeAsync of cudaMalloc memory, and allocation or
// free on a destroyed stream. Each refused block stays allocated and usable.
int async_misuse() {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* synchronous = nullptr;
  CHECK_CUDA(cudaMalloc(&synchronous, 4096));
  std::printf("free_async_of_malloc=%s\n", cudaGetErrorName(cudaFreeAsync(synchronous, stream)));
  cudaGetLastError();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::uint32_t pattern = 0x5eed5eedu;
  std::uint32_t back = 0;
  CHECK_CUDA(cudaMemcpy(synchronous, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(&back, synchronous, sizeof back, cudaMemcpyDeviceToHost));
  std::printf("malloc_block_kept=%d\n", back == pattern ? 1 : 0);
  CHECK_CUDA(cudaFree(synchronous));

  void* ordered = nullptr;
  CHECK_CUDA(cudaMallocAsync(&ordered, 4096, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  void* refused = nullptr;
  std::printf("alloc_on_destroyed=%s\n", cudaGetErrorName(cudaMallocAsync(&refused, 4096, stream)));
  cudaGetLastError();
  std::printf("free_on_destroyed=%s\n", cudaGetErrorName(cudaFreeAsync(ordered, stream)));
  cudaGetLastError();
  // Still allocated: a free on a live stream takes it.
  std::printf("free_after=%s\n", cudaGetErrorName(cudaFreeAsync(ordered, nullptr)));
  CHECK_CUDA(cudaDeviceSynchronize());
  return 0;
}

// ROUNDS times: BYTES with cudaMalloc and 1 MiB with cudaMallocAsync, never freed, then
// cudaDeviceReset, which frees them: each round finds the whole device again.
int reset_leaks(int rounds, std::size_t bytes) {
  for (int round = 0; round < rounds; ++round) {
    void* leaked = nullptr;
    void* leaked_ordered = nullptr;
    const cudaError_t status = cudaMalloc(&leaked, bytes);
    if (status != cudaSuccess) {
      std::printf("failed_round=%d\nstatus=%s\n", round, cudaGetErrorName(status));
      return 1;
    }
    CHECK_CUDA(cudaMallocAsync(&leaked_ordered, 1 << 20, nullptr));
    CHECK_CUDA(cudaDeviceReset());
  }
  std::printf("rounds=%d\n", rounds);
  return 0;
}

int pitch() {
  void* p = nullptr;
  std::size_t row = 0;
  CHECK_CUDA(cudaMallocPitch(&p, &row, 1000, 10));
  std::printf("pitch=%zu\n", row);
  std::vector<unsigned char> line(1000, 0x3C);
  std::vector<unsigned char> back(1000, 0);
  CHECK_CUDA(cudaMemcpy(static_cast<char*>(p) + 9 * row, line.data(), line.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(back.data(), static_cast<char*>(p) + 9 * row, back.size(), cudaMemcpyDeviceToHost));
  std::printf("last_row_ok=%d\n", back == line ? 1 : 0);
  CHECK_CUDA(cudaFree(p));
  return 0;
}

// Blocks of sizes that round to odd multiples of 256 bytes, plain, pitched and stream-ordered: CUDA
// documents that memory from cudaMalloc binds to a texture without an offset, so each must start at
// a multiple of the device's texture alignment, and a texture object over it must be created.
int texture_alignment() {
  int alignment = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&alignment, cudaDevAttrTextureAlignment, 0));
  std::printf("texture_alignment=%d\n", alignment);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t i = 0; i < 48; ++i) {
    void* p = nullptr;
    const std::size_t bytes = 100 + 37 * i;
    if (i % 3 == 2) {
      CHECK_CUDA(cudaMallocAsync(&p, bytes, nullptr));
    } else {
      CHECK_CUDA(cudaMalloc(&p, bytes));
    }
    blocks.emplace_back(p, bytes);
    std::size_t row = 0;
    CHECK_CUDA(cudaMallocPitch(&p, &row, bytes, 2));
    blocks.emplace_back(p, row * 2);
  }
  int misaligned = 0;
  int texture_failures = 0;
  for (const auto& [pointer, bytes] : blocks) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % static_cast<std::uintptr_t>(alignment) != 0) ++misaligned;
    cudaResourceDesc resource{};
    resource.resType = cudaResourceTypeLinear;
    resource.res.linear.devPtr = pointer;
    resource.res.linear.desc = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
    resource.res.linear.sizeInBytes = bytes;
    cudaTextureDesc texture{};
    cudaTextureObject_t object = 0;
    if (cudaCreateTextureObject(&object, &resource, &texture, nullptr) != cudaSuccess) {
      ++texture_failures;
      continue;
    }
    CHECK_CUDA(cudaDestroyTextureObject(object));
  }
  std::printf("misaligned=%d\ntexture_failures=%d\n", misaligned, texture_failures);
  for (const auto& block : blocks) CHECK_CUDA(cudaFree(block.first));
  return 0;
}

int two_devices() {
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  std::printf("devices=%d\n", count);
  for (int device = 0; device < count; ++device) {
    CHECK_CUDA(cudaSetDevice(device));
    for (int i = 0; i < 100; ++i) {
      void* p = nullptr;
      CHECK_CUDA(cudaMalloc(&p, 1u << 20));
      CHECK_CUDA(cudaFree(p));
    }
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    std::printf("device%d_total=%zu\n", device, total_bytes);
  }
  return 0;
}

// `count` threads allocate, check and free at once; with `async` each uses its own stream and the
// stream-ordered calls (blocks freed on one thread's stream are candidates for every other thread).
int threads(int count, int operations, bool async) {
  std::vector<std::thread> workers;
  std::vector<int> failures(static_cast<std::size_t>(count), 0);
  for (int t = 0; t < count; ++t) {
    workers.emplace_back([t, operations, async, &failures] {
      int& failed = failures[static_cast<std::size_t>(t)];
      cudaStream_t stream = nullptr;
      if (async && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) ++failed;
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> live;
      for (int i = 0; i < operations; ++i) {
        if (live.size() < 16 && (live.empty() || rng() % 2 == 0)) {
          void* p = nullptr;
          const std::size_t bytes = 256 + rng() % 65536;
          if ((async ? cudaMallocAsync(&p, bytes, stream) : cudaMalloc(&p, bytes)) != cudaSuccess) {
            ++failed;
            continue;
          }
          const std::uint32_t tag = 0xA0000000u + static_cast<std::uint32_t>(t * 100000 + i);
          std::uint32_t back = 0;
          if (async) {
            cudaMemcpyAsync(p, &tag, sizeof tag, cudaMemcpyHostToDevice, stream);
            cudaMemcpyAsync(&back, p, sizeof back, cudaMemcpyDeviceToHost, stream);
            cudaStreamSynchronize(stream);
          } else {
            cudaMemcpy(p, &tag, sizeof tag, cudaMemcpyHostToDevice);
            cudaMemcpy(&back, p, sizeof back, cudaMemcpyDeviceToHost);
          }
          if (back != tag) ++failed;
          live.push_back(p);
        } else {
          if ((async ? cudaFreeAsync(live.back(), stream) : cudaFree(live.back())) != cudaSuccess) ++failed;
          live.pop_back();
        }
      }
      for (void* p : live) async ? cudaFreeAsync(p, stream) : cudaFree(p);
      if (async) {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  int total = 0;
  for (int f : failures) total += f;
  std::printf("thread_failures=%d\n", total);
  return 0;
}

// A stream-ordered allocation from the device's default pool through the driver entry point the
// program's build asks for, as runtimes and libraries get them: cuGetProcAddress_v2 from
// libcuda.so.1, with per-thread default stream semantics in the per-thread build
// (cuMemAllocFromPoolAsync_ptsz, stream 0 the thread's own stream).
int driver_pool(std::size_t bytes) {
  CHECK_CUDA(cudaFree(nullptr));  // makes the device's primary context current
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  const auto get_proc = driver == nullptr ? nullptr
      : reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) return 1;
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
  constexpr cuuint64_t kFlags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
#else
  constexpr cuuint64_t kFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
#endif
  void* entry = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get_proc("cuMemAllocFromPoolAsync", &entry, 13000, kFlags, &found) != CUDA_SUCCESS || entry == nullptr) return 1;
  Dl_info info{};
  std::printf("entry=%s\n", dladdr(entry, &info) != 0 && info.dli_sname != nullptr ? info.dli_sname : "?");
  cudaMemPool_t pool = nullptr;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  CUdeviceptr block = 0;
  const CUresult allocated = reinterpret_cast<PFN_cuMemAllocFromPoolAsync_v11020>(entry)(
      &block, bytes, reinterpret_cast<CUmemoryPool>(pool), nullptr);
  if (allocated != CUDA_SUCCESS) return 1;
  void* p = reinterpret_cast<void*>(block);
  const std::uint32_t pattern = 0x9001F00Du;
  std::uint32_t back = 0;
  CHECK_CUDA(cudaMemcpyAsync(p, &pattern, sizeof pattern, cudaMemcpyHostToDevice, 0));
  CHECK_CUDA(cudaMemcpyAsync(&back, p, sizeof back, cudaMemcpyDeviceToHost, 0));
  CHECK_CUDA(cudaFreeAsync(p, 0));
  CHECK_CUDA(cudaStreamSynchronize(0));
  std::printf("pool_data_ok=%d\n", back == pattern ? 1 : 0);
  return 0;
}

// gpumem_get_stats(0, ...) when the shim is loaded (0: it manages device 0, -1: it does not), else
// "absent".
std::string stats_of_device_0() {
  using GetStats = int (*)(int, gpumem_stats*);
  const auto get_stats = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "gpumem_get_stats"));
  if (get_stats == nullptr) return "absent";
  gpumem_stats figures{};
  return std::to_string(get_stats(0, &figures));
}

// The parent has an arena; the child starts fresh (no arena of its own until it allocates; then it
// allocates, or fails cleanly); the parent goes on.
int fork_child() {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, 1u << 20));
  std::printf("parent_stats=%s\n", stats_of_device_0().c_str());
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    std::printf("child_stats=%s\n", stats_of_device_0().c_str());
    void* q = nullptr;
    const cudaError_t status = cudaMalloc(&q, 1u << 20);
    std::printf("child_status=%s\n", cudaGetErrorName(status));
    std::fflush(stdout);
    _exit(0);
  }
  void* r = nullptr;
  CHECK_CUDA(cudaMalloc(&r, 1u << 20));
  const std::uint32_t pattern = 0xFEEDBEEFu;
  std::uint32_t back = 0;
  CHECK_CUDA(cudaMemcpy(r, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(&back, r, sizeof back, cudaMemcpyDeviceToHost));
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  std::printf("child_exit=%d\nparent_ok=%d\n", WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus),
              back == pattern ? 1 : 0);
  CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFree(r));
  return 0;
}

// The shim's figures for device 0 (all zero without the shim): compared before and after a capture.
gpumem_stats shim_figures() {
  using GetStats = int (*)(int, gpumem_stats*);
  const auto get_stats = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "gpumem_get_stats"));
  gpumem_stats figures{};
  if (get_stats != nullptr && get_stats(0, &figures) != 0) figures = gpumem_stats{};
  return figures;
}

// Stream-ordered allocation while a non-default stream is captured into a graph: the allocations
// are memory-allocation nodes the graph owns, so they must reach the driver (a memory manager
// serving them would hand out memory the graph does not know). One is freed inside the capture, one
// stays the graph's until cudaGraphDestroy. Then the legacy stream is used while a blocking stream
// captures, which the driver refuses (an implicit dependency on the capture). Prints what the
// program saw (the same with and without the shim) and the shim's figure deltas (`shim_*`).
int graph_capture(std::size_t bytes) {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* ordinary = nullptr;  // the memory manager is set up and holds something
  CHECK_CUDA(cudaMallocAsync(&ordinary, bytes, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const gpumem_stats before = shim_figures();

  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK_CUDA(cudaStreamIsCapturing(stream, &status));
  std::printf("capturing=%d\n", status == cudaStreamCaptureStatusActive ? 1 : 0);
  void* freed_in_graph = nullptr;
  void* kept_by_graph = nullptr;
  CHECK_CUDA(cudaMallocAsync(&freed_in_graph, bytes, stream));
  CHECK_CUDA(cudaMallocAsync(&kept_by_graph, bytes, stream));
  CHECK_CUDA(cudaMemsetAsync(freed_in_graph, 0x5A, bytes, stream));
  cudaPointerAttributes attributes{};
  CHECK_CUDA(cudaPointerGetAttributes(&attributes, kept_by_graph));
  std::printf("graph_memory_type=%d\n", static_cast<int>(attributes.type));
  std::printf("free_in_capture=%s\n", cudaGetErrorName(cudaFreeAsync(freed_in_graph, stream)));
  // A free node takes graph allocations only: memory allocated before the capture is refused.
  std::printf("free_outside_memory_in_capture=%s\n", cudaGetErrorName(cudaFreeAsync(ordinary, stream)));
  cudaGetLastError();
  const gpumem_stats during = shim_figures();
  cudaGraph_t graph = nullptr;
  std::printf("end_capture=%s\n", cudaGetErrorName(cudaStreamEndCapture(stream, &graph)));
  std::printf("graph=%d\n", graph != nullptr ? 1 : 0);
  CHECK_CUDA(cudaStreamIsCapturing(stream, &status));
  std::printf("capturing_after=%d\n", status == cudaStreamCaptureStatusNone ? 0 : 1);
  if (graph != nullptr) CHECK_CUDA(cudaGraphDestroy(graph));
  std::printf("shim_in_use_delta=%lld\nshim_passed_through_delta=%llu\nshim_fenced_delta=%lld\n",
              static_cast<long long>(during.bytes_in_use) - static_cast<long long>(before.bytes_in_use),
              during.passed_through - before.passed_through,
              static_cast<long long>(during.bytes_fenced) - static_cast<long long>(before.bytes_fenced));

  // The legacy default stream while a blocking stream captures.
  cudaStream_t blocking = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault));
  CHECK_CUDA(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
  void* on_legacy = nullptr;
  const cudaError_t legacy = cudaMallocAsync(&on_legacy, bytes, 0);
  std::printf("legacy_alloc=%s\n", cudaGetErrorName(legacy));
  if (legacy == cudaSuccess) CHECK_CUDA(cudaFreeAsync(on_legacy, 0));
  cudaGraph_t blocking_graph = nullptr;
  std::printf("end_blocking=%s\n", cudaGetErrorName(cudaStreamEndCapture(blocking, &blocking_graph)));
  if (blocking_graph != nullptr) CHECK_CUDA(cudaGraphDestroy(blocking_graph));
  cudaGetLastError();

  // Ordinary stream-ordered allocation goes on as before.
  void* after = nullptr;
  CHECK_CUDA(cudaMallocAsync(&after, bytes, stream));
  const std::uint32_t pattern = 0xCAFEF00Du;
  std::uint32_t back = 0;
  CHECK_CUDA(cudaMemcpyAsync(after, &pattern, sizeof pattern, cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemcpyAsync(&back, after, sizeof back, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaFreeAsync(after, stream));
  CHECK_CUDA(cudaFreeAsync(ordinary, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::printf("after_data_ok=%d\n", back == pattern ? 1 : 0);
  CHECK_CUDA(cudaStreamDestroy(blocking));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

// A relaxed-mode capture lets the program call cudaMalloc and cudaFree meanwhile; the shim must not
// end the capture by synchronising on its own. Four blocks freed just before the capture are still
// fenced (deferred frees wait for a synchronisation) when a larger block is asked for inside it.
int capture_alloc(std::size_t bytes) {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* blocks[4] = {};
  for (void*& block : blocks) CHECK_CUDA(cudaMalloc(&block, bytes));
  for (void* block : blocks) CHECK_CUDA(cudaFree(block));
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  void* big = nullptr;
  const cudaError_t allocated = cudaMalloc(&big, 3 * bytes);
  std::printf("malloc_in_capture=%s\n", cudaGetErrorName(allocated));
  if (allocated == cudaSuccess) std::printf("free_in_capture=%s\n", cudaGetErrorName(cudaFree(big)));
  cudaGraph_t graph = nullptr;
  std::printf("end_capture=%s\n", cudaGetErrorName(cudaStreamEndCapture(stream, &graph)));
  if (graph != nullptr) CHECK_CUDA(cudaGraphDestroy(graph));
  cudaGetLastError();
  // Afterwards memory is served and holds data as usual.
  std::vector<std::uint32_t> pattern(bytes / sizeof(std::uint32_t), 0x600DF00Du), back(pattern.size());
  void* after = nullptr;
  CHECK_CUDA(cudaMalloc(&after, bytes));
  CHECK_CUDA(cudaMemcpy(after, pattern.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(back.data(), after, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(after));
  std::printf("after_data_ok=%d\n", back == pattern ? 1 : 0);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const mem_scenarios::Arguments args{argc, argv};
  const std::string scenario = args.scenario();
  if (scenario == "churn") return churn(static_cast<int>(args.number(2, 10000)));
  if (scenario == "deferred_free") return deferred_free(static_cast<std::size_t>(args.number(2, 1 << 20)));
  if (scenario == "default_streams") return default_streams(static_cast<std::size_t>(args.number(2, 1 << 20)));
  if (scenario == "stats") return stats(static_cast<int>(args.number(2, 1000)));
  if (scenario == "capture_alloc") return capture_alloc(static_cast<std::size_t>(args.number(2, 1 << 20)));
  if (scenario == "same_stream") return same_stream(static_cast<std::size_t>(args.number(2, 1 << 20)));
  if (scenario == "async_streams") return async_streams(static_cast<std::size_t>(args.number(2, 1 << 20)));
  if (scenario == "info") return mem_info();
  if (scenario == "vmm_holes") return vmm_holes(static_cast<std::size_t>(args.number(2, 4 << 20)));
  if (scenario == "hold") {
    return hold(static_cast<int>(args.number(2, 40)), static_cast<std::size_t>(args.number(3, 1 << 20)),
                static_cast<int>(args.number(4, 1)));
  }
  if (scenario == "gc") {
    return garbage_collection(static_cast<int>(args.number(2, 30)), static_cast<std::size_t>(args.number(3, 1 << 20)),
                              static_cast<std::size_t>(args.number(4, 48 << 20)));
  }
  if (scenario == "oom") return out_of_memory(static_cast<std::size_t>(args.number(2, 1LL << 40)));
  if (scenario == "bad_frees") return bad_frees();
  if (scenario == "pitch") return pitch();
  if (scenario == "texture_alignment") return texture_alignment();
  if (scenario == "async_misuse") return async_misuse();
  if (scenario == "reset_leaks") {
    return reset_leaks(static_cast<int>(args.number(2, 6)), static_cast<std::size_t>(args.number(3, 4LL << 30)));
  }
  if (scenario == "two_devices") return two_devices();
  if (scenario == "threads" || scenario == "async_threads") {
    return threads(static_cast<int>(args.number(2, 8)), static_cast<int>(args.number(3, 2000)),
                   scenario == "async_threads");
  }
  if (scenario == "fork") return fork_child();
  if (scenario == "graph_capture") return graph_capture(static_cast<std::size_t>(args.number(2, 1 << 20)));
  if (scenario == "driver_pool") return driver_pool(static_cast<std::size_t>(args.number(2, 1 << 20)));
  std::fprintf(stderr, "usage: %s SCENARIO [ARGS]\n", argv[0]);
  return 2;
}
