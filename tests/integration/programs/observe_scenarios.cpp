// Observability scenarios through the CUDA runtime, run under the shim with GPUMEM_STATS,
// GPUMEM_STATS_FILE and GPUMEM_TRACE by test_observe.py. Prints `key=value` lines; exits 0 when every
// call behaved as expected (the shim's outputs are checked by the test).
//
//   churn N [sync]   N random allocations and frees, synchronous and on two streams (sync: only
//                    synchronous ones); leaves some live
//   exit_thread      a second thread calls exit() while the main thread keeps allocating
//   return_streams   returns from main with stream-ordered work and allocations outstanding
//   refuse N BYTES   asks N times for BYTES (more than the limit): every one refused
//   hold N BYTES     N blocks of BYTES, all held at once, then freed
//   fatal SIGNAL     allocates, then dies of SIGNAL (abort, segv or term)
//   api              the C API through dlsym: path stats, trim, dump
//   fork             allocates, forks a child that allocates and exits, waits for it
//   exec PROGRAM...  allocates and frees (the shim's log, trace are open by then), then execs PROGRAM
//   churn_signals N  churn N, while a timer raises SIGALRM every 50 us (its handler installed
//                    without SA_RESTART, so a write the shim makes can be interrupted)
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpumem.h"
#include "runtime_check.h"

namespace {

int churn(int operations, bool synchronous_only) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size_of(1, 4 << 20);
  cudaStream_t streams[2];
  for (cudaStream_t& stream : streams) CHECK_CUDA(cudaStreamCreate(&stream));
  struct Block {
    void* ptr;
    cudaStream_t stream;  // null: synchronous
  };
  std::vector<Block> live;
  int allocs = 0, frees = 0;
  for (int i = 0; i < operations; ++i) {
    if (live.size() < 8 || (rng() % 3 != 0 && live.size() < 200)) {
      const std::size_t bytes = size_of(rng);
      const int kind = synchronous_only ? 0 : static_cast<int>(rng() % 3);
      Block block{nullptr, kind == 0 ? nullptr : streams[kind - 1]};
      if (block.stream == nullptr) {
        CHECK_CUDA(cudaMalloc(&block.ptr, bytes));
      } else {
        CHECK_CUDA(cudaMallocAsync(&block.ptr, bytes, block.stream));
      }
      live.push_back(block);
      ++allocs;
    } else {
      const std::size_t index = rng() % live.size();
      const Block block = live[index];
      live[index] = live.back();
      live.pop_back();
      if (block.stream == nullptr) {
        CHECK_CUDA(cudaFree(block.ptr));
      } else {
        CHECK_CUDA(cudaFreeAsync(block.ptr, block.stream));
      }
      ++frees;
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("allocs=%d\nfrees=%d\nlive=%zu\n", allocs, frees, live.size());
  return 0;
}

int exit_from_thread() {
  std::atomic<int> allocations{0};
  std::thread exiter([&] {
    while (allocations.load() < 200) std::this_thread::yield();
    std::fflush(stdout);
    std::exit(0);  // while the main thread is still allocating
  });
  exiter.detach();
  for (;;) {
    void* ptr = nullptr;
    CHECK_CUDA(cudaMalloc(&ptr, 4096));
    CHECK_CUDA(cudaFree(ptr));
    allocations.fetch_add(1);
  }
}

int return_with_streams() {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  for (int i = 0; i < 16; ++i) {
    void* ptr = nullptr;
    CHECK_CUDA(cudaMallocAsync(&ptr, 1 << 20, stream));
    if (i % 2 == 0) CHECK_CUDA(cudaFreeAsync(ptr, stream));
  }
  std::printf("returned=1\n");
  return 0;  // no synchronisation: the runtime's exit handlers and the shim's run with work queued
}

int hold(int count, std::size_t bytes) {
  std::vector<void*> blocks(static_cast<std::size_t>(count));
  for (void*& block : blocks) CHECK_CUDA(cudaMalloc(&block, bytes));
  for (void* block : blocks) CHECK_CUDA(cudaFree(block));
  return 0;
}

int refuse(int attempts, std::size_t bytes) {
  void* keep = nullptr;
  CHECK_CUDA(cudaMalloc(&keep, 1 << 20));
  int refused = 0;
  for (int i = 0; i < attempts; ++i) {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      ++refused;
    } else {
      std::fprintf(stderr, "attempt %d: %s\n", i, cudaGetErrorName(status));
      return 1;
    }
  }
  std::printf("refused=%d\n", refused);
  return 0;
}

int die(const char* how) {
  for (int i = 0; i < 10; ++i) {
    void* ptr = nullptr;
    CHECK_CUDA(cudaMalloc(&ptr, 1 << 16));
    if (i % 2 == 1) CHECK_CUDA(cudaFree(ptr));
  }
  std::printf("dying=%s\n", how);
  std::fflush(stdout);
  if (std::strcmp(how, "abort") == 0) std::abort();
  if (std::strcmp(how, "segv") == 0) std::raise(SIGSEGV);
  if (std::strcmp(how, "term") == 0) std::raise(SIGTERM);
  return 4;
}

template <typename F>
F find(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

int api() {
  auto get_path_stats = find<int (*)(int, int, gpumem_path_stats*)>("gpumem_get_path_stats");
  auto trim = find<long long (*)(int)>("gpumem_trim");
  auto dump = find<int (*)(int, FILE*)>("gpumem_dump");
  std::printf("found=%d\n", get_path_stats != nullptr && trim != nullptr && dump != nullptr ? 1 : 0);
  if (get_path_stats == nullptr || trim == nullptr || dump == nullptr) return 0;  // not under the shim
  std::printf("trim_before_cuda=%lld\n", trim(0));
  std::vector<void*> blocks(8);
  for (void*& block : blocks) CHECK_CUDA(cudaMalloc(&block, 3 << 20));
  gpumem_path_stats arena{};
  std::printf("path_stats_result=%d\n", get_path_stats(0, GPUMEM_PATH_ARENA, &arena));
  std::printf("arena_allocs=%llu\narena_bytes=%llu\n", arena.allocs, arena.bytes);
  std::printf("bad_path_result=%d\n", get_path_stats(0, GPUMEM_PATH_COUNT, &arena));
  std::printf("bad_device_result=%d\n", get_path_stats(7, GPUMEM_PATH_ARENA, &arena));
  std::printf("dump_null_result=%d\n", dump(0, nullptr));
  std::printf("--- dump\n");
  std::fflush(stdout);
  std::printf("dump_result=%d\n", dump(0, stdout));
  for (void* block : blocks) CHECK_CUDA(cudaFree(block));
  std::printf("trim_result=%lld\n", trim(0));
  std::printf("trim_bad_device=%lld\n", trim(7));
  void* again = nullptr;
  CHECK_CUDA(cudaMalloc(&again, 1 << 20));  // the arena grows again after a trim
  CHECK_CUDA(cudaFree(again));
  std::printf("after_trim_alloc=1\n");
  return 0;
}

int fork_child() {
  void* parent_block = nullptr;
  CHECK_CUDA(cudaMalloc(&parent_block, 1 << 20));
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    // A forked child cannot use its parent's CUDA state; it only exits (running exit handlers).
    std::printf("child=%d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    std::exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_CUDA(cudaFree(parent_block));
  std::printf("child_status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

volatile sig_atomic_t g_alarms = 0;

int churn_with_signals(int operations) {
  struct sigaction action {};
  action.sa_handler = [](int) { g_alarms = g_alarms + 1; };
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: interrupted system calls fail with EINTR
  sigaction(SIGALRM, &action, nullptr);
  itimerval every{{0, 50}, {0, 50}};
  setitimer(ITIMER_REAL, &every, nullptr);
  const int status = churn(operations, false);
  itimerval stop{};
  setitimer(ITIMER_REAL, &stop, nullptr);
  std::printf("signals=%d\n", static_cast<int>(g_alarms));
  return status;
}

int allocate_then_exec(char** command) {
  void* block = nullptr;
  CHECK_CUDA(cudaMalloc(&block, 1 << 20));
  CHECK_CUDA(cudaFree(block));
  std::fflush(stdout);
  execvp(command[0], command);
  std::printf("exec_failed=%s\n", std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "churn" && argc > 2) return churn(std::atoi(argv[2]), argc > 3 && std::strcmp(argv[3], "sync") == 0);
  if (scenario == "exit_thread") return exit_from_thread();
  if (scenario == "return_streams") return return_with_streams();
  if (scenario == "refuse" && argc > 3) return refuse(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10));
  if (scenario == "hold" && argc > 3) return hold(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10));
  if (scenario == "fatal" && argc > 2) return die(argv[2]);
  if (scenario == "api") return api();
  if (scenario == "fork") return fork_child();
  if (scenario == "exec" && argc > 2) return allocate_then_exec(argv + 2);
  if (scenario == "churn_signals" && argc > 2) return churn_with_signals(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: %s churn N | exit_thread | return_streams | refuse N BYTES | hold N BYTES | fatal HOW | api | fork\n",
               argv[0]);
  return 2;
}
