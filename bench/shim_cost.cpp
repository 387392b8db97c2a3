// What device-memory calls cost through the CUDA driver API, in one process: run it over the
// simulated driver alone, then with libgpumem.so in LD_PRELOAD (in each GPUMEM_MODE), and compare.
//   alloc_free_4KiB  cuMemAlloc + cuMemFree of 4 KiB, `--pairs` pairs (default 200000) timed after
//                    `--warmup` untimed pairs (default 10000); one benchmark iteration is one pair
//   cuMemGetInfo     a cheap call the shim intercepts (its hook table lists cuMemGetInfo_v2)
//   cuCtxGetCurrent  a call it does not intercept: the same with and without the shim
// Times are wall-clock (the simulator's cuMemFree waits for its context's stream threads).
// Counters: shim_loaded (libgpumem.so is in the process), shim_active (gpumem_is_active() after the
// calls: the shim manages device memory, i.e. its mode is not off).
//
// Uses the primary context of device 0, as the CUDA runtime does.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

constexpr std::string_view kProgram = "shim_cost";
constexpr std::size_t kBlockBytes = 4096;

void report_shim(benchmark::State& state) {
  state.counters["shim_loaded"] = dlsym(RTLD_DEFAULT, "gpumem_version") != nullptr ? 1.0 : 0.0;
  using IsActive = int (*)();
  const auto is_active = reinterpret_cast<IsActive>(dlsym(RTLD_DEFAULT, "gpumem_is_active"));
  state.counters["shim_active"] = is_active != nullptr && is_active() != 0 ? 1.0 : 0.0;
}

bool failed(benchmark::State& state, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return false;
  const char* name = nullptr;
  cuGetErrorName(result, &name);
  state.SkipWithError((std::string(what) + " failed: " + (name != nullptr ? name : "unknown error")).c_str());
  return true;
}

void alloc_free_4KiB(benchmark::State& state, std::size_t warmup) {
  CUdeviceptr block = 0;
  for (std::size_t index = 0; index < warmup; ++index) {
    if (failed(state, cuMemAlloc(&block, kBlockBytes), "cuMemAlloc") || failed(state, cuMemFree(block), "cuMemFree")) {
      return;
    }
  }
  for (auto _ : state) {
    if (failed(state, cuMemAlloc(&block, kBlockBytes), "cuMemAlloc")) break;
    if (failed(state, cuMemFree(block), "cuMemFree")) break;
  }
  report_shim(state);
}

void mem_get_info(benchmark::State& state) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  for (auto _ : state) {
    if (failed(state, cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo")) break;
    benchmark::DoNotOptimize(free_bytes);
  }
  report_shim(state);
}

void ctx_get_current(benchmark::State& state) {
  CUcontext context = nullptr;
  for (auto _ : state) {
    if (failed(state, cuCtxGetCurrent(&context), "cuCtxGetCurrent")) break;
    benchmark::DoNotOptimize(context);
  }
  report_shim(state);
}

[[noreturn]] void fail(int status, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram.data(), message.c_str());
  std::exit(status);
}

std::size_t count_of(std::string_view option, std::string_view text, bool zero_allowed) {
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || (value == 0 && !zero_allowed) ||
      value > 1'000'000'000) {
    fail(2, std::string(option) + ": expected a whole number " + (zero_allowed ? "from 0" : "from 1") +
                " to 1000000000, got \"" + std::string(text) + "\"");
  }
  return value;
}

void check_setup(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(result, &name);
  fail(1, std::string(what) + " failed: " + (name != nullptr ? name : "unknown error"));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* options out of argv
  std::size_t pairs = 200'000;
  std::size_t warmup = 10'000;
  for (int index = 1; index < argc; ++index) {
    const std::string_view argument = argv[index];
    if (argument.starts_with("--pairs=")) {
      pairs = count_of("--pairs", argument.substr(8), false);
    } else if (argument.starts_with("--warmup=")) {
      warmup = count_of("--warmup", argument.substr(9), true);
    } else {
      fail(2, "unknown argument \"" + std::string(argument) +
                  "\" (expected --pairs=N, --warmup=N or --benchmark_* options)");
    }
  }
  check_setup(cuInit(0), "cuInit");
  CUdevice device = 0;
  check_setup(cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext context = nullptr;
  check_setup(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check_setup(cuCtxSetCurrent(context), "cuCtxSetCurrent");

  benchmark::RegisterBenchmark("alloc_free_4KiB", alloc_free_4KiB, warmup)
      ->Iterations(static_cast<benchmark::IterationCount>(pairs))
      ->UseRealTime()
      ->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark("cuMemGetInfo", mem_get_info)->UseRealTime()->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark("cuCtxGetCurrent", ctx_get_current)->UseRealTime()->Unit(benchmark::kNanosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  check_setup(cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
  return 0;
}
