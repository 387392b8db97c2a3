// Many threads look the driver up at the same moment, as the shim resolves its tables for the first
// time; then the process forks and the child looks up again and allocates. Prints:
//   threads_agree=1            every thread got the same cuMemAlloc entry point
//   answer=<object> <symbol>   where it lies
//   child_answer=<object> <symbol> and child_alloc=<CUresult>, from the forked child
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 8;

void* look_up_cu_mem_alloc() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) return nullptr;
  auto get = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  void* entry = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get == nullptr || get("cuMemAlloc", &entry, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                            &status) != CUDA_SUCCESS) {
    return nullptr;
  }
  return entry;
}

void print_location(const char* label, const void* entry) {
  Dl_info info{};
  if (entry == nullptr || dladdr(entry, &info) == 0 || info.dli_fname == nullptr ||
      info.dli_sname == nullptr) {
    std::printf("%s=none none\n", label);
    return;
  }
  const char* slash = std::strrchr(info.dli_fname, '/');
  std::printf("%s=%s %s\n", label, slash != nullptr ? slash + 1 : info.dli_fname, info.dli_sname);
}

// In the child: a fresh allocation through the looked-up entry point (primary context of device 0).
int allocate_in_child(void* entry) {
  using Alloc = CUresult (*)(CUdeviceptr*, size_t);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(driver, "cuInit"));
  auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(
      dlsym(driver, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(driver, "cuCtxSetCurrent"));
  CUcontext context = nullptr;
  CUdeviceptr block = 0;
  if (entry == nullptr || init == nullptr || retain == nullptr || set_current == nullptr) return -1;
  if (init(0) != CUDA_SUCCESS || retain(&context, 0) != CUDA_SUCCESS ||
      set_current(context) != CUDA_SUCCESS) {
    return -2;
  }
  return static_cast<int>(reinterpret_cast<Alloc>(entry)(&block, 1 << 20));
}

}  // namespace

int main() {
  std::vector<void*> answers(kThreads, nullptr);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      answers[i] = look_up_cu_mem_alloc();
    });
  }
  for (std::thread& thread : threads) thread.join();
  bool agree = answers[0] != nullptr;
  for (void* answer : answers) agree = agree && answer == answers[0];
  std::printf("threads_agree=%d\n", agree ? 1 : 0);
  print_location("answer", answers[0]);
  std::fflush(stdout);

  const pid_t child = fork();
  if (child == 0) {
    void* entry = look_up_cu_mem_alloc();
    print_location("child_answer", entry);
    std::printf("child_alloc=%d\n", allocate_in_child(entry));
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}
