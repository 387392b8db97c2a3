// Prints the memory policy this process's environment gives, exactly as the shim derives it: the
// describe() line (exit 0), or the error lines then the describe() line (exit 3). Lets the wrapper's
// tests check that what gpumem-run exports is what the policy reads.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "policy/policy.h"

int main() {
  const gpumem::PolicyResult result =
      gpumem::policy_from_environment([](std::string_view name) -> std::optional<std::string_view> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) return std::nullopt;
        return std::string_view(value);
      });
  for (const gpumem::PolicyError& error : result.errors) std::puts(error.line.c_str());
  std::puts(result.policy->describe().c_str());
  return result.errors.empty() ? 0 : 3;
}
