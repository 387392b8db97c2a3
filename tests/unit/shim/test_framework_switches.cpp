// The frameworks' switches as the policy reads them (docs/frameworks.md): a variable libgpumem.so
// switched reads as the user's saved value, one the program changed since reads as it is (with a
// warning), a malformed GPUMEM_FRAMEWORKS_SET is one error; GPUMEM_FRAMEWORKS; CuPy's cap applied by
// gpumem as a bound of the budget.
#include <catch2/catch.hpp>

#include <cstddef>
#include <map>
#include <set>
#include <string>

#include "policy/policy.h"

using gpumem::DeviceView;
using gpumem::Mode;
using gpumem::Policy;
using gpumem::PolicyResult;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = MiB << 10;

using Environment = std::map<std::string, std::string, std::less<>>;

PolicyResult evaluate(const Environment& environment) {
  return gpumem::policy_from_environment([&](std::string_view name) -> std::optional<std::string_view> {
    const auto found = environment.find(name);
    if (found == environment.end()) return std::nullopt;
    return std::string_view(found->second);
  });
}

Policy policy_for(const Environment& environment) {
  const PolicyResult result = evaluate(environment);
  for (const auto& error : result.errors) INFO("error: " << error.line);
  REQUIRE(result.policy.has_value());
  CHECK(result.errors.empty());
  return *result.policy;
}

// The environment libgpumem.so leaves after switching `user`'s environment, as preload/framework_env.c
// does (tested on the real library by tests/integration/test_frameworks.py).
Environment switched(Environment user) {
  std::string set_list;
  for (const gpumem::FrameworkSwitch& entry : gpumem::framework_switches()) {
    const auto found = user.find(entry.variable);
    if (found == user.end() && entry.only_if_set) continue;
    if (found != user.end()) user["GPUMEM_SAVED_" + std::string(entry.variable)] = found->second;
    user[std::string(entry.variable)] = std::string(entry.value);
    set_list += (set_list.empty() ? "" : ",") + std::string(entry.variable) + "=" + std::string(entry.value);
  }
  user["GPUMEM_FRAMEWORKS_SET"] = set_list;
  return user;
}

}  // namespace

TEST_CASE("frameworks: one switch per framework, each on a variable of its own", "[policy][frameworks]") {
  std::set<std::string_view> variables;
  std::set<std::string_view> frameworks;
  for (const gpumem::FrameworkSwitch& entry : gpumem::framework_switches()) {
    CHECK(variables.insert(entry.variable).second);
    CHECK(frameworks.insert(entry.framework).second);
    CHECK(entry.value.find(',') == std::string_view::npos);  // GPUMEM_FRAMEWORKS_SET is comma-separated
  }
  CHECK(frameworks == std::set<std::string_view>{"JAX", "TensorFlow", "PyTorch", "CuPy"});
  CHECK(variables.contains("XLA_PYTHON_CLIENT_ALLOCATOR"));
  CHECK(variables.contains("TF_GPU_ALLOCATOR"));
  CHECK(variables.contains("PYTORCH_NO_CUDA_MEMORY_CACHING"));
}

TEST_CASE("frameworks: a switched environment reads as the user gave it", "[policy][frameworks]") {
  // Nothing set by the user: the switches do not become gpumem's mode (XLA's "platform", TF's
  // "cuda_malloc" would each make gpumem pass every request to the driver).
  const Policy plain = policy_for(switched({}));
  CHECK(plain.mode == Mode::bfc);
  CHECK(plain.mode_origin.variable == "default");
  CHECK(plain.warnings.empty());
  CHECK(plain.framework_switches ==
        std::vector<std::string>{"XLA_PYTHON_CLIENT_ALLOCATOR=platform", "TF_GPU_ALLOCATOR=cuda_malloc",
                                 "PYTORCH_NO_CUDA_MEMORY_CACHING=1"});
  CHECK_THAT(plain.describe(),
             Catch::EndsWith(" frameworks=[XLA_PYTHON_CLIENT_ALLOCATOR=platform,TF_GPU_ALLOCATOR=cuda_malloc,"
                             "PYTORCH_NO_CUDA_MEMORY_CACHING=1](GPUMEM_FRAMEWORKS_SET)"));
  // The same policy as without the switches, for every variable that names a mode.
  for (const Environment& user : {Environment{{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}},
                                  Environment{{"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"}},
                                  Environment{{"XLA_PYTHON_CLIENT_ALLOCATOR", "BFC"}},
                                  Environment{{"TF_GPU_ALLOCATOR", "cuda_malloc_async"}},
                                  Environment{{"TF_GPU_ALLOCATOR", "cuda_malloc"}},
                                  Environment{{"TF_GPU_ALLOCATOR", "cuda_malloc_async"},
                                              {"TF_FORCE_GPU_ALLOW_GROWTH", "true"},
                                              {"XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"}}}) {
    INFO(user.begin()->first << "=" << user.begin()->second);
    const Policy direct = policy_for(user);
    const Policy through = policy_for(switched(user));
    CHECK(through.mode == direct.mode);
    CHECK(through.mode_origin.variable == direct.mode_origin.variable);
    CHECK(through.preallocate == direct.preallocate);
    CHECK(through.fraction == direct.fraction);
    CHECK(through.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1}).bytes ==
          direct.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1}).bytes);
  }
  // The user's fraction is gpumem's, once: 0.5 of the device (the framework, switched, reads none).
  CHECK(policy_for(switched({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}}))
            .device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1})
            .bytes == 8 * GiB);
}

TEST_CASE("frameworks: the user's bad value is reported under its own name", "[policy][frameworks]") {
  const PolicyResult result = evaluate(switched({{"XLA_PYTHON_CLIENT_ALLOCATOR", "plaform"}}));
  REQUIRE(result.errors.size() == 1);
  CHECK_THAT(result.errors[0].line, Catch::StartsWith("gpumem: XLA_PYTHON_CLIENT_ALLOCATOR=\"plaform\" is not one of"));
  CHECK(result.policy->mode == Mode::bfc);
}

TEST_CASE("frameworks: a variable the program changed since reads as it is, with a warning",
          "[policy][frameworks]") {
  Environment environment = switched({{"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"}});
  environment["XLA_PYTHON_CLIENT_ALLOCATOR"] = "bfc";  // os.environ[...] = "bfc" before `import jax`
  const Policy changed = policy_for(environment);
  CHECK(changed.mode == Mode::bfc);
  CHECK(changed.mode_origin.variable == "XLA_PYTHON_CLIENT_ALLOCATOR");
  REQUIRE(changed.warnings.size() == 1);
  CHECK(changed.warnings[0] ==
        "gpumem: XLA_PYTHON_CLIENT_ALLOCATOR is \"bfc\", not \"platform\" as libgpumem.so set it when the process "
        "started (GPUMEM_FRAMEWORKS_SET): JAX's own allocator then runs on top of gpumem's and keeps what it "
        "frees (docs/frameworks.md)");
  CHECK(changed.framework_switches.size() == 2);  // TF's and PyTorch's still in force

  environment.erase("XLA_PYTHON_CLIENT_ALLOCATOR");
  const Policy removed = policy_for(environment);
  CHECK(removed.mode_origin.variable == "default");
  REQUIRE(removed.warnings.size() == 1);
  CHECK_THAT(removed.warnings[0], Catch::StartsWith("gpumem: XLA_PYTHON_CLIENT_ALLOCATOR is unset, not \"platform\""));
}

TEST_CASE("frameworks: a malformed GPUMEM_FRAMEWORKS_SET is one error, and every variable reads as it is",
          "[policy][frameworks]") {
  for (const char* bad : {"XLA_PYTHON_CLIENT_ALLOCATOR", "GPUMEM_MODE=off", "XLA_PYTHON_CLIENT_ALLOCATOR=platform,",
                          "TF_GPU_ALLOCATOR=cuda_malloc,TF_GPU_ALLOCATOR=cuda_malloc", "=platform"}) {
    INFO(bad);
    Environment environment{{"GPUMEM_FRAMEWORKS_SET", bad},
                            {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
                            {"GPUMEM_SAVED_XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"},
                            {"GPUMEM_MODE", "cuda_async"}};
    const PolicyResult result = evaluate(environment);
    REQUIRE(result.errors.size() == 1);
    CHECK_THAT(result.errors[0].line,
               Catch::StartsWith("gpumem: GPUMEM_FRAMEWORKS_SET=\"") &&
                   Catch::EndsWith("is not a list of NAME=VALUE naming the frameworks' switches (libgpumem.so "
                                   "writes it when it is loaded); ignored: the frameworks' variables are read as "
                                   "they are"));
    // A list naming a GPUMEM_* variable cannot hide it.
    CHECK(result.policy->mode == Mode::cuda_async);
    CHECK(result.policy->framework_switches.empty());
  }
  // An empty list (nothing could be set) is no error.
  CHECK(policy_for({{"GPUMEM_FRAMEWORKS_SET", ""}, {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}}).mode ==
        Mode::platform);
}

TEST_CASE("frameworks: GPUMEM_FRAMEWORKS", "[policy][frameworks]") {
  CHECK(policy_for({}).frameworks);
  const Policy off = policy_for({{"GPUMEM_FRAMEWORKS", "off"}});
  CHECK_FALSE(off.frameworks);
  CHECK_THAT(off.describe(), Catch::EndsWith(" frameworks=off(GPUMEM_FRAMEWORKS)"));
  CHECK(policy_for({{"GPUMEM_FRAMEWORKS", "1"}}).frameworks);
  const PolicyResult bad = evaluate({{"GPUMEM_FRAMEWORKS", "maybe"}});
  REQUIRE(bad.errors.size() == 1);
  CHECK(bad.errors[0].line ==
        "gpumem: GPUMEM_FRAMEWORKS=\"maybe\" is not a boolean (1/0, true/false, yes/no, on/off); ignored: the "
        "frameworks' switches are on (default)");
}

TEST_CASE("frameworks: CuPy's cap is gpumem's bound, once", "[policy][frameworks][limit]") {
  const DeviceView device{0, 16 * GiB, 16 * GiB, 1};
  // A percentage of the device's total (CuPy takes it of cudaMemGetInfo's total, which under gpumem
  // is gpumem's limit: it would apply twice).
  const Policy half = policy_for(switched({{"CUPY_GPU_MEMORY_LIMIT", "50%"}}));
  CHECK(half.device_limit(device).bytes == 8 * GiB);
  CHECK(half.device_limit(device).cap == 8 * GiB);
  CHECK(half.device_limit(device).summary == "CUPY_GPU_MEMORY_LIMIT");
  CHECK_THAT(half.device_limit(device).derivation,
             Catch::EndsWith("; bounded by CUPY_GPU_MEMORY_LIMIT=50% = 8589934592 (the lowest, in force)"));
  CHECK_THAT(half.describe(), Catch::Contains(" framework_limits=CUPY_GPU_MEMORY_LIMIT=50%"));
  CHECK(half.framework_switches.back() == "CUPY_GPU_MEMORY_LIMIT=0");
  // Bytes, as CuPy writes them; above the fraction it is named but not in force.
  const Policy bytes = policy_for({{"CUPY_GPU_MEMORY_LIMIT", "1073741824"}});
  CHECK(bytes.device_limit(device).bytes == GiB);
  CHECK(policy_for({{"CUPY_GPU_MEMORY_LIMIT", "100%"}}).device_limit(device).bytes == 12 * GiB);
  CHECK(policy_for({{"CUPY_GPU_MEMORY_LIMIT", "12.5%"}}).device_limit(device).bytes == 2 * GiB);
  // The lowest bound wins, whoever set it.
  CHECK(policy_for({{"CUPY_GPU_MEMORY_LIMIT", "25%"}, {"CUDA_DEVICE_MEMORY_LIMIT", "2g"}}).device_limit(device).bytes ==
        2 * GiB);
  // With the switches off CuPy's pool applies its own cap (of what gpumem reports), not gpumem.
  const Policy off = policy_for({{"CUPY_GPU_MEMORY_LIMIT", "25%"}, {"GPUMEM_FRAMEWORKS", "off"}});
  CHECK(off.framework_limits.empty());
  CHECK(off.device_limit(device).bytes == 12 * GiB);
  CHECK(evaluate({{"CUPY_GPU_MEMORY_LIMIT", "half"}, {"GPUMEM_FRAMEWORKS", "off"}}).errors.empty());
  // CuPy's "no cap".
  for (const char* none : {"0", "0%", "0.0%"}) {
    INFO(none);
    CHECK(policy_for({{"CUPY_GPU_MEMORY_LIMIT", none}}).framework_limits.empty());
  }
  for (const char* bad : {"50", "101%", "-1", "%", "1e3%", "half", "50 %x", "1.2.3%"}) {
    INFO(bad);
    const PolicyResult result = evaluate({{"CUPY_GPU_MEMORY_LIMIT", bad}});
    REQUIRE(result.errors.size() == 1);
    CHECK_THAT(result.errors[0].line,
               Catch::StartsWith("gpumem: CUPY_GPU_MEMORY_LIMIT=\"") &&
                   Catch::Contains("is not a percentage from 0 to 100 (e.g. 50%) nor a byte count of at least 256") &&
                   Catch::EndsWith("ignored: the limit is 0.75 (default) of each device's total memory"));
    CHECK(result.policy->framework_limits.empty());
  }
}
