// The environment policy: a pure function of the variables.
#include "policy/policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "policy/share_values.h"
#include "policy/value_parsers.h"

namespace gpumem {

namespace {

constexpr std::size_t kLimitGranularity = 256;  // the arena's own rounding unit
constexpr std::string_view kStrictRefusal = "; GPUMEM_STRICT is set: every CUDA call fails with CUDA_ERROR_NOT_INITIALIZED";

// What a bad value configures: its error line says what applies to that setting instead.
enum class Setting : std::uint8_t {
  mode, preallocate, limit, fraction_of, async_prealloc, free_sync, garbage_collection, region_source,
  split_rule, log_level, stats, share, share_dir, share_weight, share_min, share_wait, per_rank, strict, frameworks,
  fractions_disagree, given  // given: the problem carries its own fallback (a launcher's value)
};

template <typename T>
struct Choice {
  std::string_view name;  // compared without regard to case
  T value;
};

constexpr std::array<Choice<Mode>, 4> kGpumemModes{{
    {"bfc", Mode::bfc}, {"platform", Mode::platform}, {"cuda_async", Mode::cuda_async}, {"off", Mode::off}}};
constexpr std::array<Choice<Mode>, 4> kXlaAllocators{{
    {"default", Mode::bfc}, {"bfc", Mode::bfc}, {"platform", Mode::platform}, {"cuda_async", Mode::cuda_async}}};
// TensorFlow's "memory_guard" is its BFC allocator wrapped in a debugging guard (canaries around
// each block): served as bfc, with a warning that the guard is not.
constexpr std::array<Choice<Mode>, 3> kTfAllocators{{
    {"cuda_malloc_async", Mode::cuda_async}, {"cuda_malloc", Mode::platform}, {"memory_guard", Mode::bfc}}};
constexpr std::array<Choice<FractionBasis>, 2> kFractionBases{{
    {"total", FractionBasis::total}, {"free", FractionBasis::free}}};
constexpr std::array<Choice<FreeSync>, 3> kFreeSyncs{{
    {"defer", FreeSync::defer}, {"sync", FreeSync::sync}, {"none", FreeSync::none}}};
constexpr std::array<Choice<RegionSourceChoice>, 3> kRegionSources{{
    {"auto", RegionSourceChoice::automatic}, {"vmm", RegionSourceChoice::vmm}, {"classic", RegionSourceChoice::classic}}};
constexpr std::array<Choice<SplitRule>, 2> kSplitRules{{{"tight", SplitRule::tight}, {"xla", SplitRule::xla}}};
constexpr std::array<Choice<LogLevel>, 8> kLogLevels{{
    {"off", LogLevel::off}, {"error", LogLevel::error}, {"warn", LogLevel::warn}, {"warning", LogLevel::warn},
    {"notice", LogLevel::notice}, {"info", LogLevel::info}, {"debug", LogLevel::debug}, {"trace", LogLevel::trace}}};

template <typename T>
std::optional<T> parse_choice(std::span<const Choice<T>> choices, std::string_view text) {
  for (const Choice<T>& choice : choices) {
    if (equals_ignoring_case(choice.name, text)) return choice.value;
  }
  return std::nullopt;
}

template <typename T>
std::string describe_choices(std::span<const Choice<T>> choices) {
  std::string names;
  for (const Choice<T>& choice : choices) {
    if (!names.empty()) names += ", ";
    names += choice.name;
  }
  return "not one of " + names;
}

template <typename T>
std::string_view name_in(std::span<const Choice<T>> choices, T value) {
  for (const Choice<T>& choice : choices) {
    if (choice.value == value) return choice.name;
  }
  return "?";
}

// A bad value and the setting it configures.
struct Rejection {
  Setting setting;
  VariableProblem problem;
};

// Reads variables for one policy, remembering every bad value and the setting it configures; a bad
// value counts as unset.
class EnvironmentReader {
 public:
  explicit EnvironmentReader(const EnvironmentLookup& lookup) : lookup_(lookup) {}

  // The value of `name` without surrounding blanks; nullopt when unset, empty or only blanks.
  std::optional<std::string_view> value_of(std::string_view name) const {
    const std::optional<std::string_view> raw = lookup_(name);
    if (!raw) return std::nullopt;
    const std::string_view trimmed = trim_blanks(*raw);
    if (trimmed.empty()) return std::nullopt;
    return trimmed;
  }

  void reject(Setting setting, std::string_view name, std::string_view value, std::string_view what_is_wrong) {
    rejections_.push_back(Rejection{setting, invalid_variable(name, value, what_is_wrong)});
  }

  void reject(Setting setting, VariableProblem problem) {
    rejections_.push_back(Rejection{setting, std::move(problem)});
  }

  // Parses each variable of `sources` that is set (all are validated, whichever wins) and stores
  // the value of the first valid one, in precedence order, into `out` and its name into `origin`.
  // `parse` returns nullopt for a bad value; `expected` says what is accepted.
  template <typename T, typename Parse>
  void resolve(Setting setting, std::initializer_list<std::string_view> sources, Parse&& parse,
               std::string_view expected, T& out, Origin& origin) {
    bool assigned = false;
    for (std::string_view name : sources) {
      const std::optional<std::string_view> text = value_of(name);
      if (!text) continue;
      const auto parsed = parse(name, *text);
      if (!parsed) {
        reject(setting, name, *text, expected);
        continue;
      }
      if (!assigned) {
        out = *parsed;
        origin.variable = std::string(name);
        assigned = true;
      }
    }
  }

  struct ModeSource {
    std::string_view variable;
    std::span<const Choice<Mode>> choices;
  };

  // Like resolve, with the accepted values (and so the error text) differing per variable.
  void resolve_mode(std::initializer_list<ModeSource> sources, Mode& out, Origin& origin) {
    bool assigned = false;
    for (const ModeSource& source : sources) {
      const std::optional<std::string_view> text = value_of(source.variable);
      if (!text) continue;
      const std::optional<Mode> parsed = parse_choice(source.choices, *text);
      if (!parsed) {
        reject(Setting::mode, source.variable, *text, describe_choices(source.choices));
      } else if (!assigned) {
        out = *parsed;
        origin.variable = std::string(source.variable);
        assigned = true;
      }
    }
  }

  template <typename T>
  void resolve_choice(Setting setting, std::initializer_list<std::string_view> sources,
                      std::span<const Choice<T>> choices, T& out, Origin& origin) {
    resolve(setting, sources, [&](std::string_view, std::string_view text) { return parse_choice(choices, text); },
            describe_choices(choices), out, origin);
  }

  const std::vector<Rejection>& rejections() const { return rejections_; }

 private:
  const EnvironmentLookup& lookup_;
  std::vector<Rejection> rejections_;
};

constexpr std::string_view kBooleanExpected = "not a boolean (1/0, true/false, yes/no, on/off)";
constexpr std::string_view kLimitExpected =
    "not a byte size of at least 256 (e.g. 10GiB, 512MB, 1e9, 1.5G; K/M/G/T without B and KiB/MiB/GiB/TiB "
    "are powers of 1024, KB/MB/GB/TB powers of 1000) or a list of DEVICE=SIZE (e.g. 0=10GiB,1=20GiB; "
    "devices 0 to 63)";
constexpr unsigned kMaxRanksPerGpu = 1024;

std::optional<std::pair<PerRank, unsigned>> parse_per_rank(std::string_view text) {
  if (equals_ignoring_case(text, "auto")) return std::pair{PerRank::automatic, 0u};
  if (equals_ignoring_case(text, "off")) return std::pair{PerRank::off, 1u};
  const std::optional<unsigned> count = parse_count(text, kMaxRanksPerGpu);
  if (!count || *count == 0) return std::nullopt;
  return std::pair{PerRank::fixed, *count};
}

std::optional<std::int64_t> parse_async_prealloc(std::string_view text) {
  if (text == "-1") return -1;
  const std::optional<std::size_t> bytes = parse_byte_size(text);
  if (!bytes || *bytes > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max())) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(*bytes);
}

// The two XLA fraction names: JAX refuses to start when both are set, gpumem when they disagree
// takes the lower (when one of them is the fraction in force).
void check_xla_fraction_conflict(EnvironmentReader& reader, Policy& policy) {
  const auto current = reader.value_of("XLA_CLIENT_MEM_FRACTION");
  const auto older = reader.value_of("XLA_PYTHON_CLIENT_MEM_FRACTION");
  if (!current || !older) return;
  const auto current_value = parse_fraction(*current);
  const auto older_value = parse_fraction(*older);
  if (!current_value || !older_value || *current_value == *older_value) return;  // bad ones: reported
  if (policy.fraction_origin.variable == "XLA_CLIENT_MEM_FRACTION" && *older_value < *current_value) {
    policy.fraction = *older_value;
    policy.fraction_origin.variable = "XLA_PYTHON_CLIENT_MEM_FRACTION";
  }
  reader.reject(Setting::fractions_disagree,
                VariableProblem{"XLA_CLIENT_MEM_FRACTION",
                                fmt::format("XLA_CLIENT_MEM_FRACTION={} and XLA_PYTHON_CLIENT_MEM_FRACTION={} "
                                            "disagree; set only one (XLA_CLIENT_MEM_FRACTION is the current name)",
                                            quote_value(*current), quote_value(*older)),
                                {}});
}

// The sharing variables (docs/sharing.md).
void resolve_share(EnvironmentReader& reader, Policy& policy) {
  reader.resolve(
      Setting::share, {"GPUMEM_SHARE"},
      [](std::string_view, std::string_view text) -> std::optional<bool> {
        if (equals_ignoring_case(text, "auto")) return true;
        if (equals_ignoring_case(text, "off")) return false;
        return std::nullopt;
      },
      "not one of auto, off", policy.share, policy.share_origin);
  reader.resolve(Setting::share_dir, {"GPUMEM_SHARE_DIR"},
                 [](std::string_view, std::string_view text) -> std::optional<std::string> {
                   if (text.front() != '/') return std::nullopt;  // a relative path means another folder per cwd
                   return std::string(text);
                 },
                 "not an absolute path", policy.share_dir, policy.share_dir_origin);
  reader.resolve(Setting::share_weight, {"GPUMEM_SHARE_WEIGHT"},
                 [](std::string_view, std::string_view text) { return parse_share_weight_milli(text); },
                 "not a weight in (0, 1000] with at most three decimals (e.g. 1, 2, 0.5)",
                 policy.share_weight_milli, policy.share_weight_origin);
  reader.resolve(Setting::share_min, {"GPUMEM_SHARE_MIN"},
                 [](std::string_view, std::string_view text) { return parse_byte_size(text); },
                 "not a byte size (e.g. 4GiB, 512MB, 0)", policy.share_min_bytes, policy.share_min_origin);
  reader.resolve(Setting::share_wait, {"GPUMEM_SHARE_WAIT"},
                 [](std::string_view, std::string_view text) { return parse_duration_ms(text); },
                 "not a duration of at most one hour (e.g. 500ms, 5s, 0)", policy.share_wait_ms,
                 policy.share_wait_origin);
}

std::string with_origin(std::string_view value, const Origin& origin) {
  return fmt::format("{}({})", value, origin.variable);
}

}  // namespace

std::string_view to_string(Mode mode) { return name_in<Mode>(kGpumemModes, mode); }
std::string_view to_string(FreeSync free_sync) { return name_in<FreeSync>(kFreeSyncs, free_sync); }
std::string_view to_string(FractionBasis basis) { return name_in<FractionBasis>(kFractionBases, basis); }
std::string_view to_string(LogLevel level) { return name_in<LogLevel>(kLogLevels, level); }
std::string_view to_string(RegionSourceChoice choice) {
  return name_in<RegionSourceChoice>(kRegionSources, choice);
}
std::string_view to_string(SplitRule rule) { return name_in<SplitRule>(kSplitRules, rule); }

std::size_t max_internal_fragmentation(SplitRule rule) {
  constexpr std::size_t kXlaBytes = std::size_t{128} << 20;  // XLA's kMaxInternalFragmentation
  constexpr std::size_t kTightBytes = 256;                   // one granule: split off any remainder
  return rule == SplitRule::xla ? kXlaBytes : kTightBytes;
}

namespace {

// "NAME (ORIGIN)", or "NAME (default)".
std::string valued(std::string_view value, const Origin& origin) {
  return fmt::format("{} ({})", value, origin.variable);
}

// What applies to `setting` once the policy is resolved: the end of a bad value's error line.
std::string fallback_of(Setting setting, const Policy& policy) {
  switch (setting) {
    case Setting::mode: return "the mode is " + valued(to_string(policy.mode), policy.mode_origin);
    case Setting::preallocate:
      return "preallocation is " + valued(policy.preallocate ? "on" : "off", policy.preallocate_origin);
    case Setting::limit: return "the limit is " + policy.describe_limit();
    case Setting::fractions_disagree: return "the lower applies: the limit is " + policy.describe_limit();
    case Setting::fraction_of:
      return "the fraction is of " + valued(to_string(policy.fraction_of), policy.fraction_of_origin) + " memory";
    case Setting::async_prealloc:
      if (!policy.async_prealloc) return "no cuda_async warm-up (default)";
      return "the cuda_async warm-up is " +
             valued(*policy.async_prealloc < 0 ? std::string("-1")
                                               : format_byte_size(static_cast<std::size_t>(*policy.async_prealloc)),
                    policy.async_prealloc_origin);
    case Setting::free_sync: return "free_sync is " + valued(to_string(policy.free_sync), policy.free_sync_origin);
    case Setting::garbage_collection:
      return "garbage collection is " +
             valued(policy.garbage_collection ? "on" : "off", policy.garbage_collection_origin);
    case Setting::region_source:
      return "the region source is " + valued(to_string(policy.region_source), policy.region_source_origin);
    case Setting::split_rule: return "the split rule is " + valued(to_string(policy.split_rule), policy.split_rule_origin);
    case Setting::log_level: return "the log level is " + valued(to_string(policy.log_level), policy.log_level_origin);
    case Setting::stats: return "the statistics table is " + valued(policy.stats ? "on" : "off", policy.stats_origin);
    case Setting::share: return "sharing is " + valued(policy.share ? "auto" : "off", policy.share_origin);
    case Setting::share_dir: return "the ledgers are in the default directory";
    case Setting::share_weight:
      return "the weight is " + valued(fmt::format("{}", policy.share_weight_milli / 1000.0), policy.share_weight_origin);
    case Setting::share_min:
      return "the floor is " + valued(format_byte_size(policy.share_min_bytes), policy.share_min_origin);
    case Setting::share_wait:
      return "the wait is " + valued(fmt::format("{}ms", policy.share_wait_ms), policy.share_wait_origin);
    case Setting::per_rank:
      return "ranks split each GPU as with GPUMEM_PER_RANK=auto; the limit is " + policy.describe_limit();
    case Setting::strict: return "GPUMEM_STRICT is off (default): errors are ignored as said";
    case Setting::frameworks:
      return "the frameworks' switches are " + valued(policy.frameworks ? "on" : "off", policy.frameworks_origin);
    case Setting::given: break;
  }
  return {};
}

}  // namespace

PolicyResult policy_from_environment(const EnvironmentLookup& lookup) {
  // The frameworks' variables as the user gave them, not as libgpumem.so switched them.
  const UserEnvironment user = user_environment(lookup);
  EnvironmentReader reader(user.lookup);
  Policy policy;
  for (const VariableProblem& problem : user.problems) reader.reject(Setting::given, problem);
  policy.framework_switches = user.switched;
  policy.warnings.insert(policy.warnings.end(), user.warnings.begin(), user.warnings.end());
  reader.resolve(Setting::frameworks, {kFrameworksVariable},
                 [](std::string_view, std::string_view text) { return parse_boolean(text); }, kBooleanExpected,
                 policy.frameworks, policy.frameworks_origin);

  // Each family spells the mode its own way; the first set in precedence order wins.
  reader.resolve_mode({{"GPUMEM_MODE", kGpumemModes},
                       {"XLA_PYTHON_CLIENT_ALLOCATOR", kXlaAllocators},
                       {"TF_GPU_ALLOCATOR", kTfAllocators}},
                      policy.mode, policy.mode_origin);

  reader.resolve(
      Setting::preallocate, {"GPUMEM_PREALLOCATE", "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH"},
      [](std::string_view name, std::string_view text) -> std::optional<bool> {
        const std::optional<bool> value = parse_boolean(text);
        // TensorFlow's variable says "grow", the inverse of preallocating.
        if (value && name == "TF_FORCE_GPU_ALLOW_GROWTH") return !*value;
        return value;
      },
      kBooleanExpected, policy.preallocate, policy.preallocate_origin);

  // GPUMEM_LIMIT: one size for every device, or a list of DEVICE=SIZE.
  const std::optional<std::string_view> limit_text = reader.value_of("GPUMEM_LIMIT");
  if (limit_text && limit_text->find('=') != std::string_view::npos) {
    std::string why;
    if (auto rules = parse_gpumem_limit_list(*limit_text, kLimitGranularity, why)) {
      policy.limit_per_device = std::move(*rules);
      policy.limit_origin.variable = "GPUMEM_LIMIT";
    } else {
      reader.reject(Setting::limit, "GPUMEM_LIMIT", *limit_text, why.empty() ? kLimitExpected : why);
    }
  } else {
    reader.resolve(
        Setting::limit, {"GPUMEM_LIMIT"},
        [](std::string_view, std::string_view text) -> std::optional<std::size_t> {
          const std::optional<std::size_t> bytes = parse_byte_size(text);
          // Below one granule the pool would round to nothing and serve nothing.
          if (bytes && *bytes < kLimitGranularity) return std::nullopt;
          return bytes;
        },
        kLimitExpected, policy.limit_bytes, policy.limit_origin);
  }

  reader.resolve(Setting::limit, {"GPUMEM_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"},
                 [](std::string_view, std::string_view text) { return parse_fraction(text); },
                 "not a fraction in (0, 1]", policy.fraction, policy.fraction_origin);
  check_xla_fraction_conflict(reader, policy);

  reader.resolve_choice<FractionBasis>(Setting::fraction_of, {"GPUMEM_FRACTION_OF"}, kFractionBases,
                                       policy.fraction_of, policy.fraction_of_origin);

  reader.resolve(
      Setting::async_prealloc, {"GPUMEM_ASYNC_PREALLOC", "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"},
      [](std::string_view, std::string_view text) { return parse_async_prealloc(text); },
      "not a byte size (e.g. 1GiB, 0) or -1 (the pool's release threshold)", policy.async_prealloc,
      policy.async_prealloc_origin);

  reader.resolve_choice<FreeSync>(Setting::free_sync, {"GPUMEM_FREE_SYNC"}, kFreeSyncs, policy.free_sync,
                                  policy.free_sync_origin);

  reader.resolve(Setting::garbage_collection, {"GPUMEM_GARBAGE_COLLECTION"},
                 [](std::string_view, std::string_view text) { return parse_boolean(text); }, kBooleanExpected,
                 policy.garbage_collection, policy.garbage_collection_origin);

  reader.resolve_choice<RegionSourceChoice>(Setting::region_source, {"GPUMEM_REGION_SOURCE"}, kRegionSources,
                                            policy.region_source, policy.region_source_origin);
  reader.resolve_choice<SplitRule>(Setting::split_rule, {"GPUMEM_SPLIT_RULE"}, kSplitRules, policy.split_rule,
                                   policy.split_rule_origin);

  reader.resolve_choice<LogLevel>(Setting::log_level, {"GPUMEM_LOG_LEVEL"}, kLogLevels, policy.log_level,
                                  policy.log_level_origin);

  // Any text is a path: nothing to reject.
  const auto parse_path = [](std::string_view, std::string_view text) { return std::optional<std::string>(text); };
  reader.resolve(Setting::given, {"GPUMEM_LOG_FILE"}, parse_path, "", policy.log_file, policy.log_file_origin);

  if (policy.mode_origin.variable == "TF_GPU_ALLOCATOR" && policy.mode == Mode::bfc) {
    policy.warnings.push_back(
        "gpumem: TF_GPU_ALLOCATOR=memory_guard is TensorFlow's BFC allocator with debugging guards around "
        "each block; gpumem serves it as bfc mode, without the guards");
  }

  reader.resolve(Setting::stats, {"GPUMEM_STATS"},
                 [](std::string_view, std::string_view text) { return parse_boolean(text); }, kBooleanExpected,
                 policy.stats, policy.stats_origin);

  // Output paths: "%p" stands for the process id (a forked or exec'd child writes its own file).
  reader.resolve(Setting::given, {"GPUMEM_STATS_FILE"}, parse_path, "", policy.stats_file, policy.stats_file_origin);
  reader.resolve(Setting::given, {"GPUMEM_TRACE"}, parse_path, "", policy.trace_file, policy.trace_file_origin);
  resolve_share(reader, policy);

  // Ranks that share a GPU, and the launcher that says how many run here. A bad GPUMEM_PER_RANK is
  // taken as auto: whoever set it meant the ranks to split their GPU.
  std::pair<PerRank, unsigned> per_rank{PerRank::off, 1u};
  const std::size_t rejected_before_per_rank = reader.rejections().size();
  reader.resolve(Setting::per_rank, {"GPUMEM_PER_RANK"},
                 [](std::string_view, std::string_view text) { return parse_per_rank(text); },
                 "not auto, off or a number of ranks per GPU from 1 to 1024", per_rank, policy.per_rank_origin);
  if (reader.rejections().size() > rejected_before_per_rank) {
    per_rank = {PerRank::automatic, 0u};
    policy.per_rank_origin.variable = "GPUMEM_PER_RANK";
  }
  policy.per_rank = per_rank.first;
  policy.per_rank_divisor = per_rank.second;
  const TrimmedLookup trimmed = [&](std::string_view name) { return reader.value_of(name); };
  LaunchRanksResult ranks = ranks_from_environment(trimmed);
  for (VariableProblem& problem : ranks.problems) reader.reject(Setting::given, std::move(problem));
  policy.ranks = std::move(ranks.ranks);
  ClusterLimitsResult cluster = cluster_limits_from_environment(trimmed);
  for (VariableProblem& problem : cluster.problems) reader.reject(Setting::limit, std::move(problem));
  policy.hami_limits = std::move(cluster.hami);
  policy.mps_limits = std::move(cluster.mps);
  // CuPy's cap is gpumem's to apply only while CuPy is switched (its pool told none); with the
  // switches off CuPy's pool applies it itself, and gpumem applying it too would cap twice.
  if (policy.frameworks) {
    FrameworkLimitsResult framework_limits = framework_limits_from_environment(trimmed);
    for (VariableProblem& problem : framework_limits.problems) reader.reject(Setting::limit, std::move(problem));
    policy.framework_limits = std::move(framework_limits.rules);
  }

  // GPUMEM_STRICT itself, like any variable: a bad value counts as unset (off), said in its line.
  bool strict = false;
  Origin strict_origin;
  reader.resolve(Setting::strict, {"GPUMEM_STRICT"},
                 [](std::string_view, std::string_view text) { return parse_boolean(text); }, kBooleanExpected,
                 strict, strict_origin);

  PolicyResult result;
  result.strict = strict;
  for (const Rejection& rejection : reader.rejections()) {
    const std::string fallback =
        rejection.setting == Setting::given ? rejection.problem.fallback : fallback_of(rejection.setting, policy);
    result.errors.push_back(PolicyError{
        rejection.problem.variable,
        strict ? fmt::format("gpumem: {}{}", rejection.problem.problem, kStrictRefusal)
               : fmt::format("gpumem: {}; {}{}", rejection.problem.problem,
                             rejection.setting == Setting::fractions_disagree ? "" : "ignored: ", fallback)});
  }
  result.policy = std::move(policy);
  return result;
}

std::size_t preallocation_head_bytes(std::size_t limit_bytes) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  constexpr std::size_t kUnit = 2 * kMiB;
  if (limit_bytes < 64 * kMiB) return 0;
  return std::clamp(limit_bytes / 32 / kUnit * kUnit, kUnit, 1024 * kMiB);
}

namespace {

// fraction x (total or free) / `divisor` in bytes, at most `total_bytes`, not yet rounded to a granule.
std::size_t fraction_bytes(const Policy& policy, std::size_t total_bytes, std::size_t free_bytes,
                           unsigned divisor) {
  const std::size_t basis =
      policy.fraction_of == FractionBasis::total ? total_bytes : std::min(free_bytes, total_bytes);
  // Long double keeps the product exact to well under a byte for any device size; rounding to the
  // nearest byte first keeps e.g. 0.3 x 2560 at 768 although 0.3 is stored as 0.29999...
  const long double product =
      static_cast<long double>(policy.fraction) * static_cast<long double>(basis) / std::max(divisor, 1u);
  if (!(product > 0)) return 0;
  if (product >= static_cast<long double>(total_bytes)) return total_bytes;
  return static_cast<std::size_t>(std::roundl(product));
}

std::string fraction_text(const Policy& policy) {
  if (policy.fraction_origin.variable == policy.fraction_of_origin.variable) {
    return with_origin(fmt::format("{} of {}", policy.fraction, to_string(policy.fraction_of)),
                       policy.fraction_origin);
  }
  return fmt::format("{} of {}", with_origin(fmt::format("{}", policy.fraction), policy.fraction_origin),
                     with_origin(to_string(policy.fraction_of), policy.fraction_of_origin));
}

// "NAME=VALUE" of each rule, comma-separated (a list variable once, as written).
std::string rules_text(const std::vector<DeviceLimitRule>& rules) {
  std::string text;
  std::string_view list_variable;
  for (const DeviceLimitRule& rule : rules) {
    if (rule.variable == list_variable) continue;
    if (!text.empty()) text += ",";
    if (rule.listed) {
      list_variable = rule.variable;
      text += rule.variable + "=";
      std::string entries;
      for (const DeviceLimitRule& entry : rules) {
        if (entry.variable != rule.variable) continue;
        entries += fmt::format("{}{}={}", entries.empty() ? "" : ",", *entry.device, entry.written);
      }
      text += entries;
    } else {
      text += fmt::format("{}={}", rule.variable, rule.written);
    }
  }
  return text;
}

// Every upper bound of the budget: the cluster's limits, then the frameworks'.
std::vector<DeviceLimitRule> bounding_rules(const Policy& policy) {
  std::vector<DeviceLimitRule> bounds = policy.hami_limits;
  bounds.insert(bounds.end(), policy.mps_limits.begin(), policy.mps_limits.end());
  bounds.insert(bounds.end(), policy.framework_limits.begin(), policy.framework_limits.end());
  return bounds;
}

}  // namespace

std::size_t Policy::limit_for_device(std::size_t total_bytes, std::size_t free_bytes) const {
  std::size_t bytes = limit_bytes ? *limit_bytes : fraction_bytes(*this, total_bytes, free_bytes, 1);
  bytes = std::min(bytes, total_bytes);
  return bytes - bytes % kLimitGranularity;
}

std::string Policy::limit_below_granule_error(int device, std::size_t total_bytes, std::size_t free_bytes) const {
  const std::size_t basis = fraction_of == FractionBasis::total ? total_bytes : std::min(free_bytes, total_bytes);
  return fmt::format(
      "{}={} gives {} bytes of device {} ({} of {} bytes), less than one {}-byte granule; expected a "
      "fraction of at least {:.3g}; device {}'s memory is not managed",
      fraction_origin.variable, fraction, limit_for_device(total_bytes, free_bytes), device, to_string(fraction_of),
      basis, kLimitGranularity, basis == 0 ? 1.0 : static_cast<double>(kLimitGranularity) / static_cast<double>(basis),
      device);
}

unsigned Policy::ranks_sharing_gpu(std::span<const GpuId> visible, std::size_t device) const {
  switch (per_rank) {
    case PerRank::off: return 1;
    case PerRank::fixed: return std::max(per_rank_divisor, 1u);
    case PerRank::automatic: return local_ranks_on_gpu(ranks.local_ranks.value.value_or(1), visible, device);
  }
  return 1;
}

DeviceLimit Policy::device_limit(const DeviceView& view) const {
  const unsigned sharing = per_rank == PerRank::off ? 1 : std::max(view.ranks_sharing, 1u);
  const std::string split = sharing > 1 ? fmt::format(" / {} ranks on this GPU({})", sharing,
                                                      per_rank_origin.variable)
                                        : std::string();
  std::size_t bytes = 0;
  std::size_t cap = 0;
  std::string how;
  std::string summary;
  std::string advice;
  std::string cap_advice;
  if (const DeviceLimitRule* own = rule_for_device(limit_per_device, view.device)) {
    bytes = cap = own->bytes;
    how = fmt::format("{}({} for device {})", format_byte_size(bytes), own->variable, view.device);
    summary = own->variable;
    advice = cap_advice = fmt::format("set by {}'s entry for device {} ({}); raise that entry", own->variable,
                                      view.device, own->written);
  } else if (limit_bytes) {
    bytes = cap = *limit_bytes;
    how = with_origin(format_byte_size(bytes), limit_origin);
    summary = limit_origin.variable;
    advice = cap_advice = fmt::format("set by {}; raise it", limit_origin.variable);
  } else {
    const std::string variable =
        fraction_origin.variable == "default" ? "GPUMEM_MEM_FRACTION" : fraction_origin.variable;
    advice = fmt::format("{} of the device's {} memory from {}{}; raise {} or set GPUMEM_LIMIT{}", fraction,
                         to_string(fraction_of), fraction_origin.variable,
                         sharing > 1 ? fmt::format(", split between {} ranks on this GPU ({})", sharing,
                                                   per_rank_origin.variable)
                                     : std::string(),
                         variable, sharing > 1 ? ", or run fewer ranks on this GPU" : "");
    bytes = fraction_bytes(*this, view.total_bytes, view.free_bytes, sharing);
    const std::size_t basis =
        fraction_of == FractionBasis::total ? view.total_bytes : std::min(view.free_bytes, view.total_bytes);
    how = fmt::format("{} {}{}", fraction_text(*this), basis, split);
    summary = fmt::format("{} of {}{}{}, {}", fraction, human_byte_size(basis),
                          fraction_of == FractionBasis::free ? " free" : "",
                          sharing > 1 ? fmt::format(" / {} ranks", sharing) : std::string(), fraction_origin.variable);
  }
  if (bytes > view.total_bytes) {
    bytes = view.total_bytes;
    how += fmt::format(", no more than the device's {}", view.total_bytes);
  }
  std::string bounds;
  for (const std::vector<DeviceLimitRule>* rules : {&hami_limits, &mps_limits, &framework_limits}) {
    const DeviceLimitRule* rule = rule_for_device(*rules, view.device);
    if (rule == nullptr) continue;
    const unsigned divisor = rule->shared_by_processes ? sharing : 1;
    const std::size_t rule_cap = rule->bytes_for(view.total_bytes) / divisor;
    bounds += fmt::format("{}{}={}", bounds.empty() ? "; bounded by " : ", ", rule->variable, rule->written);
    if (divisor > 1) bounds += fmt::format(" / {} ranks", divisor);
    bounds += fmt::format(" = {}", rule_cap);
    // The cluster's bound is set where the process is started, not by the program.
    const std::string cluster = fmt::format(
        "bounded by {}={}{} ({}); {}", rule->variable, rule->written,
        divisor > 1 ? fmt::format(" / {} ranks", divisor) : std::string(),
        rules == &hami_limits ? "the device plugin's limit for this container" : "MPS's limit for this client",
        rules == &hami_limits ? "request more GPU memory for the container" : "raise it where the MPS client starts");
    if (rule_cap < bytes) {
      bytes = rule_cap;
      bounds += " (the lowest, in force)";
      summary = rule->variable;
      advice = cluster;
    }
    if (cap == 0 || rule_cap < cap) cap_advice = cluster;
    cap = cap == 0 ? rule_cap : std::min(cap, rule_cap);
  }
  bytes -= bytes % kLimitGranularity;
  cap = std::min(cap, view.total_bytes);
  cap -= cap % kLimitGranularity;
  return DeviceLimit{bytes, fmt::format("device {}: limit {} bytes: {}{}", view.device, bytes, how, bounds),
                     std::move(summary), cap, std::move(advice), std::move(cap_advice)};
}

std::string Policy::describe_limit() const {
  std::string text;
  const std::string fraction_part =
      fmt::format("{} ({}) of each device's {} memory{}", fraction, fraction_origin.variable, to_string(fraction_of),
                  per_rank == PerRank::off ? std::string()
                                           : fmt::format(", split between the ranks on its GPU ({})",
                                                         per_rank_origin.variable));
  if (!limit_per_device.empty()) {
    text = fmt::format("{} (GPUMEM_LIMIT) for the devices it names, else {}",
                       rules_text(limit_per_device).substr(std::string_view("GPUMEM_LIMIT=").size()), fraction_part);
  } else if (limit_bytes) {
    text = fmt::format("{} ({})", format_byte_size(*limit_bytes), limit_origin.variable);
  } else {
    text = fraction_part;
  }
  if (const std::vector<DeviceLimitRule> bounds = bounding_rules(*this); !bounds.empty()) {
    text += ", at most " + rules_text(bounds);
  }
  return text;
}

std::vector<std::string> Policy::limits_for_missing_devices(int device_count) const {
  std::vector<std::string> lines;
  for (const std::vector<DeviceLimitRule>* rules : {&limit_per_device, &hami_limits, &mps_limits}) {
    for (const DeviceLimitRule& rule : *rules) {
      if (!rule.device || *rule.device < device_count) continue;
      lines.push_back(fmt::format("{} names device {}, but this process sees {} device{} ({}); that "
                                  "limit applies to no device",
                                  rule.listed ? rule.variable + "'s list" : rule.variable, *rule.device, device_count,
                                  device_count == 1 ? "" : "s",
                                  device_count == 0   ? std::string("none")
                                  : device_count == 1 ? std::string("0")
                                                      : fmt::format("0 to {}", device_count - 1)));
    }
  }
  return lines;
}

std::string Policy::limit_below_granule_error(const DeviceView& view) const {
  if (per_rank == PerRank::off && limit_per_device.empty() && hami_limits.empty() && mps_limits.empty() &&
      framework_limits.empty() &&
      limit_for_device(view.total_bytes, view.free_bytes) == 0) {
    return limit_below_granule_error(view.device, view.total_bytes, view.free_bytes);
  }
  return fmt::format("{}, less than one {}-byte granule; device {}'s memory is not managed",
                     device_limit(view).derivation, kLimitGranularity, view.device);
}

std::string Policy::describe() const {
  std::string limit;
  if (!limit_per_device.empty()) {
    limit = with_origin(rules_text(limit_per_device).substr(std::string_view("GPUMEM_LIMIT=").size()),
                        limit_origin) + ", else " + fraction_text(*this);
  } else if (limit_bytes) {
    limit = with_origin(format_byte_size(*limit_bytes), limit_origin);
  } else {
    limit = fraction_text(*this);
  }

  std::string async;
  if (!async_prealloc) {
    async = "none";
  } else if (*async_prealloc < 0) {
    async = "release_threshold";
  } else {
    async = format_byte_size(static_cast<std::size_t>(*async_prealloc));
  }

  std::string line = fmt::format(
      "mode={} preallocate={} limit={} free_sync={} garbage_collection={} region_source={} split_rule={} "
      "async_prealloc={} log_level={} log_file={} stats={} stats_file={} trace={}",
      with_origin(to_string(mode), mode_origin), with_origin(preallocate ? "on" : "off", preallocate_origin),
      limit, with_origin(to_string(free_sync), free_sync_origin),
      with_origin(garbage_collection ? "on" : "off", garbage_collection_origin),
      with_origin(to_string(region_source), region_source_origin),
      with_origin(to_string(split_rule), split_rule_origin),
      with_origin(async, async_prealloc_origin), with_origin(to_string(log_level), log_level_origin),
      with_origin(log_file.empty() ? std::string("stderr") : quote_value(log_file), log_file_origin),
      with_origin(stats ? "on" : "off", stats_origin),
      with_origin(stats_file.empty() ? std::string("none") : quote_value(stats_file), stats_file_origin),
      with_origin(trace_file.empty() ? std::string("none") : quote_value(trace_file), trace_file_origin));
  // What only jobs of many ranks and clusters set: said when set, so a plain process's line is short.
  if (per_rank != PerRank::off || ranks.launcher != Launcher::none) {
    const std::string per_rank_value = per_rank == PerRank::automatic ? std::string("auto")
                                       : per_rank == PerRank::fixed   ? fmt::format("{}", per_rank_divisor)
                                                                      : std::string("off");
    line += fmt::format(" per_rank={} launcher=[{}]", with_origin(per_rank_value, per_rank_origin),
                        ranks.describe());
  }
  if (!hami_limits.empty() || !mps_limits.empty()) {
    std::vector<DeviceLimitRule> cluster = hami_limits;
    cluster.insert(cluster.end(), mps_limits.begin(), mps_limits.end());
    line += " cluster_limits=" + rules_text(cluster);
  }
  if (!framework_limits.empty()) line += " framework_limits=" + rules_text(framework_limits);
  if (!frameworks) {
    line += " frameworks=" + with_origin("off", frameworks_origin);
  } else if (!framework_switches.empty()) {
    std::string switched;
    for (const std::string& entry : framework_switches) switched += (switched.empty() ? "" : ",") + entry;
    line += fmt::format(" frameworks=[{}]({})", switched, kFrameworksSetVariable);
  }
  line += describe_share();
  return line;
}

std::string Policy::describe_share() const {
  if (!share) return {};
  return fmt::format(
      " share={} share_dir={} share_weight={} share_min={} share_wait={}", with_origin("auto", share_origin),
      with_origin(share_dir.empty() ? std::string("default") : quote_value(share_dir), share_dir_origin),
      with_origin(fmt::format("{}", share_weight_milli / 1000.0), share_weight_origin),
      with_origin(format_byte_size(share_min_bytes), share_min_origin),
      with_origin(fmt::format("{}ms", share_wait_ms), share_wait_origin));
}

}  // namespace gpumem
