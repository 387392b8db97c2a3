// Whole-process properties of the simulated runtime, checked by running runtime_child.c in a
// child process: how it reaches the driver (the driver's report), when primary contexts appear,
// what it answers without a usable driver (compared with NVIDIA's runtime where the toolkit has
// it), and how it is linked (symbol versions of the shared library). exit_child.cpp, in a child
// too, checks calls made after main (an atexit handler, a static object's destructor).
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "child_process.h"
#include "runtime_support.h"

using runtime_test::ChildRun;
using runtime_test::exit_child_failing_after_main;
using runtime_test::exit_child_observed;
using runtime_test::exit_child_success;
using runtime_test::Observations;
using runtime_test::run_child;
using runtime_test::run_child_with_report;
using runtime_test::ScratchDir;

namespace {

// Every string value stored under `key` anywhere in the document.
void collect_strings(const nlohmann::json& node, const std::string& key, bool inside, std::set<std::string>& out) {
  if (node.is_string() && inside) out.insert(node.get<std::string>());
  if (node.is_array()) {
    for (const auto& element : node) collect_strings(element, key, inside, out);
  }
  if (node.is_object()) {
    for (const auto& [name, value] : node.items()) collect_strings(value, key, inside || name == key, out);
  }
}

const Observations kInitFailureCommon = {
    {"device_count.value", "-7"},   {"driver_version", "0"},        {"driver_version.value", "0"},
    {"malloc_zero.untouched", "1"}, {"runtime_version", "0"},       {"runtime_version.value", "13000"},
    {"runtime_version_null", "1"},
};

Observations init_failure_expectation(const std::string& code) {
  Observations expected = kInitFailureCommon;
  for (const char* key : {"device_count", "peek_last_error", "get_last_error", "get_last_error.again", "malloc",
                          "malloc_zero", "free_null"})
    expected[key] = code;
  return expected;
}

}  // namespace

TEST_CASE("runtime: reaches the driver only through cuGetProcAddress", "[runtime][process]") {
  const auto [run, report] = run_child_with_report(RUNTIME_TEST_CHILD, "calls", {});
  REQUIRE(run.exit_code == 0);
  for (const auto& [call, status] : run.observations) {
    INFO(call);
    CHECK(status == "0");
  }
  REQUIRE_FALSE(report.is_discarded());
  std::set<std::string> requested;
  collect_strings(report, "proc_address_requests", false, requested);
  for (const char* entry : {"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDevicePrimaryCtxRetain",
                            "cuCtxSetCurrent", "cuMemAlloc", "cuMemFree", "cuMemGetInfo", "cuMemcpyHtoD",
                            "cuMemsetD8", "cuStreamCreate", "cuEventCreate", "cuLaunchHostFunc",
                            "cuMemAllocAsync", "cuMemFreeAsync", "cuCtxSynchronize"}) {
    INFO(entry);
    CHECK(requested.contains(entry));
  }
}

TEST_CASE("runtime: primary contexts are created lazily, per device", "[runtime][process]") {
  const ChildRun run = run_child(RUNTIME_TEST_CHILD, "lazy", {});
  REQUIRE(run.exit_code == 0);
  const Observations expected = {
      {"device_count", "0"},           {"malloc", "0"},      {"set_device", "0"},  {"reset", "0"},
      {"free_null", "0"},              {"set_device0", "0"}, {"free", "0"},
      {"after_device_count.device0", "0"}, {"after_device_count.device1", "0"},
      {"after_malloc.device0", "1"},       {"after_malloc.device1", "0"},
      {"after_set_device.device0", "1"},   {"after_set_device.device1", "1"},
      {"after_reset.device0", "1"},        {"after_reset.device1", "0"},
      {"after_free_null.device0", "1"},    {"after_free_null.device1", "1"},
  };
  CHECK(run.observations == expected);
}

TEST_CASE("runtime: without a driver every call reports cudaErrorInsufficientDriver", "[runtime][process]") {
  ScratchDir empty;
  REQUIRE_FALSE(empty.path().empty());
  const ChildRun run = run_child(RUNTIME_TEST_CHILD, "init", {{"LD_LIBRARY_PATH", empty.path()}});
  REQUIRE(run.exit_code == 0);
  CHECK(run.observations == init_failure_expectation("35"));
#ifdef RUNTIME_TEST_NVIDIA_CHILD
  const ChildRun nvidia = run_child(RUNTIME_TEST_NVIDIA_CHILD, "init", {{"LD_LIBRARY_PATH", empty.path()}});
  REQUIRE(nvidia.exit_code == 0);
  CHECK(run.observations == nvidia.observations);
#endif
}

#ifdef RUNTIME_TEST_STUB_DRIVER
TEST_CASE("runtime: with the toolkit's stub driver every call reports cudaErrorStubLibrary", "[runtime][process]") {
  ScratchDir stub;
  REQUIRE_FALSE(stub.path().empty());
  std::filesystem::create_symlink(RUNTIME_TEST_STUB_DRIVER, stub.path() + "/libcuda.so.1");
  const ChildRun run = run_child(RUNTIME_TEST_CHILD, "init", {{"LD_LIBRARY_PATH", stub.path()}});
  REQUIRE(run.exit_code == 0);
  CHECK(run.observations == init_failure_expectation("34"));
#ifdef RUNTIME_TEST_NVIDIA_CHILD
  const ChildRun nvidia = run_child(RUNTIME_TEST_NVIDIA_CHILD, "init", {{"LD_LIBRARY_PATH", stub.path()}});
  REQUIRE(nvidia.exit_code == 0);
  CHECK(run.observations == nvidia.observations);
#endif
}
#endif

#ifdef RUNTIME_TEST_NVIDIA_CHILD
TEST_CASE("runtime: every error name and text it knows is NVIDIA's", "[runtime][process]") {
  const ChildRun ours = run_child(RUNTIME_TEST_CHILD, "errors", {});
  const ChildRun nvidia = run_child(RUNTIME_TEST_NVIDIA_CHILD, "errors", {});
  REQUIRE(ours.exit_code == 0);
  REQUIRE(nvidia.exit_code == 0);
  REQUIRE(ours.observations.size() == 1101);
  std::size_t known = 0;
  for (const auto& [code, description] : ours.observations) {
    // Codes this runtime never returns answer "unrecognized error code", as NVIDIA's does for
    // codes it does not know; those are not compared.
    if (description.starts_with("unrecognized error code")) continue;
    ++known;
    INFO(code);
    CHECK(description == nvidia.observations.at(code));
  }
  CHECK(known >= 40);  // the comparison covered the table (44 codes when written)
}
#endif

#ifdef RUNTIME_TEST_NVIDIA_CHILD
// NVIDIA's static runtime reaches the simulated driver through cuGetProcAddress and the private
// export tables (cudasim/driver/export_tables/): over it, it answers every call of the scenarios
// as the simulated runtime does (the primary contexts appear at the same points), and it calls
// no export-table entry whose meaning is unknown.
TEST_CASE("runtime: NVIDIA's static runtime over the simulated driver answers as this one", "[runtime][process]") {
  for (const char* scenario : {"calls", "lazy"}) {
    INFO(scenario);
    const ChildRun ours = run_child(RUNTIME_TEST_CHILD, scenario, {});
    const auto [nvidia, report] = run_child_with_report(RUNTIME_TEST_NVIDIA_CHILD, scenario, {});
    REQUIRE(ours.exit_code == 0);
    REQUIRE(nvidia.exit_code == 0);
    CHECK(nvidia.observations == ours.observations);
    REQUIRE_FALSE(report.is_discarded());
    std::set<std::string> tables;
    for (const auto& request : report["export_table_requests"]) tables.insert(request["table"].get<std::string>());
    for (const char* table : {"CUDART_INTERFACE", "CONTEXT_LOCAL_STORAGE_INTERFACE_V0301", "INTEGRITY_CHECK"}) {
      INFO(table);
      CHECK(tables.contains(table));
    }
    std::size_t calls = 0;
    for (const auto& call : report["export_table_calls"]) {
      INFO(call.dump());
      CHECK(call["knowledge"] != "unknown");
      calls += call["calls"].get<std::size_t>();
    }
    CHECK(calls > 0);
  }
}
#endif

TEST_CASE("runtime: calls from exit-time destructors and atexit handlers work", "[runtime][process]") {
  CHECK(exit_child_observed(RUNTIME_TEST_EXIT_CHILD, {}) == exit_child_success(false));
}

TEST_CASE("runtime: the driver it loads still injects faults after main", "[runtime][process]") {
  // The runtime loads the driver at its first call, after the handler and the static object were
  // registered: the driver's own static objects are destroyed before they run, so nothing the
  // driver needs then (here its CUDASIM_FAULTS rules) may live in one. The rule fails every
  // device synchronisation after main's.
  Observations expected =
      exit_child_failing_after_main(false, {{"synchronize", std::to_string(cudaErrorMemoryAllocation)}});
  expected["report.context_syncs"] = "5";  // the failed synchronisations did nothing, so the
  expected["report.bytes_reserved"] = std::to_string(2 * runtime_test::kMiB);  // pool keeps a block
  CHECK(exit_child_observed(RUNTIME_TEST_EXIT_CHILD, {{"CUDASIM_FAULTS", "cuCtxSynchronize_v2@2+"}}) == expected);
}

TEST_CASE("runtime: linkage matches NVIDIA's", "[runtime][process]") {
#if RUNTIME_TEST_SHARED
  // The shared runtime exports its API under the version node of NVIDIA's libcudart.so.13.
  for (const char* symbol : {"cudaMalloc", "cudaFree", "cudaGetErrorString", "cudaMallocAsync",
                             "cudaMallocAsync_ptsz", "cudaMemcpy_ptds", "cudaLaunchHostFunc_ptsz"}) {
    INFO(symbol);
    CHECK(dlvsym(RTLD_DEFAULT, symbol, "libcudart.so.13") != nullptr);
  }
  CHECK(dlvsym(RTLD_DEFAULT, "cudaMalloc", "libcudart.so.13") == reinterpret_cast<void*>(&cudaMalloc));
  // Its helpers stay private.
  CHECK(dlsym(RTLD_DEFAULT, "_ZN7cudasim7runtime13driver_statusEv") == nullptr);
#else
  // The static runtime is part of the program: no shared runtime is loaded.
  CHECK(dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD) == nullptr);
  CHECK(dlvsym(RTLD_DEFAULT, "cudaMalloc", "libcudart.so.13") == nullptr);
#endif
}
