// The CUDASIM_REPORT file: written at exit by the process that set it up, read back here.
#include "driver_support.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <spawn.h>

#include <cstdio>
#include <fstream>
#include <string>

using namespace driver_test;
using nlohmann::json;

extern char** environ;

namespace {

std::string temp_path(const char* tag) {
  return "/tmp/cudasim-report-" + std::string(tag) + "-" + std::to_string(getpid()) + ".json";
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

json read_report(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  json report = json::parse(in);
  std::remove(path.c_str());
  return report;
}

}  // namespace

TEST_CASE("the report counts what a process did", "[driver][report]") {
  const std::string path = temp_path("counts");
  int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CUcontext ctx = nullptr;
    void* fn = nullptr;
    CHILD_CHECK(cuGetProcAddress("cuInit", &fn, 13000, 0, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuInit", &fn, 13000, 0, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuGetProcAddress("cuNoSuchEntryPoint", &fn, 13000, 0, nullptr) == CUDA_ERROR_NOT_FOUND);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0, pooled = 0;
    CHILD_CHECK(cuMemAlloc(&a, 3 * kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAlloc(&b, kMiB) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(a) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAllocAsync(&pooled, 5 * kMiB, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFreeAsync(pooled, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    std::exit(0);  // a normal exit writes the report
  });
  REQUIRE(rc == 0);
  json report = read_report(path);
  REQUIRE(report["devices"].size() == 2);
  const json& dev = report["devices"][0];
  CHECK(dev["ordinal"] == 0);
  CHECK(dev["total_bytes"] == 8 * kGiB);
  CHECK(dev["driver_allocs"] == 2);
  CHECK(dev["driver_frees"] == 1);
  CHECK(dev["bytes_reserved"] == kMiB);                           // b is still live
  CHECK(dev["peak_bytes_reserved"] == 7 * kMiB);  // a + b = 4 MiB, then b + the pool's 6 MiB
  CHECK(dev["largest_alloc"] == 5 * kMiB);
  CHECK(dev["context_syncs"] == 2);  // cuMemFree + cuCtxSynchronize
  CHECK(dev["stream_syncs"] == 1);
  CHECK(dev["contexts_created"] == 1);
  const json& pool = dev["pool"];
  CHECK(pool["async_allocs"] == 1);
  CHECK(pool["async_frees"] == 1);
  CHECK(pool["bytes_reserved"] == 0);  // release threshold 0: returned at the synchronisation
  CHECK(pool["peak_bytes_reserved"] == 6 * kMiB);
  CHECK(pool["bytes_used"] == 0);
  CHECK(pool["peak_bytes_used"] == 6 * kMiB);
  CHECK(report["devices"][1]["total_bytes"] == 2 * kGiB);
  CHECK(report["devices"][1]["driver_allocs"] == 0);
  CHECK(report["proc_address_requests"] == json::array({"cuInit", "cuMemAlloc", "cuNoSuchEntryPoint"}));
}

TEST_CASE("a process that loads the driver and calls nothing still reports", "[driver][report]") {
  const char* driver = std::getenv("CUDASIM_TEST_DRIVER");
  REQUIRE(driver != nullptr);
  const std::string path = temp_path("idle");
  std::string preload = std::string("LD_PRELOAD=") + driver;
  std::string report_var = "CUDASIM_REPORT=" + path;
  std::string memory = "CUDASIM_DEVICE_MEMORY=3GiB";
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  char* envp[] = {preload.data(), report_var.data(), memory.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, envp) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  json report = read_report(path);
  REQUIRE(report["devices"].size() == 1);
  CHECK(report["devices"][0]["total_bytes"] == 3 * kGiB);
  CHECK(report["devices"][0]["driver_allocs"] == 0);
  CHECK(report["proc_address_requests"].empty());
}

TEST_CASE("a forked child that does not use CUDA leaves the report to its parent", "[driver][report]") {
  const std::string path = temp_path("fork");
  int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);  // this process now owns the report
    pid_t grandchild = fork();
    if (grandchild == 0) std::exit(0);  // runs exit handlers, but must not write
    int status = 0;
    waitpid(grandchild, &status, 0);
    CHILD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHILD_CHECK(!exists(path));
    std::exit(0);
  });
  REQUIRE(rc == 0);
  CHECK(exists(path));
  std::remove(path.c_str());
}
