// The memory policy: a pure function from environment variables to a configuration.
//
// PUBLIC API CONTRACT (the shim core is written against exactly this; the policy component owns this
// file and policy.cpp, and may add to it).
//
// Precedence, highest first: GPUMEM_* variables, the XLA names, the TF names, the defaults. The
// frameworks' variables libgpumem.so switched when it was loaded are read as the user gave them
// (framework_switches.h): the user's fraction, preallocation and limit apply once, in gpumem's arena.
// A variable that is unset, empty or only blanks counts as unset; values are read without surrounding
// blanks; names of choices and booleans are matched in any letter case. Every variable that is set is
// validated, including those a higher-precedence one overrides. docs/configuration.md lists them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/device_limits.h"
#include "policy/framework_switches.h"
#include "policy/ranks.h"

namespace gpumem {

enum class Mode : std::uint8_t { bfc, platform, cuda_async, off };
enum class FreeSync : std::uint8_t { defer, sync, none };
enum class FractionBasis : std::uint8_t { total, free };
// notice: the one line a process prints when gpumem takes over its first device (shown by default,
// as a framework says which device and memory it took; GPUMEM_LOG_LEVEL=warn hides it).
enum class LogLevel : std::uint8_t { trace, debug, info, notice, warn, error, off };
// Where a bfc arena's memory comes from: classic cuMemAlloc regions (the default), or vmm (one
// reserved virtual range per device, memory mapped under it as needed) where the driver supports it
// (auto, resolved per device; classic on a device without it, named in the start line) or asked for explicitly
// (vmm: a device without it is left to classic regions, with a warning).
enum class RegionSourceChoice : std::uint8_t { automatic, vmm, classic };
// The arena's split rule (ArenaOptions::max_internal_fragmentation): tight splits off any remainder;
// xla hands out a chunk of up to twice the request whole, as XLA's BFC allocator does.
enum class SplitRule : std::uint8_t { tight, xla };

// GPUMEM_PER_RANK: whether ranks of one job that use one GPU split its memory fraction: not at all
// (off), by the number of local ranks using the GPU (automatic), or by a number given (fixed).
enum class PerRank : std::uint8_t { off, automatic, fixed };

// Where a value came from: the variable's name, or "default".
struct Origin {
  std::string variable = "default";
};

// What the budget layer learns of one device from the driver, for Policy::device_limit.
struct DeviceView {
  int device = 0;
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
  unsigned ranks_sharing = 1;  // Policy::ranks_sharing_gpu for this device
};

// A device's limit and one line saying how it came about, each variable named.
struct DeviceLimit {
  std::size_t bytes = 0;
  std::string derivation;
  // The same, short, for the line said when gpumem takes over the device: "0.75 of 16 GiB, default",
  // "GPUMEM_LIMIT", "0.75 of 16 GiB / 4 ranks, default; CUDA_DEVICE_MEMORY_LIMIT".
  std::string summary;
  // The most the process may hold whatever else it is given (a GPU shared with GPUMEM_SHARE=auto):
  // GPUMEM_LIMIT or the cluster's bounds (HAMi, MPS) or a framework's (CuPy) when one applies; 0 when
  // none does.
  std::size_t cap = 0;
  // For a refusal at the limit: what set it and the knob that would raise it ("set by GPUMEM_LIMIT;
  // raise it", "0.75 of the device's total memory from default; raise GPUMEM_MEM_FRACTION or set
  // GPUMEM_LIMIT", "bounded by CUDA_DEVICE_MEMORY_LIMIT_0=2g, ..."). cap_advice: the same for the cap
  // (empty when no cap applies).
  std::string advice;
  std::string cap_advice;
};

struct Policy {
  Mode mode = Mode::bfc;                          Origin mode_origin;
  bool preallocate = true;                        Origin preallocate_origin;
  std::optional<std::size_t> limit_bytes;         Origin limit_origin;     // GPUMEM_LIMIT, wins over fraction
  double fraction = 0.75;                         Origin fraction_origin;  // in (0, 1]
  FractionBasis fraction_of = FractionBasis::total; Origin fraction_of_origin;
  std::optional<std::int64_t> async_prealloc;     Origin async_prealloc_origin;  // bytes; -1 = release threshold
  FreeSync free_sync = FreeSync::defer;           Origin free_sync_origin;
  bool garbage_collection = true;                 Origin garbage_collection_origin;  // growth mode only
  RegionSourceChoice region_source = RegionSourceChoice::automatic; Origin region_source_origin;
  SplitRule split_rule = SplitRule::tight;        Origin split_rule_origin;
  LogLevel log_level = LogLevel::notice;          Origin log_level_origin;
  std::string log_file;                           Origin log_file_origin;  // empty: stderr
  bool stats = false;                             Origin stats_origin;     // exit table on stderr
  std::string stats_file;                         Origin stats_file_origin;  // empty: none; "%p": pid
  std::string trace_file;                         Origin trace_file_origin;  // empty: no trace
  // GPUMEM_LIMIT's list form ("0=10GiB,1=20GiB"): the limit of each device named, in place of the
  // fraction; other devices keep the fraction. limit_origin names the variable.
  std::vector<DeviceLimitRule> limit_per_device;
  PerRank per_rank = PerRank::off;                Origin per_rank_origin;
  unsigned per_rank_divisor = 1;                  // PerRank::fixed: ranks per GPU
  LaunchRanks ranks;                              // the launcher's, when one was recognised
  // Limits a cluster set for the container: upper bounds of the budget, the lowest one winning.
  std::vector<DeviceLimitRule> hami_limits;       // CUDA_DEVICE_MEMORY_LIMIT[_<i>]
  std::vector<DeviceLimitRule> mps_limits;        // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
  // A framework's cap on its own pool, applied by gpumem instead (the framework is told none): an
  // upper bound of the budget like the cluster's limits, per process.
  std::vector<DeviceLimitRule> framework_limits;  // CUPY_GPU_MEMORY_LIMIT
  // The frameworks' own allocators (docs/frameworks.md): GPUMEM_FRAMEWORKS says whether libgpumem.so
  // switches them to allocate on demand when it is loaded; `framework_switches` lists the switches in
  // force ("XLA_PYTHON_CLIENT_ALLOCATOR=platform"), as GPUMEM_FRAMEWORKS_SET says and the process
  // still has them.
  bool frameworks = true;                         Origin frameworks_origin;
  std::vector<std::string> framework_switches;
  // Sharing one GPU between processes (docs/sharing.md): GPUMEM_SHARE=auto joins the GPU's ledger.
  bool share = false;                             Origin share_origin;
  std::string share_dir;                          Origin share_dir_origin;     // empty: the default
  std::uint32_t share_weight_milli = 1000;        Origin share_weight_origin;  // thousandths, > 0
  std::size_t share_min_bytes = 0;                Origin share_min_origin;     // the floor asked for
  std::uint64_t share_wait_ms = 5000;             Origin share_wait_origin;    // 0: never wait
  // Values accepted with a substitution (a framework's allocator name gpumem does not implement):
  // one line each, "gpumem: ...", for the shim to print once at warn level.
  std::vector<std::string> warnings;

  // The byte limit for one device, without the per-device and cluster limits and with no rank
  // sharing it: limit_bytes if set, else fraction x (total or free, per fraction_of), rounded down to a
  // multiple of 256 and never more than `total_bytes`.
  std::size_t limit_for_device(std::size_t total_bytes, std::size_t free_bytes) const;
  // The one error line for a fraction whose limit_for_device() is 0 (less than one 256-byte granule):
  // such a device is left unmanaged (its memory passes through to the driver), said in this one line.
  std::string limit_below_granule_error(int device, std::size_t total_bytes, std::size_t free_bytes) const;

  // How many ranks split this GPU (`visible[device]`): 1 with per_rank off, per_rank_divisor when
  // fixed, local_ranks_on_gpu() of the launcher's local ranks (1 when it gave none) when automatic.
  unsigned ranks_sharing_gpu(std::span<const GpuId> visible, std::size_t device) const;
  // The device's limit: its GPUMEM_LIMIT (list entry, else the single size) or else the fraction
  // divided by view.ranks_sharing; then no more than each cluster limit for the device (HAMi's
  // divided by view.ranks_sharing, as all the container's processes share it; MPS's per process) and
  // the device; rounded down to a multiple of 256. 0: the device is left unmanaged.
  DeviceLimit device_limit(const DeviceView& view) const;
  // The one error line for a device whose device_limit() is 0.
  std::string limit_below_granule_error(const DeviceView& view) const;

  // One line stating every effective value and where it came from, for the info-level log.
  std::string describe() const;
  // The limit every device gets, in words, each variable named: "10GiB (GPUMEM_LIMIT)", "0.75 (default)
  // of each device's total memory", then the ranks splitting it and the cluster's bounds.
  std::string describe_limit() const;
  // One line for each device a per-device limit names (GPUMEM_LIMIT's list, HAMi's
  // CUDA_DEVICE_MEMORY_LIMIT_<i>, MPS's list) that is not among the `device_count` the process sees
  // ("GPUMEM_LIMIT's list names device 3, but this process sees 1 device (0); ...").
  std::vector<std::string> limits_for_missing_devices(int device_count) const;
  // The sharing values describe() appends when sharing is on (else empty).
  std::string describe_share() const;
};

// Lower-case names as the variables spell them ("cuda_async", "defer", "total", "warn").
std::string_view to_string(Mode mode);
std::string_view to_string(FreeSync free_sync);
std::string_view to_string(FractionBasis basis);
std::string_view to_string(LogLevel level);
std::string_view to_string(RegionSourceChoice choice);
std::string_view to_string(SplitRule rule);

// ArenaOptions::max_internal_fragmentation for `rule`.
std::size_t max_internal_fragmentation(SplitRule rule);

// ArenaOptions::block_alignment of the shim's arenas (and gpumem-replay's): CUDA documents that a
// pointer from cudaMalloc needs no offset to be bound to a texture, so blocks start at multiples of
// the texture alignment NVIDIA GPUs report (CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512 bytes), as the
// driver's own allocations do. XLA's 256 would make every other small block unusable for a texture.
inline constexpr std::size_t kDeviceBlockAlignment = 512;

// The head of a preallocated arena of `limit_bytes` (ArenaOptions::preallocation_head_bytes): 1/32
// of the limit, in 2 MiB units, at most 1 GiB; none below a 64 MiB limit. Small blocks (cuBLAS and
// cuDNN workspaces) land there, so the rest, wholly free, can go to another allocation path (a VMM
// heap made later) while the program keeps at least 96.8% of its budget for that path.
std::size_t preallocation_head_bytes(std::size_t limit_bytes);

// Reads one variable: the value, or nullopt when unset. Tests pass a map; the shim passes getenv.
using EnvironmentLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

// A variable whose value is wrong, and its one error line: the variable, its value, what is accepted
// and what applies instead, e.g. `gpumem: XLA_PYTHON_CLIENT_MEM_FRACTION="1.5" is not a fraction in
// (0, 1]; ignored: the limit is 0.75 (default) of each device's total memory`.
//
// Errors are scoped: a bad value counts as unset, so it changes only what that variable configures
// (the next variable of the same setting in precedence order applies, else the setting's default),
// never a cap another variable sets; a bad cap leaves the process under the other bounds (at least
// the default fraction). Exceptions, to the safer side: GPUMEM_PER_RANK falls back to auto (ranks still
// split their GPU), two XLA fractions that disagree to the lower. docs/configuration.md.
struct PolicyError {
  std::string variable;
  std::string line;  // "gpumem: ...", one line
};

// The policy, and the errors of the variables whose values were wrong (each already taken into
// account: the policy is what applies).
struct PolicyResult {
  std::optional<Policy> policy;  // always set by policy_from_environment
  std::vector<PolicyError> errors;
  // GPUMEM_STRICT: any error refuses the process (so a CI job cannot miss a bad configuration):
  // every CUDA call that reaches the shim fails instead. Each error line then says so.
  bool strict = false;
  bool refuses() const { return strict && !errors.empty(); }
};

PolicyResult policy_from_environment(const EnvironmentLookup& lookup);

// Parses a byte size with optional units: "1048576", "512MB" (10^6), "10GiB" (2^30), "1e9", "1.5G"
// (G/M/K without B are binary, as in most memory tools; units up to P, any letter case, optionally
// after blanks). At most 20 significant digits; a fractional byte is dropped ("0.1K" = 102).
// nullopt if malformed, negative or overflowing.
std::optional<std::size_t> parse_byte_size(std::string_view text);

}  // namespace gpumem
