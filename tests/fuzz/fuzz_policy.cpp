// The environment policy over arbitrary values: every variable the policy reads may be set to
// anything (empty, blank, huge, negative, NaN, non-ASCII, invalid UTF-8). Checks: the result is
// either a policy or exactly one error line that starts with "gpumem: ", names a variable the
// policy reads and holds no newline; a policy's limit for any device is a multiple of 256 no larger
// than the device; describe() and the below-granule error line hold no newline; nothing throws.
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
    "GPUMEM_LOG_FILE", "GPUMEM_STATS", "GPUMEM_STATS_FILE", "GPUMEM_TRACE"};

// Values the mutator would take long to find on its own, picked by the input now and then.
constexpr std::string_view kHostile[] = {"", " ", "\t", "nan", "-inf", "1e309", "-1", "0", "0x10", "18446744073709551616",
                                         "1.5", "255", "256", "1e-320", "\xff\xfe", "on", "platform", "1GiB"};

bool names_a_variable(const std::string& line) {
  for (std::string_view name : kVariables) {
    if (line.find(name) != std::string::npos) return true;
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
        in.below(4) == 0 ? std::string(kHostile[in.below(std::size(kHostile))]) : in.text(40);
  }
  const gpumem::PolicyResult result =
      gpumem::policy_from_environment([&](std::string_view name) -> std::optional<std::string_view> {
        const auto found = environment.find(name);
        if (found == environment.end()) return std::nullopt;
        return std::string_view(found->second);
      });
  check(result.policy.has_value() != !result.error.empty());
  if (!result.policy) {
    check(result.error.rfind("gpumem: ", 0) == 0);
    check(result.error.find('\n') == std::string::npos);
    check(names_a_variable(result.error));
    return 0;
  }
  const gpumem::Policy& policy = *result.policy;
  for (int i = 0; i < 4; ++i) {
    const std::size_t total = in.take<std::uint64_t>();
    const std::size_t free = in.take<std::uint64_t>();
    const std::size_t limit = policy.limit_for_device(total, free);
    check(limit % 256 == 0 && limit <= total);
    if (limit == 0) check(policy.limit_below_granule_error(i, total, free).find('\n') == std::string::npos);
  }
  check(policy.describe().find('\n') == std::string::npos);
  for (const std::string& warning : policy.warnings) check(warning.find('\n') == std::string::npos);
  return 0;
}
