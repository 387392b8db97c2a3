// Byte limits given per device: GPUMEM_LIMIT's list form ("0=10GiB,1=20GiB"), the limits a cluster
// set for the container, which bound the budget (HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>], NVIDIA MPS's
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), and a framework's cap on its own pool, which gpumem applies in its
// place (CuPy's CUPY_GPU_MEMORY_LIMIT, docs/frameworks.md). Pure functions of the environment.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/ranks.h"
#include "policy/value_parsers.h"

namespace gpumem {

// Device ordinals a limit may name: 0 to kMaxLimitDevices - 1 (the shim's budgets cover as many).
inline constexpr int kMaxLimitDevices = 64;

// One limit: the variable, the device it names (every device when empty), and its bytes.
struct DeviceLimitRule {
  std::string variable;
  std::optional<int> device;
  std::size_t bytes = 0;
  std::string written;  // the value as the variable wrote it, for the info line ("4g", "1G")
  // HAMi's limit holds for every process of the container together, so ranks that split a GPU
  // (GPUMEM_PER_RANK) split it too; MPS's limit is per client process.
  bool shared_by_processes = false;
  bool listed = false;  // an entry of a DEVICE=SIZE list, which `variable` holds whole
  // A share of each device's total memory instead of `bytes` (CuPy's "50%"), in (0, 1].
  std::optional<double> fraction_of_total;

  // The bytes this rule allows on a device of `total_bytes`: `bytes`, or the fraction of the total
  // rounded down.
  std::size_t bytes_for(std::size_t total_bytes) const;
};

// The rule of `rules` that applies to `device`: one naming the device, else one for every device.
const DeviceLimitRule* rule_for_device(const std::vector<DeviceLimitRule>& rules, int device);

// HAMi's size: digits and an optional k, m or g in any case (KiB, MiB, GiB); plain digits are bytes
// (HAMi-core's get_limit_from_env). nullopt when malformed, 0 or overflowing.
std::optional<std::size_t> parse_hami_size(std::string_view text);

// The cluster's limits, and a problem for each variable whose value is wrong: that variable alone is
// left out (the other bounds still apply; the policy says which in the problem's fallback).
struct ClusterLimitsResult {
  std::vector<DeviceLimitRule> hami;  // CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_MEMORY_LIMIT_<i>
  std::vector<DeviceLimitRule> mps;   // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
  std::vector<VariableProblem> problems;
};
ClusterLimitsResult cluster_limits_from_environment(const TrimmedLookup& value_of);

// CUPY_GPU_MEMORY_LIMIT as CuPy reads it: a percentage of each device's total memory ("50%", "12.5%")
// or bytes (digits; gpumem also takes GPUMEM_LIMIT's units). "0" (or "0%") is CuPy's "no cap": no
// rule and no problem. A bad value is a problem, as every other limit's.
struct FrameworkLimitsResult {
  std::vector<DeviceLimitRule> rules;
  std::vector<VariableProblem> problems;
};
FrameworkLimitsResult framework_limits_from_environment(const TrimmedLookup& value_of);

// GPUMEM_LIMIT's list form: the rules, or nullopt with `what_is_wrong` set.
std::optional<std::vector<DeviceLimitRule>> parse_gpumem_limit_list(std::string_view text, std::size_t minimum,
                                                                    std::string& what_is_wrong);

}  // namespace gpumem
