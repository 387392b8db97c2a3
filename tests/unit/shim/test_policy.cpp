// The policy as a whole: every variable with good and bad values, precedence between the GPUMEM, XLA
// and TF families, conflicts, the per-device limit and the describe() line.
#include <catch2/catch.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <utility>

#include "policy/policy.h"

using gpumem::FractionBasis;
using gpumem::FreeSync;
using gpumem::LogLevel;
using gpumem::Mode;
using gpumem::Policy;
using gpumem::PolicyResult;
using gpumem::RegionSourceChoice;
using gpumem::SplitRule;

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

// The policy for an environment that must be valid.
Policy policy_for(const Environment& environment) {
  const PolicyResult result = evaluate(environment);
  for (const auto& error : result.errors) INFO("error: " << error.line);
  REQUIRE(result.policy.has_value());
  CHECK(result.errors.empty());
  return *result.policy;
}

// The one error line of an environment with one bad variable (the policy is still made).
std::string error_line_for(const Environment& environment) {
  const PolicyResult result = evaluate(environment);
  REQUIRE(result.policy.has_value());
  REQUIRE(result.errors.size() == 1);
  const std::string& line = result.errors.front().line;
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.rfind("gpumem: ", 0) == 0);
  CHECK(environment.contains(result.errors.front().variable));
  return line;
}

// Its problem: the line up to what applies instead ("gpumem: NAME=\"VALUE\" is ...").
std::string error_for(const Environment& environment) {
  const std::string line = error_line_for(environment);
  for (const std::string_view consequence : {"; ignored: ", "; the lower applies: "}) {
    if (const std::size_t at = line.find(consequence); at != std::string::npos) return line.substr(0, at);
  }
  FAIL("no consequence in: " << line);
  return line;
}

// What applies instead, as the line says it.
std::string fallback_for(const Environment& environment) {
  const std::string line = error_line_for(environment);
  const std::size_t at = line.find("; ignored: ");
  REQUIRE(at != std::string::npos);
  return line.substr(at + std::string_view("; ignored: ").size());
}

}  // namespace

TEST_CASE("an empty environment gives the defaults", "[policy]") {
  const Policy policy = policy_for({});
  CHECK(policy.mode == Mode::bfc);
  CHECK(policy.preallocate);
  CHECK_FALSE(policy.limit_bytes);
  CHECK(policy.fraction == 0.75);
  CHECK(policy.fraction_of == FractionBasis::total);
  CHECK_FALSE(policy.async_prealloc);
  CHECK(policy.free_sync == FreeSync::defer);
  CHECK(policy.garbage_collection);
  CHECK(policy.log_level == LogLevel::notice);
  CHECK(policy.log_file.empty());
  for (const auto* origin : {&policy.mode_origin, &policy.preallocate_origin, &policy.limit_origin,
                             &policy.fraction_origin, &policy.fraction_of_origin, &policy.async_prealloc_origin,
                             &policy.free_sync_origin, &policy.garbage_collection_origin,
                             &policy.log_level_origin, &policy.log_file_origin}) {
    CHECK(origin->variable == "default");
  }
}

TEST_CASE("empty and blank values count as unset", "[policy]") {
  const Policy policy = policy_for({{"GPUMEM_MODE", ""},
                                    {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
                                    {"GPUMEM_PREALLOCATE", "  "},
                                    {"GPUMEM_LIMIT", ""},
                                    {"XLA_CLIENT_MEM_FRACTION", "\t"},
                                    {"GPUMEM_LOG_FILE", ""}});
  CHECK(policy.mode == Mode::platform);
  CHECK(policy.mode_origin.variable == "XLA_PYTHON_CLIENT_ALLOCATOR");
  CHECK(policy.preallocate_origin.variable == "default");
  CHECK_FALSE(policy.limit_bytes);
  CHECK(policy.fraction_origin.variable == "default");
  CHECK(policy.log_file.empty());
}

TEST_CASE("blanks around a value are ignored", "[policy]") {
  const Policy policy = policy_for({{"GPUMEM_MODE", " platform\n"}, {"XLA_CLIENT_MEM_FRACTION", " 0.5 "}});
  CHECK(policy.mode == Mode::platform);
  CHECK(policy.fraction == 0.5);
}

TEST_CASE("mode: every spelling of each family", "[policy][mode]") {
  const std::pair<Environment, Mode> cases[] = {
      {{{"GPUMEM_MODE", "bfc"}}, Mode::bfc},
      {{{"GPUMEM_MODE", "platform"}}, Mode::platform},
      {{{"GPUMEM_MODE", "cuda_async"}}, Mode::cuda_async},
      {{{"GPUMEM_MODE", "off"}}, Mode::off},
      {{{"GPUMEM_MODE", "Platform"}}, Mode::platform},
      {{{"XLA_PYTHON_CLIENT_ALLOCATOR", "default"}}, Mode::bfc},
      {{{"XLA_PYTHON_CLIENT_ALLOCATOR", "bfc"}}, Mode::bfc},
      {{{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}}, Mode::platform},
      {{{"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"}}, Mode::cuda_async},
      {{{"TF_GPU_ALLOCATOR", "cuda_malloc_async"}}, Mode::cuda_async},
      {{{"TF_GPU_ALLOCATOR", "cuda_malloc"}}, Mode::platform},
  };
  for (const auto& [environment, mode] : cases) {
    INFO(environment.begin()->first << "=" << environment.begin()->second);
    const Policy policy = policy_for(environment);
    CHECK(policy.mode == mode);
    CHECK(policy.mode_origin.variable == environment.begin()->first);
  }
}

TEST_CASE("mode: bad values name the variable and the accepted values", "[policy][mode]") {
  CHECK(error_for({{"GPUMEM_MODE", "fast"}}) ==
        "gpumem: GPUMEM_MODE=\"fast\" is not one of bfc, platform, cuda_async, off");
  CHECK(error_for({{"XLA_PYTHON_CLIENT_ALLOCATOR", "off"}}) ==
        "gpumem: XLA_PYTHON_CLIENT_ALLOCATOR=\"off\" is not one of default, bfc, platform, cuda_async");
  CHECK(error_for({{"TF_GPU_ALLOCATOR", "bfc"}}) ==
        "gpumem: TF_GPU_ALLOCATOR=\"bfc\" is not one of cuda_malloc_async, cuda_malloc, memory_guard");
  // A variable a higher-precedence one overrides is still checked.
  CHECK_THAT(error_for({{"GPUMEM_MODE", "bfc"}, {"TF_GPU_ALLOCATOR", "cuda_malloc_asinc"}}),
             Catch::StartsWith("gpumem: TF_GPU_ALLOCATOR=\"cuda_malloc_asinc\""));
}

TEST_CASE("mode: GPUMEM beats XLA beats TF", "[policy][mode][precedence]") {
  Environment environment{{"GPUMEM_MODE", "off"},
                          {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
                          {"TF_GPU_ALLOCATOR", "cuda_malloc_async"}};
  CHECK(policy_for(environment).mode == Mode::off);
  environment.erase("GPUMEM_MODE");
  CHECK(policy_for(environment).mode == Mode::platform);
  CHECK(policy_for(environment).mode_origin.variable == "XLA_PYTHON_CLIENT_ALLOCATOR");
  environment.erase("XLA_PYTHON_CLIENT_ALLOCATOR");
  CHECK(policy_for(environment).mode == Mode::cuda_async);
  CHECK(policy_for(environment).mode_origin.variable == "TF_GPU_ALLOCATOR");
}

TEST_CASE("preallocation: each family, TF inverted", "[policy][preallocate]") {
  CHECK_FALSE(policy_for({{"GPUMEM_PREALLOCATE", "0"}}).preallocate);
  CHECK(policy_for({{"GPUMEM_PREALLOCATE", "yes"}}).preallocate);
  CHECK_FALSE(policy_for({{"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}}).preallocate);
  CHECK_FALSE(policy_for({{"XLA_PYTHON_CLIENT_PREALLOCATE", "False"}}).preallocate);
  CHECK(policy_for({{"XLA_PYTHON_CLIENT_PREALLOCATE", "true"}}).preallocate);
  CHECK_FALSE(policy_for({{"TF_FORCE_GPU_ALLOW_GROWTH", "true"}}).preallocate);
  CHECK(policy_for({{"TF_FORCE_GPU_ALLOW_GROWTH", "false"}}).preallocate);
  CHECK(policy_for({{"TF_FORCE_GPU_ALLOW_GROWTH", "true"}}).preallocate_origin.variable ==
        "TF_FORCE_GPU_ALLOW_GROWTH");
}

TEST_CASE("preallocation: GPUMEM beats XLA beats TF", "[policy][preallocate][precedence]") {
  Environment environment{{"GPUMEM_PREALLOCATE", "on"},
                          {"XLA_PYTHON_CLIENT_PREALLOCATE", "off"},
                          {"TF_FORCE_GPU_ALLOW_GROWTH", "false"}};
  CHECK(policy_for(environment).preallocate);
  environment.erase("GPUMEM_PREALLOCATE");
  CHECK_FALSE(policy_for(environment).preallocate);
  CHECK(policy_for(environment).preallocate_origin.variable == "XLA_PYTHON_CLIENT_PREALLOCATE");
  environment.erase("XLA_PYTHON_CLIENT_PREALLOCATE");
  CHECK(policy_for(environment).preallocate);
  CHECK(policy_for(environment).preallocate_origin.variable == "TF_FORCE_GPU_ALLOW_GROWTH");
}

TEST_CASE("booleans: bad values are rejected for every boolean variable", "[policy][bool]") {
  for (const char* name : {"GPUMEM_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH",
                           "GPUMEM_GARBAGE_COLLECTION"}) {
    INFO(name);
    CHECK(error_for({{name, "maybe"}}) ==
          std::string("gpumem: ") + name +
              "=\"maybe\" is not a boolean (1/0, true/false, yes/no, on/off)");
  }
}

TEST_CASE("limit: GPUMEM_LIMIT in bytes with units", "[policy][limit]") {
  const Policy policy = policy_for({{"GPUMEM_LIMIT", "10GiB"}});
  CHECK(policy.limit_bytes == 10 * GiB);
  CHECK(policy.limit_origin.variable == "GPUMEM_LIMIT");
  CHECK(policy_for({{"GPUMEM_LIMIT", "1e9"}}).limit_bytes == std::size_t{1'000'000'000});
  CHECK(policy_for({{"GPUMEM_LIMIT", "512MB"}}).limit_bytes == std::size_t{512'000'000});
}

TEST_CASE("limit: bad sizes are rejected", "[policy][limit]") {
  for (const char* bad : {"0", "0GiB", "-1", "-1G", "ten", "10GiBs", "1e30", "18446744073709551616", "nan",
                          "inf", "1.5.5G", "1", "255", "0.2KiB"}) {
    INFO(bad);
    CHECK_THAT(error_for({{"GPUMEM_LIMIT", bad}}),
               Catch::StartsWith(std::string("gpumem: GPUMEM_LIMIT=\"") + bad +
                                 "\" is not a byte size of at least 256"));
  }
  CHECK(policy_for({{"GPUMEM_LIMIT", "256"}}).limit_for_device(GiB, GiB) == 256);
}

TEST_CASE("limit: a fraction below one granule of the device gives 0, and an error naming it",
          "[policy][limit][fraction]") {
  const Policy policy = policy_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "1e-9"}});
  CHECK(policy.limit_for_device(16 * GiB, 16 * GiB) == 0);  // 17 bytes
  CHECK(policy.limit_for_device(1024 * GiB, 1024 * GiB) == 1024);
  const std::string error = policy.limit_below_granule_error(1, 16 * GiB, 16 * GiB);
  CHECK_THAT(error, Catch::StartsWith("XLA_PYTHON_CLIENT_MEM_FRACTION=1e-09 gives 0 bytes of device 1"));
  CHECK_THAT(error, Catch::Contains("expected a fraction of at least 1.49e-08"));
  CHECK(error.find('\n') == std::string::npos);
}

TEST_CASE("fraction: each name, and GPUMEM beats XLA_CLIENT beats XLA_PYTHON_CLIENT", "[policy][fraction]") {
  CHECK(policy_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"}}).fraction == 0.5);
  CHECK(policy_for({{"XLA_CLIENT_MEM_FRACTION", "0.25"}}).fraction == 0.25);
  CHECK(policy_for({{"GPUMEM_MEM_FRACTION", "1"}}).fraction == 1.0);

  Environment environment{{"GPUMEM_MEM_FRACTION", "0.1"}, {"XLA_CLIENT_MEM_FRACTION", "0.2"}};
  CHECK(policy_for(environment).fraction == 0.1);
  CHECK(policy_for(environment).fraction_origin.variable == "GPUMEM_MEM_FRACTION");
  environment.erase("GPUMEM_MEM_FRACTION");
  CHECK(policy_for(environment).fraction == 0.2);
  CHECK(policy_for(environment).fraction_origin.variable == "XLA_CLIENT_MEM_FRACTION");

  // Both XLA names with the same value: not a conflict; the current name is the origin.
  const Policy same = policy_for({{"XLA_CLIENT_MEM_FRACTION", "0.5"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", ".50"}});
  CHECK(same.fraction == 0.5);
  CHECK(same.fraction_origin.variable == "XLA_CLIENT_MEM_FRACTION");
}

TEST_CASE("fraction: out of (0, 1] or malformed", "[policy][fraction]") {
  CHECK(error_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "1.5"}}) ==
        "gpumem: XLA_PYTHON_CLIENT_MEM_FRACTION=\"1.5\" is not a fraction in (0, 1]");
  for (const char* name : {"GPUMEM_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"}) {
    for (const char* bad : {"0", "-0.5", "1.01", "nan", "inf", "0.5abc", "75%"}) {
      INFO(name << "=" << bad);
      CHECK_THAT(error_for({{name, bad}}), Catch::Contains("is not a fraction in (0, 1]"));
    }
  }
}

TEST_CASE("fraction: the two XLA names disagreeing is an error, and the lower applies", "[policy][fraction][conflict]") {
  const Environment disagreeing{{"XLA_CLIENT_MEM_FRACTION", "0.5"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6"}};
  CHECK(error_line_for(disagreeing) ==
        "gpumem: XLA_CLIENT_MEM_FRACTION=\"0.5\" and XLA_PYTHON_CLIENT_MEM_FRACTION=\"0.6\" disagree; set "
        "only one (XLA_CLIENT_MEM_FRACTION is the current name); the lower applies: the limit is 0.5 "
        "(XLA_CLIENT_MEM_FRACTION) of each device's total memory");
  CHECK(evaluate(disagreeing).policy->fraction == 0.5);
  const PolicyResult older_lower = evaluate({{"XLA_CLIENT_MEM_FRACTION", "0.5"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.25"}});
  CHECK(older_lower.policy->fraction == 0.25);
  CHECK(older_lower.policy->fraction_origin.variable == "XLA_PYTHON_CLIENT_MEM_FRACTION");
  // Still an error when GPUMEM_MEM_FRACTION overrides both: the environment is inconsistent.
  const Environment overridden{{"GPUMEM_MEM_FRACTION", "0.3"},
                               {"XLA_CLIENT_MEM_FRACTION", "0.5"},
                               {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6"}};
  CHECK_THAT(error_line_for(overridden), Catch::Contains("disagree"));
  CHECK(evaluate(overridden).policy->fraction == 0.3);
}

TEST_CASE("limit wins over a fraction, with no error", "[policy][limit][fraction]") {
  const Policy policy = policy_for({{"GPUMEM_LIMIT", "1GiB"}, {"XLA_CLIENT_MEM_FRACTION", "0.5"}});
  CHECK(policy.limit_bytes == GiB);
  CHECK(policy.fraction == 0.5);  // kept, but unused
  CHECK(policy.limit_for_device(16 * GiB, 16 * GiB) == GiB);
}

TEST_CASE("fraction basis", "[policy][fraction]") {
  CHECK(policy_for({{"GPUMEM_FRACTION_OF", "free"}}).fraction_of == FractionBasis::free);
  CHECK(policy_for({{"GPUMEM_FRACTION_OF", "TOTAL"}}).fraction_of == FractionBasis::total);
  CHECK(error_for({{"GPUMEM_FRACTION_OF", "available"}}) ==
        "gpumem: GPUMEM_FRACTION_OF=\"available\" is not one of total, free");
}

TEST_CASE("async pre-allocation: bytes or -1, GPUMEM beats TF", "[policy][async]") {
  CHECK(policy_for({{"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "-1"}}).async_prealloc == -1);
  CHECK(policy_for({{"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "1GiB"}}).async_prealloc ==
        static_cast<std::int64_t>(GiB));
  CHECK(policy_for({{"GPUMEM_ASYNC_PREALLOC", "0"}}).async_prealloc == 0);
  const Policy both =
      policy_for({{"GPUMEM_ASYNC_PREALLOC", "256MiB"}, {"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "-1"}});
  CHECK(both.async_prealloc == static_cast<std::int64_t>(256 * MiB));
  CHECK(both.async_prealloc_origin.variable == "GPUMEM_ASYNC_PREALLOC");
  for (const char* bad : {"-2", "-1G", "lots", "1e19", "9223372036854775808", "- 1"}) {
    INFO(bad);
    CHECK_THAT(error_for({{"GPUMEM_ASYNC_PREALLOC", bad}}),
               Catch::Contains("is not a byte size (e.g. 1GiB, 0) or -1 (the pool's release threshold)"));
  }
  CHECK(policy_for({{"GPUMEM_ASYNC_PREALLOC", "9223372036854775807"}}).async_prealloc ==
        std::int64_t{9223372036854775807});
}

TEST_CASE("free sync, garbage collection, log level and log file", "[policy]") {
  CHECK(policy_for({{"GPUMEM_FREE_SYNC", "sync"}}).free_sync == FreeSync::sync);
  CHECK(policy_for({{"GPUMEM_FREE_SYNC", "none"}}).free_sync == FreeSync::none);
  CHECK(policy_for({{"GPUMEM_FREE_SYNC", "defer"}}).free_sync == FreeSync::defer);
  CHECK(error_for({{"GPUMEM_FREE_SYNC", "later"}}) ==
        "gpumem: GPUMEM_FREE_SYNC=\"later\" is not one of defer, sync, none");

  CHECK_FALSE(policy_for({{"GPUMEM_GARBAGE_COLLECTION", "off"}}).garbage_collection);
  CHECK(policy_for({{"GPUMEM_GARBAGE_COLLECTION", "1"}}).garbage_collection);

  const std::pair<const char*, LogLevel> levels[] = {
      {"off", LogLevel::off},       {"error", LogLevel::error}, {"warn", LogLevel::warn},   {"Warning", LogLevel::warn},
      {"notice", LogLevel::notice}, {"info", LogLevel::info},   {"debug", LogLevel::debug}, {"TRACE", LogLevel::trace}};
  for (const auto& [text, level] : levels) {
    CHECK(policy_for({{"GPUMEM_LOG_LEVEL", text}}).log_level == level);
  }
  CHECK(gpumem::to_string(LogLevel::warn) == "warn");
  CHECK(error_for({{"GPUMEM_LOG_LEVEL", "verbose"}}) ==
        "gpumem: GPUMEM_LOG_LEVEL=\"verbose\" is not one of off, error, warn, warning, notice, info, debug, trace");

  const Policy logged = policy_for({{"GPUMEM_LOG_FILE", "/tmp/gpumem log.txt"}});
  CHECK(logged.log_file == "/tmp/gpumem log.txt");
  CHECK(logged.log_file_origin.variable == "GPUMEM_LOG_FILE");
}

TEST_CASE("framework allocator names gpumem does not implement map to the closest mode", "[policy]") {
  const Policy guarded = policy_for({{"TF_GPU_ALLOCATOR", "memory_guard"}});
  CHECK(guarded.mode == Mode::bfc);
  CHECK(guarded.mode_origin.variable == "TF_GPU_ALLOCATOR");
  REQUIRE(guarded.warnings.size() == 1);
  CHECK_THAT(guarded.warnings[0], Catch::StartsWith("gpumem: TF_GPU_ALLOCATOR=memory_guard is TensorFlow's BFC"));
  // Overridden by a GPUMEM_ name: nothing to warn about.
  CHECK(policy_for({{"TF_GPU_ALLOCATOR", "memory_guard"}, {"GPUMEM_MODE", "platform"}}).warnings.empty());
  CHECK(policy_for({{"TF_GPU_ALLOCATOR", "cuda_malloc_async"}}).warnings.empty());
  CHECK(policy_for({}).warnings.empty());
}

TEST_CASE("preallocation head: 1/32 of the limit in 2 MiB units, at most 1 GiB, none below 64 MiB", "[policy]") {
  CHECK(gpumem::preallocation_head_bytes(0) == 0);
  CHECK(gpumem::preallocation_head_bytes(64 * MiB - 256) == 0);
  CHECK(gpumem::preallocation_head_bytes(64 * MiB) == 2 * MiB);
  CHECK(gpumem::preallocation_head_bytes(1024 * MiB) == 32 * MiB);
  CHECK(gpumem::preallocation_head_bytes(100 * MiB) == 2 * MiB);   // 3.125 MiB, down to 2 MiB units
  CHECK(gpumem::preallocation_head_bytes(12 * GiB) == 384 * MiB);
  CHECK(gpumem::preallocation_head_bytes(60 * GiB) == 1024 * MiB);  // capped
}

TEST_CASE("statistics and trace outputs", "[policy]") {
  const Policy defaults = policy_for({});
  CHECK_FALSE(defaults.stats);
  CHECK(defaults.stats_file.empty());
  CHECK(defaults.trace_file.empty());

  const Policy observed = policy_for(
      {{"GPUMEM_STATS", "yes"}, {"GPUMEM_STATS_FILE", " /tmp/stats-%p.json "}, {"GPUMEM_TRACE", "/tmp/t.csv"}});
  CHECK(observed.stats);
  CHECK(observed.stats_origin.variable == "GPUMEM_STATS");
  CHECK(observed.stats_file == "/tmp/stats-%p.json");
  CHECK(observed.stats_file_origin.variable == "GPUMEM_STATS_FILE");
  CHECK(observed.trace_file == "/tmp/t.csv");
  CHECK(observed.trace_file_origin.variable == "GPUMEM_TRACE");
  CHECK_THAT(observed.describe(),
             Catch::EndsWith("stats=on(GPUMEM_STATS) stats_file=\"/tmp/stats-%p.json\"(GPUMEM_STATS_FILE) "
                             "trace=\"/tmp/t.csv\"(GPUMEM_TRACE)"));
  CHECK(error_for({{"GPUMEM_STATS", "maybe"}}) ==
        "gpumem: GPUMEM_STATS=\"maybe\" is not a boolean (1/0, true/false, yes/no, on/off)");
}

TEST_CASE("values that only matter in another mode are accepted", "[policy]") {
  const Policy policy = policy_for({{"GPUMEM_MODE", "platform"},
                                    {"GPUMEM_PREALLOCATE", "1"},
                                    {"GPUMEM_LIMIT", "1GiB"},
                                    {"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "-1"},
                                    {"GPUMEM_GARBAGE_COLLECTION", "0"}});
  CHECK(policy.mode == Mode::platform);
  CHECK(policy.async_prealloc == -1);
}

TEST_CASE("errors: one line per bad variable, values quoted on one line", "[policy]") {
  const PolicyResult result = evaluate({{"GPUMEM_MODE", "nope"}, {"GPUMEM_LOG_LEVEL", "loud"}});
  REQUIRE(result.errors.size() == 2);
  CHECK_THAT(result.errors[0].line, Catch::StartsWith("gpumem: GPUMEM_MODE=\"nope\""));
  CHECK(result.errors[0].variable == "GPUMEM_MODE");
  CHECK_THAT(result.errors[1].line, Catch::StartsWith("gpumem: GPUMEM_LOG_LEVEL=\"loud\""));
  CHECK(result.policy->mode == Mode::bfc);
  CHECK(result.policy->log_level == LogLevel::notice);
  CHECK(error_for({{"GPUMEM_LIMIT", "1\n2"}}).find("\"1\\x0a2\"") != std::string::npos);
}

TEST_CASE("limit_for_device: fraction of total, rounded down to 256", "[policy][limit]") {
  Policy policy;
  CHECK(policy.limit_for_device(16 * GiB, 1 * GiB) == 12 * GiB);  // default 0.75 of total, free unused
  policy.fraction = 0.5;
  CHECK(policy.limit_for_device(1000, 1000) == 256);   // 500 -> 256
  CHECK(policy.limit_for_device(1024, 1024) == 512);
  CHECK(policy.limit_for_device(300, 300) == 0);       // 150 rounds down to nothing
  CHECK(policy.limit_for_device(0, 0) == 0);
  policy.fraction = 0.3;  // stored as 0.29999999999999998890: still exactly 768 of 2560
  CHECK(policy.limit_for_device(2560, 2560) == 768);
  policy.fraction = 1.0;
  CHECK(policy.limit_for_device(80 * GiB + 100, 0) == 80 * GiB);
  policy.fraction = 0.9;
  CHECK(policy.limit_for_device(80 * GiB, 0) == 72 * GiB);
}

TEST_CASE("limit_for_device: fraction of free", "[policy][limit]") {
  Policy policy;
  policy.fraction_of = FractionBasis::free;
  policy.fraction = 0.9;
  CHECK(policy.limit_for_device(16 * GiB, 10 * GiB) == 9 * GiB);
  CHECK(policy.limit_for_device(16 * GiB, 1000) == 768);  // 900, rounded down
  CHECK(policy.limit_for_device(16 * GiB, 0) == 0);
  CHECK(policy.limit_for_device(4 * GiB, 8 * GiB) == 3865470464);  // free above total: total is the basis
}

TEST_CASE("limit_for_device: an explicit limit, capped by the device and rounded", "[policy][limit]") {
  Policy policy;
  policy.limit_bytes = 10 * GiB;
  CHECK(policy.limit_for_device(16 * GiB, 1 * GiB) == 10 * GiB);
  CHECK(policy.limit_for_device(8 * GiB, 8 * GiB) == 8 * GiB);
  policy.limit_bytes = 1000;
  CHECK(policy.limit_for_device(16 * GiB, 16 * GiB) == 768);
  policy.fraction_of = FractionBasis::free;  // irrelevant with an explicit limit
  CHECK(policy.limit_for_device(16 * GiB, 0) == 768);
}

TEST_CASE("describe: defaults", "[policy][describe]") {
  CHECK(policy_for({}).describe() ==
        "mode=bfc(default) preallocate=on(default) limit=0.75 of total(default) free_sync=defer(default) "
        "garbage_collection=on(default) region_source=auto(default) split_rule=tight(default) "
        "async_prealloc=none(default) log_level=notice(default) "
        "log_file=stderr(default) stats=off(default) stats_file=none(default) trace=none(default)");
}

TEST_CASE("describe: every value with its origin", "[policy][describe]") {
  const Policy policy = policy_for({{"TF_GPU_ALLOCATOR", "cuda_malloc_async"},
                                    {"XLA_PYTHON_CLIENT_PREALLOCATE", "false"},
                                    {"XLA_CLIENT_MEM_FRACTION", "0.5"},
                                    {"GPUMEM_FRACTION_OF", "free"},
                                    {"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "-1"},
                                    {"GPUMEM_FREE_SYNC", "sync"},
                                    {"GPUMEM_GARBAGE_COLLECTION", "no"},
                                    {"GPUMEM_LOG_LEVEL", "info"},
                                    {"GPUMEM_LOG_FILE", "/tmp/g.log"}});
  CHECK(policy.describe() ==
        "mode=cuda_async(TF_GPU_ALLOCATOR) preallocate=off(XLA_PYTHON_CLIENT_PREALLOCATE) "
        "limit=0.5(XLA_CLIENT_MEM_FRACTION) of free(GPUMEM_FRACTION_OF) free_sync=sync(GPUMEM_FREE_SYNC) "
        "garbage_collection=off(GPUMEM_GARBAGE_COLLECTION) region_source=auto(default) split_rule=tight(default) "
        "async_prealloc=release_threshold(TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC) "
        "log_level=info(GPUMEM_LOG_LEVEL) log_file=\"/tmp/g.log\"(GPUMEM_LOG_FILE) stats=off(default) "
        "stats_file=none(default) trace=none(default)");
}

TEST_CASE("describe: an explicit limit and async bytes", "[policy][describe]") {
  const std::string line =
      policy_for({{"GPUMEM_LIMIT", "10GiB"}, {"GPUMEM_ASYNC_PREALLOC", "1e9"}, {"GPUMEM_MEM_FRACTION", "0.2"}})
          .describe();
  CHECK_THAT(line, Catch::Contains(" limit=10GiB(GPUMEM_LIMIT) "));
  CHECK_THAT(line, Catch::Contains(" async_prealloc=1000000000B(GPUMEM_ASYNC_PREALLOC) "));
  CHECK_THAT(policy_for({{"GPUMEM_MEM_FRACTION", "0.2"}}).describe(),
             Catch::Contains(" limit=0.2(GPUMEM_MEM_FRACTION) of total(default) "));
}

TEST_CASE("enum names match the variables' spelling", "[policy]") {
  CHECK(gpumem::to_string(Mode::cuda_async) == "cuda_async");
  CHECK(gpumem::to_string(Mode::off) == "off");
  CHECK(gpumem::to_string(FreeSync::none) == "none");
  CHECK(gpumem::to_string(FractionBasis::free) == "free");
  CHECK(gpumem::to_string(LogLevel::trace) == "trace");
}

TEST_CASE("region source and split rule", "[policy][arena]") {
  const Policy defaults = policy_for({});
  CHECK(defaults.region_source == RegionSourceChoice::automatic);
  CHECK(defaults.region_source_origin.variable == "default");
  CHECK(defaults.split_rule == SplitRule::tight);
  const Policy chosen = policy_for({{"GPUMEM_REGION_SOURCE", " Classic "}, {"GPUMEM_SPLIT_RULE", "XLA"}});
  CHECK(chosen.region_source == RegionSourceChoice::classic);
  CHECK(chosen.region_source_origin.variable == "GPUMEM_REGION_SOURCE");
  CHECK(chosen.split_rule == SplitRule::xla);
  CHECK(policy_for({{"GPUMEM_REGION_SOURCE", "vmm"}}).region_source == RegionSourceChoice::vmm);
  CHECK(policy_for({{"GPUMEM_REGION_SOURCE", "auto"}}).region_source == RegionSourceChoice::automatic);
  CHECK(gpumem::max_internal_fragmentation(SplitRule::xla) == std::size_t{128} << 20);
  CHECK(gpumem::max_internal_fragmentation(SplitRule::tight) == 256);
}

TEST_CASE("region source and split rule: invalid values name the variable and the choices", "[policy][arena]") {
  CHECK(error_for({{"GPUMEM_REGION_SOURCE", "mmap"}}) ==
        "gpumem: GPUMEM_REGION_SOURCE=\"mmap\" is not one of auto, vmm, classic");
  CHECK(error_for({{"GPUMEM_SPLIT_RULE", "loose"}}) ==
        "gpumem: GPUMEM_SPLIT_RULE=\"loose\" is not one of tight, xla");
}

TEST_CASE("sharing: off by default, every variable read when set", "[policy][share]") {
  const Policy defaults = policy_for({});
  CHECK_FALSE(defaults.share);
  CHECK(defaults.share_dir.empty());
  CHECK(defaults.share_weight_milli == 1000u);
  CHECK(defaults.share_min_bytes == 0u);
  CHECK(defaults.share_wait_ms == 5000u);
  CHECK(defaults.describe_share().empty());  // the describe() line is unchanged without sharing

  const Policy shared = policy_for({{"GPUMEM_SHARE", "AUTO"},
                                    {"GPUMEM_SHARE_DIR", "/srv/gpumem"},
                                    {"GPUMEM_SHARE_WEIGHT", "2.5"},
                                    {"GPUMEM_SHARE_MIN", "4GiB"},
                                    {"GPUMEM_SHARE_WAIT", "500ms"}});
  CHECK(shared.share);
  CHECK(shared.share_origin.variable == "GPUMEM_SHARE");
  CHECK(shared.share_dir == "/srv/gpumem");
  CHECK(shared.share_weight_milli == 2500u);
  CHECK(shared.share_min_bytes == 4 * GiB);
  CHECK(shared.share_wait_ms == 500u);
  CHECK(shared.describe() == policy_for({}).describe() +
                                 " share=auto(GPUMEM_SHARE) share_dir=\"/srv/gpumem\"(GPUMEM_SHARE_DIR) "
                                 "share_weight=2.5(GPUMEM_SHARE_WEIGHT) share_min=4GiB(GPUMEM_SHARE_MIN) "
                                 "share_wait=500ms(GPUMEM_SHARE_WAIT)");
  CHECK_FALSE(policy_for({{"GPUMEM_SHARE", "off"}}).share);
  CHECK(policy_for({{"GPUMEM_SHARE", "auto"}, {"GPUMEM_SHARE_WAIT", "0"}}).share_wait_ms == 0u);
  // Values of the sharing variables are checked even with sharing off.
  CHECK_THAT(error_for({{"GPUMEM_SHARE_WEIGHT", "0"}}), Catch::Contains("GPUMEM_SHARE_WEIGHT=\"0\""));
}

TEST_CASE("sharing: one error line per bad value", "[policy][share]") {
  CHECK(error_for({{"GPUMEM_SHARE", "yes"}}) ==
        "gpumem: GPUMEM_SHARE=\"yes\" is not one of auto, off");
  CHECK_THAT(error_for({{"GPUMEM_SHARE_DIR", "shared/here"}}),
             Catch::StartsWith("gpumem: GPUMEM_SHARE_DIR=\"shared/here\" is not an absolute path"));
  CHECK_THAT(error_for({{"GPUMEM_SHARE_WEIGHT", "-1"}}),
             Catch::Contains("is not a weight in (0, 1000] with at most three decimals"));
  CHECK_THAT(error_for({{"GPUMEM_SHARE_WEIGHT", "1.0005"}}), Catch::Contains("GPUMEM_SHARE_WEIGHT"));
  CHECK_THAT(error_for({{"GPUMEM_SHARE_MIN", "lots"}}),
             Catch::Contains("GPUMEM_SHARE_MIN=\"lots\" is not a byte size"));
  CHECK_THAT(error_for({{"GPUMEM_SHARE_WAIT", "5"}}),
             Catch::Contains("GPUMEM_SHARE_WAIT=\"5\" is not a duration of at most one hour (e.g. 500ms, 5s, 0)"));
  CHECK_THAT(error_for({{"GPUMEM_SHARE_WAIT", "2h"}}), Catch::Contains("GPUMEM_SHARE_WAIT"));
}

TEST_CASE("GPUMEM_STRICT: any bad value refuses the process", "[policy][strict]") {
  const PolicyResult loose = evaluate({{"GPUMEM_MODE", "bcf"}});
  CHECK_FALSE(loose.strict);
  CHECK_FALSE(loose.refuses());
  REQUIRE(loose.errors.size() == 1);
  CHECK_THAT(loose.errors[0].line, Catch::EndsWith("; ignored: the mode is bfc (default)"));

  const PolicyResult strict = evaluate({{"GPUMEM_MODE", "bcf"}, {"GPUMEM_STRICT", "1"}});
  CHECK(strict.strict);
  CHECK(strict.refuses());
  REQUIRE(strict.errors.size() == 1);
  CHECK_THAT(strict.errors[0].line, Catch::StartsWith("gpumem: GPUMEM_MODE=\"bcf\" is "));
  CHECK_THAT(strict.errors[0].line,
             Catch::EndsWith("; GPUMEM_STRICT is set: every CUDA call fails with CUDA_ERROR_NOT_INITIALIZED"));

  const PolicyResult good = evaluate({{"GPUMEM_STRICT", "yes"}});
  CHECK(good.strict);
  CHECK_FALSE(good.refuses());
  CHECK(good.policy.has_value());

  // A bad GPUMEM_STRICT counts as unset, as any variable: off, and its line says so.
  const PolicyResult bad_strict = evaluate({{"GPUMEM_STRICT", "perhaps"}});
  CHECK_FALSE(bad_strict.strict);
  CHECK_FALSE(bad_strict.refuses());
  REQUIRE(bad_strict.errors.size() == 1);
  CHECK(bad_strict.errors[0].line ==
        "gpumem: GPUMEM_STRICT=\"perhaps\" is not a boolean (1/0, true/false, yes/no, on/off); ignored: GPUMEM_STRICT "
        "is off (default): errors are ignored as said");
}

// --- many ranks: the launcher's variables, GPUMEM_PER_RANK, and limits per device ---

using gpumem::DeviceView;
using gpumem::GpuId;
using gpumem::Launcher;
using gpumem::PerRank;

namespace {

GpuId gpu(std::uint8_t tag) {
  GpuId id{};
  id.fill(tag);
  return id;
}

}  // namespace

TEST_CASE("launcher: none recognised leaves the ranks unknown and the line as it was", "[policy][ranks]") {
  const Policy policy = policy_for({});
  CHECK(policy.ranks.launcher == Launcher::none);
  CHECK_FALSE(policy.ranks.rank.value);
  CHECK_FALSE(policy.ranks.local_rank.value);
  CHECK_FALSE(policy.ranks.local_ranks.value);
  CHECK(policy.describe().find("launcher=") == std::string::npos);
}

TEST_CASE("launcher: what each one sets", "[policy][ranks]") {
  struct Case {
    Environment environment;
    Launcher launcher;
    unsigned rank, local_rank, local_ranks;
    const char* local_ranks_variable;
  };
  const Case cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}},
       Launcher::open_mpi, 5, 1, 4, "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {{{"PMI_RANK", "7"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}}, Launcher::mpich, 7, 2, 3,
       "MPI_LOCALNRANKS"},
      {{{"PMI_RANK", "6"}, {"PMI_LOCAL_RANK", "0"}, {"PMI_LOCAL_SIZE", "8"}}, Launcher::mpich, 6, 0, 8,
       "PMI_LOCAL_SIZE"},
      {{{"SLURM_PROCID", "9"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
        {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_TASKS_PER_NODE", "8"}},
       Launcher::slurm, 9, 1, 2, "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]"},
      {{{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "3"}, {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "4,2"}},
       Launcher::slurm, 3, 3, 4, "SLURM_TASKS_PER_NODE[SLURM_NODEID]"},
      {{{"RANK", "11"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}}, Launcher::torchrun, 11, 3, 4,
       "LOCAL_WORLD_SIZE"},
  };
  for (const Case& c : cases) {
    INFO(c.environment.begin()->first);
    const Policy policy = policy_for(c.environment);
    CHECK(policy.ranks.launcher == c.launcher);
    CHECK(policy.ranks.rank.value == c.rank);
    CHECK(policy.ranks.local_rank.value == c.local_rank);
    CHECK(policy.ranks.local_ranks.value == c.local_ranks);
    CHECK(policy.ranks.local_ranks.variable == c.local_ranks_variable);
  }
}

TEST_CASE("launcher: the innermost wins, and only its variables are read", "[policy][ranks]") {
  // torchrun started by srun: the workers inherit Slurm's variables (one task per node).
  const Environment torchrun_under_srun{{"SLURM_LOCALID", "0"}, {"SLURM_PROCID", "0"},
                                        {"SLURM_TASKS_PER_NODE", "not a list"}, {"LOCAL_RANK", "2"},
                                        {"LOCAL_WORLD_SIZE", "4"}, {"RANK", "6"}};
  const Policy policy = policy_for(torchrun_under_srun);
  CHECK(policy.ranks.launcher == Launcher::torchrun);
  CHECK(policy.ranks.local_rank.value == 2u);
  // mpirun inside a Slurm allocation.
  const Policy mpirun = policy_for({{"SLURM_LOCALID", "0"}, {"SLURM_TASKS_PER_NODE", "8"},
                                    {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  CHECK(mpirun.ranks.launcher == Launcher::open_mpi);
  CHECK(mpirun.ranks.local_ranks.value == 4u);
  // A value the launcher left out stays unknown.
  const Policy partial = policy_for({{"LOCAL_RANK", "1"}});
  CHECK(partial.ranks.launcher == Launcher::torchrun);
  CHECK_FALSE(partial.ranks.local_ranks.value);
  CHECK(partial.ranks.describe() == "torchrun: rank ?, local rank 1(LOCAL_RANK) of ?");
  // Slurm without the node's index: only a one-node list says how many tasks run here.
  CHECK(policy_for({{"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "3"}}).ranks.local_ranks.value == 3u);
  CHECK_FALSE(policy_for({{"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "3(x2)"}}).ranks.local_ranks.value);
}

TEST_CASE("launcher: bad values name the variable", "[policy][ranks]") {
  CHECK(error_for({{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}}) ==
        "gpumem: OMPI_COMM_WORLD_LOCAL_RANK=\"one\" is not a rank (a decimal number, 0 or more)");
  CHECK(error_for({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}}) ==
        "gpumem: LOCAL_WORLD_SIZE=\"0\" is not a number of ranks (a decimal number, 1 or more)");
  CHECK_THAT(error_for({{"PMI_LOCAL_RANK", "-1"}}), Catch::StartsWith("gpumem: PMI_LOCAL_RANK=\"-1\" is not a rank"));
  CHECK_THAT(error_for({{"RANK", "1e3"}, {"LOCAL_RANK", "0"}}), Catch::StartsWith("gpumem: RANK=\"1e3\""));
  CHECK(error_for({{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}) ==
        "gpumem: OMPI_COMM_WORLD_LOCAL_RANK=4 is not below OMPI_COMM_WORLD_LOCAL_SIZE=4, the number of ranks on "
        "this node");
  CHECK_THAT(error_for({{"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3"}}),
             Catch::StartsWith("gpumem: SLURM_STEP_TASKS_PER_NODE=\"2(x3\" is not Slurm's list of tasks per node"));
  CHECK(error_for({{"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}}) ==
        "gpumem: SLURM_NODEID=4 has no entry in SLURM_STEP_TASKS_PER_NODE=\"2(x3),1\"");
  CHECK_THAT(error_for({{"SLURM_LOCALID", "x"}}), Catch::StartsWith("gpumem: SLURM_LOCALID=\"x\""));
  CHECK_THAT(error_for({{"LOCAL_RANK", "99999999999999999999"}}), Catch::StartsWith("gpumem: LOCAL_RANK="));
}

TEST_CASE("slurm_tasks_on_node: the compressed list", "[policy][ranks]") {
  using gpumem::slurm_tasks_on_node;
  CHECK(slurm_tasks_on_node("4", 0) == 4u);
  CHECK_FALSE(slurm_tasks_on_node("4", 1));
  for (unsigned node = 0; node < 3; ++node) CHECK(slurm_tasks_on_node("2(x3),1", node) == 2u);
  CHECK(slurm_tasks_on_node("2(x3),1", 3) == 1u);
  CHECK_FALSE(slurm_tasks_on_node("2(x3),1", 4));
  CHECK(slurm_tasks_on_node("1,3(x2), 5", 3) == 5u);
  for (const char* bad : {"", "2(x0)", "2(x)", "(x2)", "2,,1", "2(x3", "x", "2(y3)", "-1", "2(x3),1a"}) {
    INFO(bad);
    CHECK_FALSE(slurm_tasks_on_node(bad, 0));
  }
}

TEST_CASE("local_ranks_on_gpu: counted by the GPU's identity", "[policy][ranks]") {
  using gpumem::local_ranks_on_gpu;
  const std::vector<GpuId> one{gpu(1)};
  const std::vector<GpuId> two{gpu(1), gpu(2)};
  CHECK(local_ranks_on_gpu(4, one, 0) == 4);  // four ranks, one GPU
  CHECK(local_ranks_on_gpu(4, two, 0) == 2);  // each rank takes visible[rank % 2]
  CHECK(local_ranks_on_gpu(4, two, 1) == 2);
  CHECK(local_ranks_on_gpu(3, two, 0) == 2);
  CHECK(local_ranks_on_gpu(3, two, 1) == 1);
  CHECK(local_ranks_on_gpu(1, std::vector<GpuId>{gpu(1), gpu(2), gpu(3), gpu(4)}, 3) == 1);  // none maps: this one
  // One GPU listed twice (its UUID, whatever the ordinals): every rank on either ordinal shares it.
  CHECK(local_ranks_on_gpu(4, std::vector<GpuId>{gpu(7), gpu(8), gpu(7)}, 2) == 3);
  CHECK(local_ranks_on_gpu(4, {}, 0) == 1);
  CHECK(local_ranks_on_gpu(4, two, 5) == 1);
}

TEST_CASE("GPUMEM_PER_RANK: auto, off or a number", "[policy][ranks]") {
  CHECK(policy_for({}).per_rank == PerRank::off);
  const Policy automatic = policy_for({{"GPUMEM_PER_RANK", "Auto"}});
  CHECK(automatic.per_rank == PerRank::automatic);
  CHECK(automatic.per_rank_origin.variable == "GPUMEM_PER_RANK");
  CHECK(policy_for({{"GPUMEM_PER_RANK", "off"}}).per_rank == PerRank::off);
  const Policy fixed = policy_for({{"GPUMEM_PER_RANK", "3"}});
  CHECK(fixed.per_rank == PerRank::fixed);
  CHECK(fixed.per_rank_divisor == 3u);
  for (const char* bad : {"0", "yes", "1025", "-2", "2.5"}) {
    INFO(bad);
    CHECK(error_for({{"GPUMEM_PER_RANK", bad}}) ==
          std::string("gpumem: GPUMEM_PER_RANK=\"") + bad +
              "\" is not auto, off or a number of ranks per GPU from 1 to 1024");
  }
}

TEST_CASE("ranks_sharing_gpu: per GPUMEM_PER_RANK", "[policy][ranks]") {
  const std::vector<GpuId> two{gpu(1), gpu(2)};
  const Environment open_mpi{{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  CHECK(policy_for(open_mpi).ranks_sharing_gpu(two, 0) == 1);  // off: every rank as if alone
  Environment automatic = open_mpi;
  automatic["GPUMEM_PER_RANK"] = "auto";
  CHECK(policy_for(automatic).ranks_sharing_gpu(two, 0) == 2);
  CHECK(policy_for(automatic).ranks_sharing_gpu(std::vector<GpuId>{gpu(1)}, 0) == 4);
  CHECK(policy_for({{"GPUMEM_PER_RANK", "auto"}}).ranks_sharing_gpu(two, 0) == 1);  // no launcher: alone
  Environment fixed = open_mpi;
  fixed["GPUMEM_PER_RANK"] = "3";
  CHECK(policy_for(fixed).ranks_sharing_gpu(two, 1) == 3);
}

TEST_CASE("device_limit: the fraction split among the ranks on the GPU", "[policy][ranks][limit]") {
  const Policy policy = policy_for({{"GPUMEM_PER_RANK", "auto"}});
  const gpumem::DeviceLimit limit = policy.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 4});
  CHECK(limit.bytes == 3 * GiB);
  CHECK(limit.derivation ==
        "device 0: limit 3221225472 bytes: 0.75 of total(default) 17179869184 / 4 ranks on this "
        "GPU(GPUMEM_PER_RANK)");
  CHECK(policy.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1}).bytes == 12 * GiB);
  // Off: a view's sharers change nothing.
  CHECK(policy_for({}).device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 4}).bytes == 12 * GiB);
  // An explicit limit is this process's: not divided.
  CHECK(policy_for({{"GPUMEM_PER_RANK", "auto"}, {"GPUMEM_LIMIT", "5GiB"}})
            .device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 4})
            .bytes == 5 * GiB);
  // Rounded down to a granule after the division.
  CHECK(policy_for({{"GPUMEM_PER_RANK", "3"}, {"GPUMEM_MEM_FRACTION", "1"}})
            .device_limit(DeviceView{0, 4096, 4096, 3})
            .bytes == 1280);
}

TEST_CASE("GPUMEM_LIMIT per device", "[policy][limit]") {
  const Policy policy = policy_for({{"GPUMEM_LIMIT", "0=10GiB, 1 = 20GiB"}});
  CHECK_FALSE(policy.limit_bytes);
  CHECK(policy.limit_origin.variable == "GPUMEM_LIMIT");
  CHECK(policy.device_limit(DeviceView{0, 80 * GiB, 80 * GiB, 1}).bytes == 10 * GiB);
  CHECK(policy.device_limit(DeviceView{1, 80 * GiB, 80 * GiB, 1}).bytes == 20 * GiB);
  CHECK(policy.device_limit(DeviceView{1, 16 * GiB, 16 * GiB, 1}).bytes == 16 * GiB);  // the device's size
  CHECK(policy.device_limit(DeviceView{2, 80 * GiB, 80 * GiB, 1}).bytes == 60 * GiB);  // not listed: fraction
  CHECK(policy.device_limit(DeviceView{1, 80 * GiB, 80 * GiB, 1}).derivation ==
        "device 1: limit 21474836480 bytes: 20GiB(GPUMEM_LIMIT for device 1)");
  CHECK_THAT(policy.describe(), Catch::Contains(" limit=0=10GiB,1=20GiB(GPUMEM_LIMIT), else 0.75 of total(default) "));
  for (const char* bad : {"0=10GiB,1=", "0=100", "64=1G", "a=1G", "0=1G,,1=1G", "0=1G;1=2G", "=1G"}) {
    INFO(bad);
    CHECK_THAT(error_for({{"GPUMEM_LIMIT", bad}}),
               Catch::StartsWith(std::string("gpumem: GPUMEM_LIMIT=\"") + bad + "\" is not a byte size of at "
                                                                                "least 256"));
  }
  CHECK(error_for({{"GPUMEM_LIMIT", "0=1G,0=2G"}}) ==
        "gpumem: GPUMEM_LIMIT=\"0=1G,0=2G\" is a list that names device 0 twice");
}

TEST_CASE("cluster limits: HAMi's units and names", "[policy][limit][cluster]") {
  using gpumem::parse_hami_size;
  CHECK(parse_hami_size("1g") == GiB);
  CHECK(parse_hami_size("1000m") == 1000 * MiB);
  CHECK(parse_hami_size("4096") == std::size_t{4096});  // plain digits: bytes, as HAMi-core reads them
  CHECK(parse_hami_size("8K") == 8 * std::size_t{1024});
  for (const char* bad : {"", "0", "0m", "1.5g", "10GiB", "g", "-1g", "0x10", "99999999999999999999g"}) {
    INFO(bad);
    CHECK_FALSE(parse_hami_size(bad));
  }
  const Policy policy = policy_for({{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "3000m"}});
  CHECK(policy.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1}).bytes == 4 * GiB);
  CHECK(policy.device_limit(DeviceView{1, 16 * GiB, 16 * GiB, 1}).bytes == 3000 * MiB);
  CHECK(policy.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1}).derivation ==
        "device 0: limit 4294967296 bytes: 0.75 of total(default) 17179869184; bounded by "
        "CUDA_DEVICE_MEMORY_LIMIT=4g = 4294967296 (the lowest, in force)");
  // Above the fraction: named, not in force.
  CHECK(policy.device_limit(DeviceView{0, 4 * GiB, 4 * GiB, 1}).bytes == 3 * GiB);
  CHECK_THAT(policy.describe(), Catch::EndsWith(" cluster_limits=CUDA_DEVICE_MEMORY_LIMIT=4g,"
                                                "CUDA_DEVICE_MEMORY_LIMIT_1=3000m"));
  CHECK(error_for({{"CUDA_DEVICE_MEMORY_LIMIT_3", "1.5g"}}) ==
        "gpumem: CUDA_DEVICE_MEMORY_LIMIT_3=\"1.5g\" is not a memory size as HAMi writes it (digits and an "
        "optional k, m or g for KiB, MiB, GiB; plain digits are bytes; above 0)");
  CHECK_THAT(error_for({{"CUDA_DEVICE_MEMORY_LIMIT", "100"}}), Catch::StartsWith("gpumem: CUDA_DEVICE_MEMORY_LIMIT="));
}

TEST_CASE("cluster limits: MPS's list and the lowest winning", "[policy][limit][cluster]") {
  const Policy policy = policy_for({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=2G"}});
  CHECK(policy.device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 1}).bytes == GiB);
  CHECK(policy.device_limit(DeviceView{1, 16 * GiB, 16 * GiB, 1}).bytes == 2 * GiB);
  CHECK(policy.device_limit(DeviceView{2, 16 * GiB, 16 * GiB, 1}).bytes == 12 * GiB);
  CHECK(policy_for({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "512MB"}})
            .device_limit(DeviceView{3, 16 * GiB, 16 * GiB, 1})
            .bytes == 512'000'000 / 256 * 256);
  CHECK_THAT(error_for({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1"}}),
             Catch::StartsWith("gpumem: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=\"0=1G,1\" is not a list of DEVICE=SIZE"));
  CHECK_THAT(error_for({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1=1G,1=1G"}}), Catch::Contains("names device 1 twice"));

  // Every source at once, four ranks on the GPU: HAMi's container-wide limit is split, MPS's
  // per-process limit is not; the lowest wins.
  const Environment all{{"GPUMEM_PER_RANK", "auto"},
                        {"CUDA_DEVICE_MEMORY_LIMIT", "8g"},
                        {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=3G"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  const gpumem::DeviceLimit limit = policy_for(all).device_limit(DeviceView{0, 80 * GiB, 80 * GiB, 4});
  CHECK(limit.bytes == 2 * GiB);
  CHECK(limit.derivation ==
        "device 0: limit 2147483648 bytes: 0.75 of total(default) 85899345920 / 4 ranks on this "
        "GPU(GPUMEM_PER_RANK); bounded by CUDA_DEVICE_MEMORY_LIMIT=8g / 4 ranks = 2147483648 (the lowest, in "
        "force), CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=3G = 3221225472");
  CHECK_THAT(policy_for(all).describe(),
             Catch::Contains(" per_rank=auto(GPUMEM_PER_RANK) launcher=[Open MPI: rank ?, local rank "
                             "0(OMPI_COMM_WORLD_LOCAL_RANK) of 4(OMPI_COMM_WORLD_LOCAL_SIZE)] cluster_limits="
                             "CUDA_DEVICE_MEMORY_LIMIT=8g,CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3G"));
}

TEST_CASE("device_limit: below one granule leaves the device unmanaged, with the reason", "[policy][limit]") {
  const Policy policy = policy_for({{"GPUMEM_PER_RANK", "4"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1000"}});
  const DeviceView view{2, 16 * GiB, 16 * GiB, 4};
  CHECK(policy.device_limit(view).bytes == 0);  // 1000 / 4 = 250 bytes
  const std::string error = policy.limit_below_granule_error(view);
  CHECK_THAT(error, Catch::StartsWith("device 2: limit 0 bytes: "));
  CHECK_THAT(error, Catch::EndsWith("less than one 256-byte granule; device 2's memory is not managed"));
  // The fraction alone: the fraction's own message.
  const Policy tiny = policy_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "1e-9"}});
  CHECK(tiny.limit_below_granule_error(DeviceView{1, 16 * GiB, 16 * GiB, 1}) ==
        tiny.limit_below_granule_error(1, 16 * GiB, 16 * GiB));
}

// --- scoped errors: a bad value configures nothing but its own setting ---

namespace {

struct ScopedCase {
  const char* variable;
  const char* bad;
  Environment companions;  // what the case needs besides (a launcher's recognising variable)
  const char* fallback;    // the end of the error line, after "; ignored: "
  bool same_as_unset;      // the policy is the one without the variable
};

// Every variable the policy reads that has a bad value (paths take any text), with GPUMEM_LIMIT=1GiB
// set beside it: the cap stays whatever else is wrong.
const ScopedCase kScopedCases[] = {
    {"GPUMEM_MODE", "fast", {}, "the mode is bfc (default)", true},
    {"XLA_PYTHON_CLIENT_ALLOCATOR", "fast", {}, "the mode is bfc (default)", true},
    {"TF_GPU_ALLOCATOR", "fast", {}, "the mode is bfc (default)", true},
    {"GPUMEM_PREALLOCATE", "maybe", {}, "preallocation is on (default)", true},
    {"XLA_PYTHON_CLIENT_PREALLOCATE", "flase", {}, "preallocation is on (default)", true},
    {"TF_FORCE_GPU_ALLOW_GROWTH", "maybe", {}, "preallocation is on (default)", true},
    {"GPUMEM_MEM_FRACTION", "1.5", {}, "the limit is 1GiB (GPUMEM_LIMIT)", true},
    {"XLA_CLIENT_MEM_FRACTION", "75%", {}, "the limit is 1GiB (GPUMEM_LIMIT)", true},
    {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0", {}, "the limit is 1GiB (GPUMEM_LIMIT)", true},
    {"GPUMEM_FRACTION_OF", "available", {}, "the fraction is of total (default) memory", true},
    {"GPUMEM_ASYNC_PREALLOC", "lots", {}, "no cuda_async warm-up (default)", true},
    {"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "-2", {}, "no cuda_async warm-up (default)", true},
    {"GPUMEM_FREE_SYNC", "later", {}, "free_sync is defer (default)", true},
    {"GPUMEM_GARBAGE_COLLECTION", "maybe", {}, "garbage collection is on (default)", true},
    {"GPUMEM_REGION_SOURCE", "mmap", {}, "the region source is auto (default)", true},
    {"GPUMEM_SPLIT_RULE", "loose", {}, "the split rule is tight (default)", true},
    {"GPUMEM_LOG_LEVEL", "loud", {}, "the log level is notice (default)", true},
    {"GPUMEM_STATS", "maybe", {}, "the statistics table is off (default)", true},
    {"GPUMEM_SHARE", "yes", {}, "sharing is off (default)", true},
    {"GPUMEM_SHARE_DIR", "shared/here", {}, "the ledgers are in the default directory", true},
    {"GPUMEM_SHARE_WEIGHT", "0", {}, "the weight is 1 (default)", true},
    {"GPUMEM_SHARE_MIN", "lots", {}, "the floor is 0B (default)", true},
    {"GPUMEM_SHARE_WAIT", "5", {}, "the wait is 5000ms (default)", true},
    {"GPUMEM_PER_RANK", "yes", {}, "ranks split each GPU as with GPUMEM_PER_RANK=auto; the limit is 1GiB (GPUMEM_LIMIT)",
     false},
    {"GPUMEM_STRICT", "perhaps", {}, "GPUMEM_STRICT is off (default): errors are ignored as said", true},
    {"CUDA_DEVICE_MEMORY_LIMIT", "1.5g", {}, "the limit is 1GiB (GPUMEM_LIMIT)", true},
    {"CUDA_DEVICE_MEMORY_LIMIT_1", "lots", {}, "the limit is 1GiB (GPUMEM_LIMIT)", true},
    {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1", {}, "the limit is 1GiB (GPUMEM_LIMIT)", true},
    {"LOCAL_RANK", "abc", {}, "the launcher's local rank is unknown", false},
    {"RANK", "abc", {{"LOCAL_RANK", "0"}}, "the launcher's rank is unknown", true},
    {"LOCAL_WORLD_SIZE", "0", {{"LOCAL_RANK", "0"}}, "the launcher's number of local ranks is unknown", true},
    {"OMPI_COMM_WORLD_RANK", "abc", {{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}, "the launcher's rank is unknown", true},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "abc", {}, "the launcher's local rank is unknown", false},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "abc", {{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
     "the launcher's number of local ranks is unknown", true},
    {"MPI_LOCALRANKID", "abc", {}, "the launcher's local rank is unknown", false},
    {"PMI_LOCAL_RANK", "abc", {}, "the launcher's local rank is unknown", false},
    {"PMI_RANK", "abc", {{"PMI_LOCAL_RANK", "0"}}, "the launcher's rank is unknown", true},
    {"MPI_LOCALNRANKS", "abc", {{"MPI_LOCALRANKID", "0"}}, "the launcher's number of local ranks is unknown", true},
    {"PMI_LOCAL_SIZE", "abc", {{"PMI_LOCAL_RANK", "0"}}, "the launcher's number of local ranks is unknown", true},
    {"SLURM_LOCALID", "abc", {}, "the launcher's local rank is unknown", false},
    {"SLURM_PROCID", "abc", {{"SLURM_LOCALID", "0"}}, "the launcher's rank is unknown", true},
    {"SLURM_NODEID", "abc", {{"SLURM_LOCALID", "0"}}, "the launcher's node index is unknown", true},
    {"SLURM_STEP_TASKS_PER_NODE", "x", {{"SLURM_LOCALID", "0"}}, "the launcher's number of local ranks is unknown",
     true},
    {"SLURM_TASKS_PER_NODE", "x", {{"SLURM_LOCALID", "0"}}, "the launcher's number of local ranks is unknown", true},
};

}  // namespace

TEST_CASE("scoped errors: a bad value of any variable changes its own setting alone, never the cap",
          "[policy][scoped]") {
  for (const ScopedCase& c : kScopedCases) {
    INFO(c.variable << "=" << c.bad);
    Environment base = c.companions;
    base["GPUMEM_LIMIT"] = "1GiB";
    Environment environment = base;
    environment[c.variable] = c.bad;
    CHECK(fallback_for(environment) == c.fallback);
    CHECK_THAT(error_for(environment), Catch::StartsWith(std::string("gpumem: ") + c.variable + "=\""));
    const PolicyResult result = evaluate(environment);
    CHECK_FALSE(result.refuses());
    CHECK(result.policy->mode == Mode::bfc);
    // The cap GPUMEM_LIMIT sets holds on every device, whatever the launcher says.
    for (int device = 0; device < 2; ++device) {
      CHECK(result.policy->device_limit(DeviceView{device, 16 * GiB, 16 * GiB, 4}).bytes == GiB);
    }
    if (c.same_as_unset) CHECK(result.policy->describe() == policy_for(base).describe());
  }
}

TEST_CASE("scoped errors: the variables that take any text have no bad value", "[policy][scoped]") {
  for (const char* name : {"GPUMEM_LOG_FILE", "GPUMEM_STATS_FILE", "GPUMEM_TRACE"}) {
    INFO(name);
    CHECK(evaluate({{name, "a b/%p\t!"}}).errors.empty());
  }
}

TEST_CASE("scoped errors: a stray LOCAL_RANK keeps GPUMEM_LIMIT's cap", "[policy][scoped][ranks]") {
  const PolicyResult result = evaluate({{"LOCAL_RANK", "abc"}, {"GPUMEM_LIMIT", "1GiB"}});
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].line ==
        "gpumem: LOCAL_RANK=\"abc\" is not a rank (a decimal number, 0 or more); ignored: the launcher's local rank "
        "is unknown");
  CHECK(result.policy->ranks.launcher == Launcher::torchrun);
  CHECK_FALSE(result.policy->ranks.local_rank.value);
  CHECK(result.policy->device_limit(DeviceView{0, 2 * GiB, 2 * GiB, 1}).bytes == GiB);
}

TEST_CASE("scoped errors: a bad cap leaves the process under the other bounds", "[policy][scoped][limit]") {
  const DeviceView view{0, 16 * GiB, 16 * GiB, 1};
  // No other bound: the default fraction.
  CHECK(fallback_for({{"GPUMEM_LIMIT", "1GX"}}) == "the limit is 0.75 (default) of each device's total memory");
  CHECK(evaluate({{"GPUMEM_LIMIT", "1GX"}}).policy->device_limit(view).bytes == 12 * GiB);
  // A fraction given: that fraction, and a cluster's bound below it.
  CHECK(evaluate({{"GPUMEM_LIMIT", "0=1G,0=2G"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.25"}})
            .policy->device_limit(view)
            .bytes == 4 * GiB);
  const Environment bounded{{"GPUMEM_LIMIT", "ten"}, {"CUDA_DEVICE_MEMORY_LIMIT", "2g"}};
  CHECK(fallback_for(bounded) ==
        "the limit is 0.75 (default) of each device's total memory, at most CUDA_DEVICE_MEMORY_LIMIT=2g");
  CHECK(evaluate(bounded).policy->device_limit(view).bytes == 2 * GiB);
  // A bad HAMi limit for one device: that device keeps the container-wide one.
  const PolicyResult hami = evaluate({{"CUDA_DEVICE_MEMORY_LIMIT", "3g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "3.5g"}});
  REQUIRE(hami.errors.size() == 1);
  CHECK(hami.policy->device_limit(DeviceView{1, 16 * GiB, 16 * GiB, 1}).bytes == 3 * GiB);
  // A bad fraction: the next name in precedence order, else the default.
  const PolicyResult fraction = evaluate({{"GPUMEM_MEM_FRACTION", "half"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}});
  CHECK(fraction.policy->fraction == 0.5);
  CHECK(fraction.policy->fraction_origin.variable == "XLA_PYTHON_CLIENT_MEM_FRACTION");
  CHECK_THAT(fraction.errors.at(0).line,
             Catch::EndsWith("; ignored: the limit is 0.5 (XLA_PYTHON_CLIENT_MEM_FRACTION) of each device's total memory"));
}

TEST_CASE("scoped errors: a bad value falls back to the next variable of its setting", "[policy][scoped]") {
  const PolicyResult mode = evaluate({{"GPUMEM_MODE", "bcf"}, {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}});
  CHECK(mode.policy->mode == Mode::platform);
  CHECK_THAT(mode.errors.at(0).line, Catch::EndsWith("; ignored: the mode is platform (XLA_PYTHON_CLIENT_ALLOCATOR)"));
  // A launcher's value given twice: the valid one counts.
  const PolicyResult pmi = evaluate({{"MPI_LOCALRANKID", "x"}, {"PMI_LOCAL_RANK", "2"}, {"PMI_LOCAL_SIZE", "4"}});
  CHECK(pmi.policy->ranks.local_rank.value == 2u);
  CHECK_THAT(pmi.errors.at(0).line, Catch::EndsWith("; ignored: the launcher's local rank is 2 (PMI_LOCAL_RANK)"));
}

TEST_CASE("scoped errors: GPUMEM_PER_RANK falls back to auto, so ranks still split their GPU", "[policy][scoped]") {
  const PolicyResult result = evaluate({{"GPUMEM_PER_RANK", "atuo"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  CHECK(result.policy->per_rank == PerRank::automatic);
  CHECK(result.policy->ranks_sharing_gpu(std::vector<GpuId>{gpu(1)}, 0) == 4);
  CHECK(result.policy->device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 4}).bytes == 3 * GiB);
  CHECK_THAT(result.errors.at(0).line,
             Catch::EndsWith("; ignored: ranks split each GPU as with GPUMEM_PER_RANK=auto; the limit is 0.75 (default) "
                             "of each device's total memory, split between the ranks on its GPU (GPUMEM_PER_RANK)"));
}

TEST_CASE("scoped errors: a local rank not below the count leaves the count", "[policy][scoped][ranks]") {
  const PolicyResult result = evaluate({{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  CHECK_FALSE(result.policy->ranks.local_rank.value);
  CHECK(result.policy->ranks.local_ranks.value == 4u);
}

TEST_CASE("limits naming devices the process does not see", "[policy][limit]") {
  const Policy policy = policy_for({{"GPUMEM_LIMIT", "0=1GiB,3=1GiB"},
                                    {"CUDA_DEVICE_MEMORY_LIMIT_2", "1g"},
                                    {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1G"}});
  CHECK(policy.limits_for_missing_devices(4).empty());
  const std::vector<std::string> one = policy.limits_for_missing_devices(1);
  REQUIRE(one.size() == 2);
  CHECK(one[0] == "GPUMEM_LIMIT's list names device 3, but this process sees 1 device (0); that limit "
                  "applies to no device");
  CHECK(one[1] == "CUDA_DEVICE_MEMORY_LIMIT_2 names device 2, but this process sees 1 device (0); that "
                  "limit applies to no device");
  CHECK_THAT(policy.limits_for_missing_devices(3).at(0), Catch::Contains("sees 3 devices (0 to 2)"));
}

TEST_CASE("device_limit: the short summary for the start line", "[policy][limit]") {
  const DeviceView view{0, 16 * GiB, 16 * GiB, 1};
  CHECK(policy_for({}).device_limit(view).summary == "0.75 of 16 GiB, default");
  CHECK(policy_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}, {"GPUMEM_FRACTION_OF", "free"}})
            .device_limit(DeviceView{0, 16 * GiB, 10 * GiB, 1})
            .summary == "0.5 of 10 GiB free, XLA_PYTHON_CLIENT_MEM_FRACTION");
  CHECK(policy_for({{"GPUMEM_PER_RANK", "2"}}).device_limit(DeviceView{0, 16 * GiB, 16 * GiB, 2}).summary ==
        "0.75 of 16 GiB / 2 ranks, default");
  CHECK(policy_for({{"GPUMEM_LIMIT", "1GiB"}}).device_limit(view).summary == "GPUMEM_LIMIT");
  CHECK(policy_for({{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}).device_limit(view).summary == "CUDA_DEVICE_MEMORY_LIMIT");
}

TEST_CASE("human_byte_size", "[policy]") {
  CHECK(gpumem::human_byte_size(12 * GiB) == "12 GiB");
  CHECK(gpumem::human_byte_size(3 * GiB / 2) == "1.5 GiB");
  CHECK(gpumem::human_byte_size(512) == "512 B");
  CHECK(gpumem::human_byte_size(1'000'000'000) == "953.7 MiB");
}
