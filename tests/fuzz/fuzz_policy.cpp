// The environment policy over arbitrary values: every variable the policy reads may be set to
// anything (empty, blank, huge, negative, NaN, inf, non-ASCII, invalid UTF-8, embedded newlines).
// Checks: the result is always a policy, with one error line per bad variable that starts with
// "gpumem: ", names a variable the environment sets (not blank) and holds no newline; errors are
// scoped: the policy is the one of the same environment without the bad variables (a bad value counts
// as unset; GPUMEM_PER_RANK, which falls back to auto, and a launcher's variables, which recognise
// it, aside); a policy's limit for any device
// is a multiple of 256 no larger than the device: GPUMEM_LIMIT when set, else the fraction of the
// basis to within a granule; the preallocation head is at most 1/32 of the limit; describe(), the
// warnings and the below-granule error line are single lines; nothing throws.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "policy/policy.h"

namespace {

using gpumem::fuzz::check;

constexpr std::string_view kVariables[] = {
    "GPUMEM_MODE", "XLA_PYTHON_CLIENT_ALLOCATOR", "TF_GPU_ALLOCATOR", "GPUMEM_PREALLOCATE",
    "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH", "GPUMEM_LIMIT", "GPUMEM_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "GPUMEM_FRACTION_OF", "GPUMEM_ASYNC_PREALLOC",
    "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "GPUMEM_FREE_SYNC", "GPUMEM_GARBAGE_COLLECTION", "GPUMEM_LOG_LEVEL",
    "GPUMEM_LOG_FILE", "GPUMEM_STATS", "GPUMEM_STATS_FILE", "GPUMEM_TRACE", "GPUMEM_REGION_SOURCE",
    "GPUMEM_SPLIT_RULE", "GPUMEM_PER_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_DEVICE_MEMORY_LIMIT",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPUMEM_SHARE", "GPUMEM_SHARE_WEIGHT", "GPUMEM_SHARE_WAIT"};

// Values the mutator would take long to find on its own, picked by the input now and then.
constexpr std::string_view kHostile[] = {
    "", " ", "\t", " \r\n", "nan", "NaN", "inf", "-inf", "1e309", "-1", "-0", "0", "0.0", "0x10",
    "18446744073709551615", "18446744073709551616", "99999999999999999999999", "1.5", "1", "0.5", "1e-9",
    "255", "256", "1e-320", "16E", "\xff\xfe", "\xef\xbc\x91", "1\n0", "on", "OFF", "platform",
    "cuda_malloc_async", "memory_guard", "free", "1GiB", " 1.5G ", "%p"};

// Whether `line` names a variable that `environment` sets to something other than blanks.
bool names_a_set_variable(const std::string& line, const std::map<std::string, std::string, std::less<>>& environment) {
  for (const auto& [name, value] : environment) {
    if (value.find_first_not_of(" \t\r\n") != std::string::npos && line.find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gpumem::fuzz::Input in(data, size);
  std::map<std::string, std::string, std::less<>> environment;
  const std::size_t count = in.below(8);
  for (std::size_t i = 0; i < count; ++i) {
    const std::string_view name = kVariables[in.below(std::size(kVariables))];
    environment[std::string(name)] =
        in.below(4) == 0 ? std::string(kHostile[in.below(std::size(kHostile))]) : in.text(64);
  }
  const auto evaluate = [](const std::map<std::string, std::string, std::less<>>& variables) {
    return gpumem::policy_from_environment([&](std::string_view name) -> std::optional<std::string_view> {
      const auto found = variables.find(name);
      if (found == variables.end()) return std::nullopt;
      return std::string_view(found->second);
    });
  };
  const gpumem::PolicyResult result = evaluate(environment);
  check(result.policy.has_value());
  check(!result.refuses());  // GPUMEM_STRICT is never set here
  bool comparable = true;
  std::map<std::string, std::string, std::less<>> without_bad = environment;
  for (const gpumem::PolicyError& error : result.errors) {
    check(error.line.rfind("gpumem: ", 0) == 0);
    check(error.line.find('\n') == std::string::npos);
    check(names_a_set_variable(error.line, environment));
    check(environment.contains(error.variable));
    if (error.variable == "GPUMEM_PER_RANK" || error.variable == "LOCAL_RANK" ||
        error.line.find(" disagree; ") != std::string::npos) {
      comparable = false;
    }
    without_bad.erase(error.variable);
  }
  if (comparable && !result.errors.empty()) {
    const gpumem::PolicyResult clean = evaluate(without_bad);
    check(clean.errors.empty());
    check(clean.policy->describe() == result.policy->describe());
    check(clean.policy->describe_limit() == result.policy->describe_limit());
  }
  const gpumem::Policy& policy = *result.policy;
  for (int i = 0; i < 4; ++i) {
    const std::size_t total = in.take<std::uint64_t>();
    const std::size_t free = in.take<std::uint64_t>();
    const std::size_t limit = policy.limit_for_device(total, free);
    check(limit % 256 == 0 && limit <= total);
    if (policy.limit_bytes) {
      check(limit == std::min(*policy.limit_bytes, total) / 256 * 256);
    } else {
      check(policy.fraction > 0.0 && policy.fraction <= 1.0);
      const std::size_t basis = policy.fraction_of == gpumem::FractionBasis::total ? total : std::min(free, total);
      const long double wanted =
          std::min(static_cast<long double>(policy.fraction) * basis, static_cast<long double>(total));
      const long double got = static_cast<long double>(limit);
      check(got <= wanted + 1 && got + 257 > wanted);
    }
    const std::size_t head = gpumem::preallocation_head_bytes(limit);
    check(head % (std::size_t{2} << 20) == 0 && head <= limit / 32);
    if (limit == 0) check(policy.limit_below_granule_error(i, total, free).find('\n') == std::string::npos);
  }
  const std::string description = policy.describe();
  check(!description.empty() && description.find('\n') == std::string::npos);
  for (const std::string& warning : policy.warnings) {
    check(warning.rfind("gpumem: ", 0) == 0 && warning.find('\n') == std::string::npos);
  }
  return 0;
}
