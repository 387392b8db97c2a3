// A process sharing a GPU with others (tests/integration/test_share.py): runs the steps its arguments
// name, in order, over the driver API, and says what happened as key=value lines. Each process is
// shaped like a framework by its environment (bfc preallocating like JAX, cuda_async like TensorFlow,
// bfc growing like PyTorch); the steps are the same.
//
//   alloc:<MiB>x<n>     n blocks of MiB; a refusal ends the program (status 3, "refused_at=<MiB live>");
//                       reports the mean time of one ("alloc_ns")
//   free:<n>            frees the n blocks allocated last
//   drop:<i>            frees the i-th of the blocks it holds (0: the first allocated), leaving a hole
//   churn:<ms>          frees and allocates again the blocks it holds, one by one, for that long
//   churn:@<path>       the same until the file exists (at most 60 s)
//   pairs:<n>           n times: frees the last block and allocates it again, without pausing; reports
//                       the mean time of a pair ("pair_ns")
//   greedy:<MiB>:<ms>   allocates blocks of MiB until refused, and keeps trying (freeing one block now
//                       and then) for that long (or until the file exists: greedy:<MiB>:@<path>);
//                       reports the most it held and the refusals
//   fill:<MiB>          blocks of MiB until one is refused; reports how much it holds ("filled")
//   timed:<MiB>         one block; reports how long it took ("took_ms"), whether it came, and when
//                       it was asked for ("asked_at_ns", on the monotonic clock every process shares)
//   info                cuMemGetInfo's free and total, cuDeviceTotalMem and NVML's total; "agree=1" when
//                       all three totals were the same at once (read again while another process
//                       changes the shares)
//   reset               resets the device's primary context: every block goes with it, and the
//                       context is made again
//   wait:<path>         waits (at most 60 s) for the file to exist; touch:<path> makes it
//   sleep:<ms>          sleeps; pause waits for a signal; say:<text> prints it
//   async_alloc:<MiB>x<n>  n blocks of MiB with cuMemAllocAsync on the program's stream
//   async_free:<n>      frees the n blocks allocated last with cuMemFreeAsync on that stream
//   compute:<ms>        work on the program's stream that takes that long (a host function that
//                       sleeps, as a kernel would run), then waits for the stream: the program is
//                       busy, making no allocation; reports how long it took ("compute_ms")
//   train:<ms>          the same in steps of 10 ms, each waited for (a training loop that allocates
//                       nothing), for that long; reports how long it took ("compute_ms")
//   sync                cuCtxSynchronize
//   context             creates a context of its own on the device and makes it current (the blocks
//                       allocated from then on are that context's)
//   primary             makes the primary context current again
//   thread_alloc:<MiB>  one block allocated by another thread, started now; `join` waits for it and
//                       reports how long the allocation took ("thread_took_ms"), whether it came, and
//                       when it ended ("thread_ended_at_ns", on the same clock as asked_at_ns)
//   fork:<n>            forks n children one after the other; each allocates and frees a block on a
//                       fresh driver and exits; reports how many ended well ("forked_ok")
//   exit                ends the program at once with exit(0), its blocks still allocated
#include <cuda.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "driver_check.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Block {
  CUdeviceptr ptr;
  std::size_t bytes;
};
std::vector<Block> g_blocks;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// steady_clock is CLOCK_MONOTONIC here: one clock for every process of the machine, so that a test can
// order what two processes did.
long long ns_on_shared_clock(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

std::size_t live_bytes() {
  std::size_t live = 0;
  for (const Block& block : g_blocks) live += block.bytes;
  return live;
}

CUresult allocate(std::size_t bytes) {
  CUdeviceptr ptr = 0;
  const CUresult status = cuMemAlloc(&ptr, bytes);
  if (status == CUDA_SUCCESS) g_blocks.push_back(Block{ptr, bytes});
  return status;
}

void free_last() {
  CHECK_CU(cuMemFree(g_blocks.back().ptr));
  g_blocks.pop_back();
}

// NVML's total for device 0 through the program's own NVML (the shim answers with the budget); 0
// when there is no NVML to ask.
unsigned long long nvml_device_total() {
  struct Memory {
    unsigned long long total, free, used;
  };
  static void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) return 0;
  using Init = int (*)();
  using Handle = int (*)(unsigned int, void**);
  using Info = int (*)(void*, Memory*);
  static const bool initialised = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"))() == 0;
  const auto handle_of = reinterpret_cast<Handle>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  const auto info = reinterpret_cast<Info>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  void* device = nullptr;
  Memory memory{};
  if (!initialised || handle_of == nullptr || info == nullptr || handle_of(0, &device) != 0 || info(device, &memory) != 0) {
    return 0;
  }
  return memory.total;
}

// The program's own stream (created at its first use), for the stream-ordered steps.
CUstream program_stream() {
  static CUstream stream = [] {
    CUstream made = nullptr;
    CHECK_CU(cuStreamCreate(&made, CU_STREAM_NON_BLOCKING));
    return made;
  }();
  return stream;
}

void CUDA_CB sleep_on_stream(void* milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<std::uintptr_t>(milliseconds)));
}

// A child of fork:<n>: its own driver, one block, and out without the parent's exit handlers.
[[noreturn]] void forked_child() {
  CUcontext context = nullptr;
  CUdeviceptr ptr = 0;
  const auto ok = [](const char* call, CUresult status) {
    if (status != CUDA_SUCCESS) std::fprintf(stderr, "share_worker: forked child: %s: %s\n", call, cu_error_name(status));
    return status == CUDA_SUCCESS;
  };
  const bool ended_well = ok("cuInit", cuInit(0)) && ok("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&context, 0)) &&
                          ok("cuCtxSetCurrent", cuCtxSetCurrent(context)) && ok("cuMemAlloc", cuMemAlloc(&ptr, 4 * kMiB)) &&
                          ok("cuMemFree", cuMemFree(ptr));
  _exit(ended_well ? 0 : 5);
}

[[noreturn]] void refused(std::size_t bytes, CUresult status) {
  std::printf("refused_bytes=%zu\nrefused_at=%zu\nerror=%s\nresult=oom\n", bytes, live_bytes() / kMiB,
              cu_error_name(status));
  std::fflush(stdout);
  std::exit(3);
}

void wait_for(const std::string& path) {
  const auto start = Clock::now();
  struct stat st {};
  while (stat(path.c_str(), &st) != 0) {
    if (ms_since(start) > 60000) {
      std::printf("result=timeout waiting for %s\n", path.c_str());
      std::exit(4);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// For steps that last "<ms>" or "@<path>": whether to go on (the time not up, the file not there;
// at most 60 s).
class Until {
 public:
  explicit Until(const std::string& arg)
      : start_(Clock::now()), path_(!arg.empty() && arg[0] == '@' ? arg.substr(1) : std::string()),
        duration_ms_(path_.empty() ? std::strtod(arg.c_str(), nullptr) : 60000.0) {}
  bool go_on() const {
    struct stat st {};
    return ms_since(start_) < duration_ms_ && !(!path_.empty() && stat(path_.c_str(), &st) == 0);
  }

 private:
  Clock::time_point start_;
  std::string path_;
  double duration_ms_;
};

void greedy(std::size_t bytes, const Until& until) {
  std::size_t most = 0;
  unsigned long refusals = 0;
  unsigned long frees = 0;
  while (until.go_on()) {
    if (allocate(bytes) == CUDA_SUCCESS) {
      most = std::max(most, live_bytes());
      continue;
    }
    ++refusals;
    // Refused: now and then it lets one block go and tries again, as a program retrying would.
    if (!g_blocks.empty() && refusals % 4 == 0) {
      free_last();
      ++frees;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::printf("greedy_most=%zu\ngreedy_refusals=%lu\ngreedy_frees=%lu\n", most, refusals, frees);
}

}  // namespace

int main(int argc, char** argv) {
  CHECK_CU(cuInit(0));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, 0));
  CHECK_CU(cuCtxSetCurrent(context));
  std::thread allocating;  // thread_alloc's
  double thread_took_ms = 0;
  long long thread_ended_at_ns = 0;
  CUresult thread_status = CUDA_SUCCESS;
  for (int i = 1; i < argc; ++i) {
    const std::string step = argv[i];
    const std::string arg = step.substr(step.find(':') + 1);
    if (step.rfind("alloc:", 0) == 0) {
      const std::size_t mib = std::strtoull(arg.c_str(), nullptr, 10);
      const std::size_t count = std::strtoull(arg.c_str() + arg.find('x') + 1, nullptr, 10);
      const auto start = Clock::now();
      for (std::size_t n = 0; n < count; ++n) {
        if (const CUresult status = allocate(mib * kMiB); status != CUDA_SUCCESS) refused(mib * kMiB, status);
      }
      std::printf("alloc_ns=%.1f\n", count > 0 ? ms_since(start) * 1e6 / static_cast<double>(count) : 0.0);
    } else if (step.rfind("free:", 0) == 0) {
      for (std::size_t n = std::strtoull(arg.c_str(), nullptr, 10); n > 0 && !g_blocks.empty(); --n) free_last();
    } else if (step.rfind("drop:", 0) == 0) {
      const std::size_t at = std::strtoull(arg.c_str(), nullptr, 10);
      if (at < g_blocks.size()) {
        CHECK_CU(cuMemFree(g_blocks[at].ptr));
        g_blocks.erase(g_blocks.begin() + static_cast<std::ptrdiff_t>(at));
      }
    } else if (step.rfind("churn:", 0) == 0) {
      const Until until(arg);
      unsigned long rounds = 0;
      for (std::size_t k = 0; until.go_on() && !g_blocks.empty(); ++k, ++rounds) {
        const std::size_t at = k % g_blocks.size();
        const Block block = g_blocks[at];
        CHECK_CU(cuMemFree(block.ptr));
        CUdeviceptr ptr = 0;
        if (const CUresult status = cuMemAlloc(&ptr, block.bytes); status != CUDA_SUCCESS) {
          g_blocks.erase(g_blocks.begin() + static_cast<std::ptrdiff_t>(at));
          refused(block.bytes, status);
        }
        g_blocks[at].ptr = ptr;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      std::printf("churn_rounds=%lu\n", rounds);
    } else if (step.rfind("pairs:", 0) == 0) {
      const unsigned long pairs = std::strtoul(arg.c_str(), nullptr, 10);
      const auto start = Clock::now();
      for (unsigned long n = 0; n < pairs && !g_blocks.empty(); ++n) {
        const std::size_t bytes = g_blocks.back().bytes;
        free_last();
        if (const CUresult status = allocate(bytes); status != CUDA_SUCCESS) refused(bytes, status);
      }
      std::printf("pair_ns=%.1f\n", pairs > 0 ? ms_since(start) * 1e6 / static_cast<double>(pairs) : 0.0);
    } else if (step.rfind("greedy:", 0) == 0) {
      greedy(std::strtoull(arg.c_str(), nullptr, 10) * kMiB, Until(arg.substr(arg.find(':') + 1)));
    } else if (step.rfind("fill:", 0) == 0) {
      while (allocate(std::strtoull(arg.c_str(), nullptr, 10) * kMiB) == CUDA_SUCCESS) {
      }
      std::printf("filled=%zu\n", live_bytes());
    } else if (step.rfind("timed:", 0) == 0) {
      const auto start = Clock::now();
      const CUresult status = allocate(std::strtoull(arg.c_str(), nullptr, 10) * kMiB);
      std::printf("took_ms=%.1f\ntimed=%s\nasked_at_ns=%lld\n", ms_since(start), cu_error_name(status),
                  ns_on_shared_clock(start));
    } else if (step == "info") {
      std::size_t free = 0, total = 0, device_total = 0;
      unsigned long long nvml_total = 0;
      bool agree = false;
      for (int attempt = 0; attempt < 20 && !agree; ++attempt) {
        std::size_t total_after = 0, free_after = 0;
        CHECK_CU(cuMemGetInfo(&free, &total));
        CHECK_CU(cuDeviceTotalMem(&device_total, 0));
        nvml_total = nvml_device_total();
        CHECK_CU(cuMemGetInfo(&free_after, &total_after));
        agree = total == device_total && total == total_after && (nvml_total == 0 || nvml_total == total);
      }
      std::printf("free=%zu\ntotal=%zu\ndevice_total=%zu\nnvml_total=%llu\nagree=%d\nheld=%zu\n", free, total,
                  device_total, nvml_total, agree ? 1 : 0, live_bytes());
    } else if (step == "reset") {
      g_blocks.clear();  // gone with the context
      CHECK_CU(cuDevicePrimaryCtxReset(0));
      CHECK_CU(cuDevicePrimaryCtxRetain(&context, 0));
      CHECK_CU(cuCtxSetCurrent(context));
    } else if (step.rfind("wait:", 0) == 0) {
      wait_for(arg);
    } else if (step.rfind("touch:", 0) == 0) {
      const int fd = open(arg.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
    } else if (step.rfind("sleep:", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::strtoull(arg.c_str(), nullptr, 10)));
    } else if (step == "pause") {
      std::fflush(stdout);
      pause();
    } else if (step.rfind("say:", 0) == 0) {
      std::printf("%s\n", arg.c_str());
    } else if (step.rfind("async_alloc:", 0) == 0) {
      const std::size_t mib = std::strtoull(arg.c_str(), nullptr, 10);
      const std::size_t count = std::strtoull(arg.c_str() + arg.find('x') + 1, nullptr, 10);
      for (std::size_t n = 0; n < count; ++n) {
        CUdeviceptr ptr = 0;
        if (const CUresult status = cuMemAllocAsync(&ptr, mib * kMiB, program_stream()); status != CUDA_SUCCESS) {
          refused(mib * kMiB, status);
        }
        g_blocks.push_back(Block{ptr, mib * kMiB});
      }
      CHECK_CU(cuStreamSynchronize(program_stream()));
    } else if (step.rfind("async_free:", 0) == 0) {
      for (std::size_t n = std::strtoull(arg.c_str(), nullptr, 10); n > 0 && !g_blocks.empty(); --n) {
        CHECK_CU(cuMemFreeAsync(g_blocks.back().ptr, program_stream()));
        g_blocks.pop_back();
      }
    } else if (step.rfind("compute:", 0) == 0) {
      const auto start = Clock::now();
      const std::uintptr_t ms = std::strtoull(arg.c_str(), nullptr, 10);
      CHECK_CU(cuLaunchHostFunc(program_stream(), sleep_on_stream, reinterpret_cast<void*>(ms)));
      CHECK_CU(cuStreamSynchronize(program_stream()));
      std::printf("compute_ms=%.1f\n", ms_since(start));
    } else if (step.rfind("train:", 0) == 0) {
      const auto start = Clock::now();
      const double ms = static_cast<double>(std::strtoull(arg.c_str(), nullptr, 10));
      while (ms_since(start) < ms) {
        CHECK_CU(cuLaunchHostFunc(program_stream(), sleep_on_stream, reinterpret_cast<void*>(std::uintptr_t{10})));
        CHECK_CU(cuStreamSynchronize(program_stream()));
      }
      std::printf("compute_ms=%.1f\n", ms_since(start));
    } else if (step == "sync") {
      CHECK_CU(cuCtxSynchronize());
    } else if (step == "context") {
      CUcontext own = nullptr;
      CUdevice device = 0;
      CHECK_CU(cuDeviceGet(&device, 0));
      CHECK_CU(cuCtxCreate(&own, nullptr, 0, device));
      CHECK_CU(cuCtxSetCurrent(own));
    } else if (step == "primary") {
      CHECK_CU(cuCtxSetCurrent(context));
    } else if (step.rfind("thread_alloc:", 0) == 0) {
      const std::size_t bytes = std::strtoull(arg.c_str(), nullptr, 10) * kMiB;
      CUcontext current = nullptr;
      CHECK_CU(cuCtxGetCurrent(&current));
      allocating = std::thread([bytes, current, &thread_took_ms, &thread_ended_at_ns, &thread_status] {
        CHECK_CU(cuCtxSetCurrent(current));
        const auto start = Clock::now();
        CUdeviceptr ptr = 0;
        thread_status = cuMemAlloc(&ptr, bytes);
        thread_took_ms = ms_since(start);
        thread_ended_at_ns = ns_on_shared_clock(Clock::now());
      });
    } else if (step == "join") {
      if (allocating.joinable()) allocating.join();
      std::printf("thread_took_ms=%.1f\nthread_alloc=%s\nthread_ended_at_ns=%lld\n", thread_took_ms,
                  cu_error_name(thread_status), thread_ended_at_ns);
    } else if (step.rfind("fork:", 0) == 0) {
      unsigned ok = 0;
      for (unsigned long n = std::strtoul(arg.c_str(), nullptr, 10); n > 0; --n) {
        std::fflush(stdout);
        const pid_t child = fork();
        if (child == 0) forked_child();
        int status = 0;
        if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
          ++ok;
        } else {
          std::printf("forked_failed=%d\n", status);  // the wait status of a child that did not end well
        }
      }
      std::printf("forked_ok=%u\n", ok);
    } else if (step == "exit") {
      std::printf("result=ok\n");
      std::fflush(stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "share_worker: unknown step \"%s\"\n", step.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  while (!g_blocks.empty()) free_last();
  std::printf("result=ok\n");
  return 0;
}
