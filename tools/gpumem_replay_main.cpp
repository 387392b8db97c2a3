// gpumem-replay: replays an allocation trace (RMM's replay-log CSV, or gpumem's) through the BFC
// arena over a fake region source and reports how the arena behaves. tools/README.md describes it.
//
// Exit status: 0 done; 1 the trace cannot be read or is malformed; 2 a usage error (an argument or
// environment variable). Every error is one line on stderr starting with "gpumem-replay: ".
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "policy/policy.h"
#include "replay.h"
#include "trace_reader.h"
#include "policy/value_parsers.h"

namespace {

using gpumem::replay::ReplayOptions;
using gpumem::replay::ReplayResult;
using gpumem::replay::TraceRecord;

constexpr std::string_view kProgram = "gpumem-replay";
constexpr int kExitTrace = 1;
constexpr int kExitUsage = 2;
constexpr std::size_t kMinimumLimit = 256;  // the arena's granule: a smaller limit serves nothing

constexpr std::string_view kHelp = R"(Usage: gpumem-replay [OPTIONS] TRACE

Replays an allocation trace through gpumem's BFC arena over a simulated device (no GPU is used or
needed; the arena's regions are fake addresses) and reports how the arena behaves: peak bytes in use,
peak reserved, utilisation, driver calls and the arena's time per operation.

TRACE is a CSV file ("-" reads standard input) in RMM's replay-log format, as written by RMM's
logging_resource_adaptor or by gpumem's shim (GPUMEM_TRACE). Its first line is a header; columns are
found by name in any order and unknown columns are ignored:
  Thread    decimal thread id
  Time      seconds since the epoch (1764047045.123456) or a time of day HH:MM:SS.ffffff;
            rows are replayed in file order whatever their times
  Action    allocate | free (or deallocate) | allocate failure (a refused request: counted, not replayed)
  Pointer   hex address, with or without 0x
  Size      decimal bytes
  Stream    decimal or 0x-hex
  Device    optional: decimal device ordinal (0 when absent)
  Reserved  optional: decimal bytes, may be empty
  Limit     optional: decimal bytes, may be empty (the limit the traced process ran with)
A free of a pointer that is not live in the replay is skipped and counted (unmatched frees).

Options:
  --device N            replay the rows of device N only (default: the device of the first row)
  --preallocate         reserve the whole limit at the first allocation, as the shim does: vmm, in
                        pieces doubling from one granule up to a 32nd of the limit (39 for 8 GiB at
                        2 MiB granules, at most 63); classic, a head of 1/32 of it and the rest
  --growth              grow by regions on demand, up to the limit
                        (default for both: the policy from the environment, as the shim reads it:
                        GPUMEM_PREALLOCATE, XLA_PYTHON_CLIENT_PREALLOCATE, TF_FORCE_GPU_ALLOW_GROWTH)
  --limit SIZE          the arena's limit (10GiB, 512MB, 1e9, 1.5G; K/M/G/T and KiB/MiB/GiB/TiB are
                        powers of 1024, KB/MB/GB/TB powers of 1000); at least 256 bytes
  --device-memory SIZE  the simulated device's total memory: without --limit, the limit is the
                        policy's limit for a device of this size (GPUMEM_LIMIT, else the fraction
                        GPUMEM_MEM_FRACTION / XLA_CLIENT_MEM_FRACTION / XLA_PYTHON_CLIENT_MEM_FRACTION,
                        0.75 by default, of it)
                        Without --limit and --device-memory: GPUMEM_LIMIT if set, else the trace's
                        Limit column (its first value for the device), else an error.
  --source SOURCE       where regions come from, as the shim's GPUMEM_REGION_SOURCE: classic (one
                        driver allocation per region) or vmm (one reserved address range of twice
                        the limit, memory mapped under it in granules as blocks need it, idle
                        granules unmapped; the limit bounds the memory mapped);
                        default: as GPUMEM_REGION_SOURCE (vmm unless set to classic, as the shim on
                        a device with virtual memory management)
  --granule SIZE        vmm: the unit memory is mapped and unmapped in, a power of two of at least
                        2MiB (default 2MiB, CUDA's granularity on current GPUs)
  --idle-slack FRACTION vmm, growth mode: how far beyond its live peak the arena may hold memory
                        (plus one --min-growth step) before it unmaps idle granules to map their memory
                        where a request needs it, rather than take new memory; default 0.015625 (1/64),
                        the shim's
  --keep-idle           vmm, growth mode: --idle-slack inf (idle granules unmapped only at the limit)
  --min-growth SIZE     growth mode: the smallest region (classic) or growth step (vmm); default
                        8MiB, the shim's
  --min-limit           also find the smallest limit (a multiple of 1 MiB) with which the whole trace
                        replays without a refused allocation, by binary search, with the chosen
                        preallocate/growth mode
  --latency MODEL       the driver's latency per call for the modelled time in the driver: published
                        (the default: cudasim/README.md, "Driver latency", has the figures and their
                        sources), none, and NAME=MICROSECONDS items (published,cuMemCreate=100)
  --json                print one JSON object instead of the text report
  -h, --help            print this help and exit

Garbage collection (growth mode: give wholly free regions back before refusing) follows
GPUMEM_GARBAGE_COLLECTION (default on), the split rule GPUMEM_SPLIT_RULE (tight or xla). Every variable the shim reads is validated; an invalid one is
an error. Frees are replayed unfenced (there is no device to wait for).

Report (text, or the keys of --json):
  peak_in_use       the arena's peak bytes in use (sizes rounded up to 256 bytes)
  peak_requested    peak of the bytes the live blocks asked for
  peak_reserved     peak bytes held in regions
  utilisation       peak_requested / peak_reserved
  peak_live_granules  peak bytes of the (vmm) granules live blocks overlap: what an arena that
                    mapped memory under those granules only would hold at most
  driver_calls      the driver calls the shim's source would make (calls: by name): classic regions
                    allocated and freed; vmm: the range reserved, pieces created, mappings made,
                    opened to the device, unmapped, released; region_grows: growth steps;
                    region_maps: memory mapped again under granules unmapped before; region_unmaps:
                    unmap calls; region_loans: granules backed by idle memory of pieces that also hold
                    live blocks (mapped a second time, no new memory); driver_releases: classic
                    regions given back during the replay
  driver_ms         the time those calls take at --latency per call (modelled), milliseconds
  ns_per_op         steady-clock time inside the arena's calls, per operation
  operations        arena calls replayed (allocations, refused ones included, and frees)
  failed            allocations the arena refused in the replay
  skipped_failures  "allocate failure" rows in the trace
  unmatched_frees   frees of pointers not live in the replay
  min_limit         with --min-limit: bytes, or null when even 1 TiB does not suffice
  also: device, limit, mode (preallocate|growth), source (classic|vmm), split_rule, zero_size_allocations,
  duplicate_allocations (allocations of a pointer still live: the earlier block is freed first)

Exit status: 0 done, 1 unreadable or malformed trace, 2 usage error.
)";

// An error to report: one line, and the exit status.
struct Failure {
  int status = kExitUsage;
  std::string message;
};

struct Arguments {
  std::string trace_path;
  std::optional<int> device;
  std::optional<bool> preallocate;  // --preallocate / --growth
  std::optional<std::size_t> limit;
  std::optional<std::size_t> device_memory;
  std::optional<gpumem::replay::SourceKind> source;
  std::optional<std::size_t> min_growth;
  std::optional<std::size_t> granule;
  bool keep_idle = false;
  std::optional<double> idle_slack;
  std::string latency_spec = "published";
  cudasim::DriverLatency latency = cudasim::kPublishedLatency;
  bool min_limit = false;
  bool json = false;
  bool help = false;
};

std::optional<std::size_t> parse_size_argument(std::string_view text) {
  const std::optional<std::size_t> bytes = gpumem::parse_byte_size(gpumem::trim_blanks(text));
  if (!bytes || *bytes == 0) return std::nullopt;
  return bytes;
}

constexpr std::string_view kSizeExpected =
    "a byte size above 0 (e.g. 10GiB, 512MB, 1e9, 1.5G)";

std::optional<Failure> parse_arguments(const std::vector<std::string_view>& args, Arguments& out) {
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (options_done || arg == "-" || arg.size() < 2 || arg[0] != '-') {
      if (!out.trace_path.empty()) {
        return Failure{kExitUsage, fmt::format("{}: unexpected argument {}: expected one trace file (already "
                                               "given: {}; see --help)",
                                               kProgram, gpumem::quote_value(arg),
                                               gpumem::quote_value(out.trace_path))};
      }
      if (arg.empty()) return Failure{kExitUsage, fmt::format("{}: expected a trace file, got \"\"", kProgram)};
      out.trace_path = std::string(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    // --name=value or --name value
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (const std::size_t equals = arg.find('='); equals != std::string_view::npos && arg.starts_with("--")) {
      name = arg.substr(0, equals);
      inline_value = arg.substr(equals + 1);
    }
    const auto flag = [&](bool& target) -> std::optional<Failure> {
      if (inline_value) {
        return Failure{kExitUsage, fmt::format("{}: {} takes no value, got {}", kProgram, name,
                                               gpumem::quote_value(*inline_value))};
      }
      target = true;
      return std::nullopt;
    };
    const auto value = [&]() -> std::optional<std::string_view> {
      if (inline_value) return inline_value;
      if (i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    const auto missing = [&](std::string_view expected) {
      return Failure{kExitUsage, fmt::format("{}: {}: expected {}, got nothing", kProgram, name, expected)};
    };
    const auto invalid = [&](std::string_view expected, std::string_view got) {
      return Failure{kExitUsage,
                     fmt::format("{}: {}: expected {}, got {}", kProgram, name, expected, gpumem::quote_value(got))};
    };

    if (name == "-h" || name == "--help") {
      if (auto failure = flag(out.help)) return failure;
    } else if (name == "--json") {
      if (auto failure = flag(out.json)) return failure;
    } else if (name == "--min-limit") {
      if (auto failure = flag(out.min_limit)) return failure;
    } else if (name == "--preallocate" || name == "--growth") {
      bool set = false;
      if (auto failure = flag(set)) return failure;
      const bool preallocate = name == "--preallocate";
      if (out.preallocate && *out.preallocate != preallocate) {
        return Failure{kExitUsage,
                       fmt::format("{}: {}: expected either --preallocate or --growth, not both", kProgram, name)};
      }
      out.preallocate = preallocate;
    } else if (name == "--device") {
      constexpr std::string_view kDeviceExpected = "a device ordinal (0, 1, ...)";
      const auto text = value();
      if (!text) return missing(kDeviceExpected);
      int device = 0;
      const std::string_view trimmed = gpumem::trim_blanks(*text);
      const auto [end, error] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), device, 10);
      if (trimmed.empty() || error != std::errc{} || end != trimmed.data() + trimmed.size() || device < 0) {
        return invalid(kDeviceExpected, *text);
      }
      out.device = device;
    } else if (name == "--granule") {
      constexpr const char* kGranuleExpected = "a power of two of at least 2MiB";
      const auto text = value();
      if (!text) return missing(kGranuleExpected);
      const std::optional<std::size_t> bytes = parse_size_argument(*text);
      if (!bytes || *bytes < gpumem::replay::kVmmGranule || (*bytes & (*bytes - 1)) != 0) {
        return invalid(kGranuleExpected, *text);
      }
      out.granule = bytes;
    } else if (name == "--keep-idle") {
      if (auto failure = flag(out.keep_idle)) return failure;
    } else if (name == "--latency") {
      const auto text = value();
      constexpr const char* kLatencyExpected = "published, none or NAME=MICROSECONDS items (cuMemCreate=193.32)";
      if (!text) return missing(kLatencyExpected);
      std::string why;
      const std::optional<cudasim::DriverLatency> latency = cudasim::parse_driver_latency(*text, why);
      if (!latency) return Failure{kExitUsage, fmt::format("{}: --latency: {}", kProgram, why)};
      out.latency = *latency;
      out.latency_spec = std::string(*text);
    } else if (name == "--idle-slack") {
      constexpr const char* kSlackExpected = "a fraction of 0 or more (0.015625), or inf";
      const auto text = value();
      if (!text) return missing(kSlackExpected);
      const std::string trimmed(gpumem::trim_blanks(*text));
      double slack = 0.0;
      if (trimmed == "inf") {
        slack = std::numeric_limits<double>::infinity();
      } else {
        const auto [end, error] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), slack);
        if (trimmed.empty() || error != std::errc{} || end != trimmed.data() + trimmed.size() || !(slack >= 0.0) ||
            !std::isfinite(slack)) {
          return invalid(kSlackExpected, *text);
        }
      }
      out.idle_slack = slack;
    } else if (name == "--limit" || name == "--device-memory" || name == "--min-growth") {
      const auto text = value();
      if (!text) return missing(kSizeExpected);
      const std::optional<std::size_t> bytes = parse_size_argument(*text);
      if (!bytes) return invalid(kSizeExpected, *text);
      if (name == "--limit") {
        if (*bytes < kMinimumLimit) return invalid("a limit of at least 256 bytes", *text);
        out.limit = bytes;
      } else {
        (name == "--min-growth" ? out.min_growth : out.device_memory) = bytes;
      }
    } else if (name == "--source") {
      constexpr std::string_view kExpected = "vmm or classic";
      const auto text = value();
      if (!text) return missing(kExpected);
      const std::string_view source = gpumem::trim_blanks(*text);
      if (gpumem::equals_ignoring_case(source, "vmm")) {
        out.source = gpumem::replay::SourceKind::vmm;
      } else if (gpumem::equals_ignoring_case(source, "classic")) {
        out.source = gpumem::replay::SourceKind::classic;
      } else {
        return invalid(kExpected, *text);
      }
    } else {
      return Failure{kExitUsage, fmt::format("{}: unknown option {} (see --help)", kProgram,
                                             gpumem::quote_value(name))};
    }
  }
  if (!out.help && out.trace_path.empty()) {
    return Failure{kExitUsage, fmt::format("{}: expected a trace file (a CSV path, or - for standard input; see "
                                           "--help)",
                                           kProgram)};
  }
  return std::nullopt;
}

// The policy's error line, reworded for this tool, which replays nothing on a configuration it cannot
// take as written: "gpumem: X=... is ...; ignored: ..." becomes "gpumem-replay: X=... is ...".
std::string policy_error(std::string message) {
  constexpr std::string_view kPrefix = "gpumem: ";
  if (message.starts_with(kPrefix)) message.erase(0, kPrefix.size());
  for (const std::string_view consequence : {"; ignored: ", "; the lower applies: ", "; GPUMEM_STRICT is set: "}) {
    if (const std::size_t at = message.find(consequence); at != std::string::npos) message.erase(at);
  }
  return fmt::format("{}: {}", kProgram, message);
}

// The whole file (or standard input) in one string, read once: the trace's text is the largest thing
// the tool holds besides its rows, so it is never copied.
std::optional<std::string> read_all(const std::string& path, std::string& error) {
  const bool standard_input = path == "-";
  const int fd = standard_input ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  const auto fail = [&](int number) -> std::optional<std::string> {
    error = standard_input ? fmt::format("cannot read standard input: {}", std::strerror(number))
                           : fmt::format("cannot read {}: {}", gpumem::quote_value(path), std::strerror(number));
    if (!standard_input && fd >= 0) ::close(fd);
    return std::nullopt;
  };
  if (fd < 0) return fail(errno);
  struct stat info {};
  if (::fstat(fd, &info) != 0) return fail(errno);
  if (S_ISDIR(info.st_mode)) return fail(EISDIR);
  if (!standard_input && !S_ISREG(info.st_mode)) return fail(EINVAL);  // a FIFO or a device: never waited on
  std::string text;
  if (S_ISREG(info.st_mode) && info.st_size > 0) text.reserve(static_cast<std::size_t>(info.st_size));
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  while (true) {
    const std::size_t at = text.size();
    text.resize(at + kChunk);
    const ssize_t got = ::read(fd, text.data() + at, kChunk);
    if (got < 0 && errno == EINTR) {
      text.resize(at);
      continue;
    }
    if (got < 0) return fail(errno);
    text.resize(at + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  if (!standard_input) ::close(fd);
  return text;
}

std::string human_bytes(std::size_t bytes) {
  static constexpr std::string_view kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{} ({:.2f} {})", bytes, value, kUnits[unit]);
}

struct Setup {
  int device = 0;
  std::size_t limit = 0;
  std::string limit_origin;
  gpumem::SplitRule split_rule = gpumem::SplitRule::tight;
  ReplayOptions options;
};

std::string_view source_name(const Setup& setup) {
  return setup.options.source == gpumem::replay::SourceKind::vmm ? "vmm" : "classic";
}

// Chooses the device, the limit and the arena options; or a usage error.
// `rows`, every row of the trace on entry, keeps those of the chosen device.
std::optional<Failure> choose_setup(const Arguments& arguments, const gpumem::Policy& policy,
                                    std::vector<TraceRecord>& rows, Setup& setup) {
  setup.device = arguments.device.value_or(rows.empty() ? 0 : rows.front().device);
  std::set<int> devices;
  if (arguments.device) {
    for (const TraceRecord& record : rows) devices.insert(record.device);
  }
  gpumem::replay::keep_rows_of_device(rows, setup.device);
  if (rows.empty() && !devices.empty()) {
    std::string list;
    for (const int device : devices) list += fmt::format("{}{}", list.empty() ? "" : ", ", device);
    return Failure{kExitUsage, fmt::format("{}: --device {}: expected a device the trace has rows for ({})",
                                           kProgram, setup.device, list)};
  }

  if (arguments.limit) {
    setup.limit = *arguments.limit;
    setup.limit_origin = "--limit";
  } else if (arguments.device_memory) {
    setup.limit = policy.limit_for_device(*arguments.device_memory, *arguments.device_memory);
    setup.limit_origin = policy.limit_bytes
                             ? fmt::format("{}, capped at --device-memory {}", policy.limit_origin.variable,
                                           *arguments.device_memory)
                             : fmt::format("{} ({}) of --device-memory {}", policy.fraction,
                                           policy.fraction_origin.variable, *arguments.device_memory);
    if (setup.limit < kMinimumLimit) {
      return Failure{kExitUsage, fmt::format("{}: --device-memory {}: the policy's limit for it is {} bytes, "
                                             "expected at least 256",
                                             kProgram, *arguments.device_memory, setup.limit)};
    }
  } else if (policy.limit_bytes) {
    setup.limit = *policy.limit_bytes;
    setup.limit_origin = policy.limit_origin.variable;
    if (setup.limit < kMinimumLimit) {
      return Failure{kExitUsage, fmt::format("{}: {}={}: expected a limit of at least 256 bytes", kProgram,
                                             policy.limit_origin.variable, setup.limit)};
    }
  } else {
    std::optional<std::size_t> traced;
    for (const TraceRecord& row : rows) {
      if (row.limit) {
        traced = row.limit;
        break;
      }
    }
    if (!traced || *traced < kMinimumLimit) {
      return Failure{kExitUsage, fmt::format("{}: expected --limit SIZE or --device-memory SIZE: the trace has no "
                                             "Limit column value{} for device {}",
                                             kProgram, traced ? " of at least 256 bytes" : "", setup.device)};
    }
    setup.limit = *traced;
    setup.limit_origin = "the trace's Limit column";
  }

  setup.options.limit = setup.limit;
  setup.options.preallocate = arguments.preallocate.value_or(policy.preallocate);
  setup.options.garbage_collection = policy.garbage_collection;
  // As the shim on a device that supports virtual memory management.
  setup.options.source = arguments.source.value_or(policy.region_source == gpumem::RegionSourceChoice::classic
                                                       ? gpumem::replay::SourceKind::classic
                                                       : gpumem::replay::SourceKind::vmm);
  setup.options.max_internal_fragmentation = gpumem::max_internal_fragmentation(policy.split_rule);
  setup.split_rule = policy.split_rule;
  if (arguments.min_growth) setup.options.min_growth_bytes = *arguments.min_growth;
  if (arguments.granule) setup.options.vmm_granule = *arguments.granule;
  if (arguments.idle_slack) setup.options.idle_slack = *arguments.idle_slack;
  if (arguments.keep_idle) setup.options.idle_slack = std::numeric_limits<double>::infinity();
  return std::nullopt;
}

void print_json(const Arguments& arguments, const Setup& setup, const ReplayResult& result, std::size_t torn_rows,
                const std::optional<std::size_t>& min_limit) {
  const bool asked_min_limit = arguments.min_limit;
  nlohmann::ordered_json report;
  report["peak_in_use"] = result.peak_in_use;
  report["peak_reserved"] = result.peak_reserved;
  report["utilisation"] = result.utilisation;
  report["driver_calls"] = result.driver_calls;
  report["driver_ms"] = gpumem::replay::modelled_driver_ms(result.calls, arguments.latency);
  report["latency"] = arguments.latency_spec;
  report["calls"] = {{"cuMemAlloc", result.calls.allocs},         {"cuMemFree", result.calls.frees},
                     {"cuMemAddressReserve", result.calls.range_reserves},
                     {"cuMemAddressFree", result.calls.range_frees}, {"cuMemCreate", result.calls.creates},
                     {"cuMemMap", result.calls.maps},             {"cuMemSetAccess", result.calls.access_sets},
                     {"cuMemUnmap", result.calls.unmaps},         {"cuMemRelease", result.calls.releases},
                     {"cuMemRetainAllocationHandle", result.calls.retains}};
  report["ns_per_op"] = result.ns_per_op;
  if (asked_min_limit) {
    if (min_limit) {
      report["min_limit"] = *min_limit;
    } else {
      report["min_limit"] = nullptr;
    }
  }
  report["peak_requested"] = result.peak_requested;
  report["region_grows"] = result.region_grows;
  report["region_maps"] = result.region_maps;
  report["region_unmaps"] = result.region_unmaps;
  report["region_loans"] = result.region_loans;
  report["granule"] = setup.options.vmm_granule;
  report["peak_live_granules"] = result.peak_live_granules;
  report["driver_releases"] = result.driver_releases;
  report["operations"] = result.operations;
  report["failed"] = result.failed;
  report["skipped_failures"] = result.skipped_failures;
  report["torn_rows"] = torn_rows;
  report["unmatched_frees"] = result.unmatched_frees;
  report["zero_size_allocations"] = result.zero_size_allocations;
  report["duplicate_allocations"] = result.duplicate_allocations;
  report["device"] = setup.device;
  report["limit"] = setup.limit;
  report["mode"] = setup.options.preallocate ? "preallocate" : "growth";
  report["source"] = source_name(setup);
  report["split_rule"] = gpumem::to_string(setup.split_rule);
  report["min_growth"] = setup.options.min_growth_bytes;
  fmt::print("{}\n", report.dump());
}

void print_text(const Arguments& arguments, const Setup& setup, std::size_t rows, std::size_t records,
                std::size_t torn_rows, const ReplayResult& result, const std::optional<std::size_t>& min_limit) {
  const auto line = [](std::string_view label, const std::string& value) {
    fmt::print("{:<18}{}\n", label, value);
  };
  line("trace", fmt::format("{}, device {}: {} of {} rows", arguments.trace_path, setup.device, rows, records));
  if (torn_rows > 0) line("torn rows", fmt::format("{} (the last, cut short: skipped)", torn_rows));
  line("arena", fmt::format("{}, {} source, split rule {}, garbage collection {}",
                            setup.options.preallocate ? "preallocate" : "growth", source_name(setup),
                            gpumem::to_string(setup.split_rule), setup.options.garbage_collection ? "on" : "off"));
  line("limit", fmt::format("{}, from {}", human_bytes(setup.limit), setup.limit_origin));
  line("operations", fmt::format("{} ({} allocations, {} frees)", result.operations, result.allocations + result.failed,
                                 result.frees));
  line("failed", result.first_failed_line
                     ? fmt::format("{} (first at line {})", result.failed, *result.first_failed_line)
                     : fmt::format("{}", result.failed));
  line("skipped failures", fmt::format("{}", result.skipped_failures));
  line("unmatched frees", fmt::format("{}", result.unmatched_frees));
  if (result.zero_size_allocations > 0) line("zero-size allocs", fmt::format("{}", result.zero_size_allocations));
  if (result.duplicate_allocations > 0) line("duplicate allocs", fmt::format("{}", result.duplicate_allocations));
  line("peak requested", human_bytes(result.peak_requested));
  line("peak in use", human_bytes(result.peak_in_use));
  line("peak reserved", human_bytes(result.peak_reserved));
  line("live granules", human_bytes(result.peak_live_granules));
  line("utilisation", fmt::format("{:.4f} ({:.2f}%)", result.utilisation, 100.0 * result.utilisation));
  line("driver calls", fmt::format("{} ({} growth steps, {} remappings, {} unmappings, {} loans, {} releases)",
                                   result.driver_calls, result.region_grows, result.region_maps,
                                   result.region_unmaps, result.region_loans, result.driver_releases));
  const gpumem::PlatformCalls& c = result.calls;
  // Only the calls made: a classic replay makes two kinds, a virtual-memory one up to eight.
  const std::pair<const char*, std::uint64_t> by_name[] = {
      {"cuMemAlloc", c.allocs}, {"cuMemFree", c.frees}, {"cuMemAddressReserve", c.range_reserves},
      {"cuMemAddressFree", c.range_frees}, {"cuMemCreate", c.creates}, {"cuMemMap", c.maps},
      {"cuMemSetAccess", c.access_sets}, {"cuMemUnmap", c.unmaps}, {"cuMemRelease", c.releases},
      {"cuMemRetainAllocationHandle", c.retains}};
  std::string made;
  for (const auto& [name, count] : by_name) {
    if (count > 0) made += fmt::format("{}{} {}", made.empty() ? "" : ", ", name, count);
  }
  line("calls by name", made.empty() ? std::string("none") : made);
  line("driver time", fmt::format("{:.2f} ms modelled (latency {})",
                                         gpumem::replay::modelled_driver_ms(c, arguments.latency),
                                         arguments.latency_spec));
  line("time per op", fmt::format("{:.1f} ns", result.ns_per_op));
  if (arguments.min_limit) {
    line("min limit", min_limit ? human_bytes(*min_limit) : std::string("none up to 1 TiB"));
  }
}

int run(const std::vector<std::string_view>& args) {
  Arguments arguments;
  if (const std::optional<Failure> failure = parse_arguments(args, arguments)) {
    fmt::print(stderr, "{}\n", failure->message);
    return failure->status;
  }
  if (arguments.help) {
    fmt::print("{}", kHelp);
    return 0;
  }

  const gpumem::PolicyResult policy = gpumem::policy_from_environment(
      [](std::string_view name) -> std::optional<std::string_view> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) return std::nullopt;
        return std::string_view(value);
      });
  if (!policy.errors.empty()) {
    for (const gpumem::PolicyError& error : policy.errors) fmt::print(stderr, "{}\n", policy_error(error.line));
    return kExitUsage;
  }

  std::string read_error;
  std::optional<std::string> text = read_all(arguments.trace_path, read_error);
  if (!text) {
    fmt::print(stderr, "{}: {}\n", kProgram, read_error);
    return kExitTrace;
  }
  gpumem::replay::TraceParseResult parsed = gpumem::replay::parse_trace(*text);
  text.reset();  // the rows hold what the replay needs
  if (!parsed.trace) {
    fmt::print(stderr, "{}: {}: {}\n", kProgram, arguments.trace_path == "-" ? "standard input" : arguments.trace_path,
               parsed.error);
    return kExitTrace;
  }
  std::vector<TraceRecord> rows = std::move(parsed.trace->records);
  const std::size_t trace_rows = rows.size();
  if (parsed.trace->torn_rows > 0) {
    fmt::print(stderr, "{}: note: {}: line {}, the last, is cut short (the traced process was killed while "
               "writing it?); skipped\n", kProgram, arguments.trace_path == "-" ? "standard input" : arguments.trace_path,
               parsed.trace->torn_line);
  }

  Setup setup;
  if (const std::optional<Failure> failure = choose_setup(arguments, *policy.policy, rows, setup)) {
    fmt::print(stderr, "{}\n", failure->message);
    return failure->status;
  }

  const ReplayResult result = gpumem::replay::replay(rows, setup.options);
  std::optional<std::size_t> min_limit;
  if (arguments.min_limit) min_limit = gpumem::replay::find_min_limit(rows, setup.options);

  if (arguments.json) {
    print_json(arguments, setup, result, parsed.trace->torn_rows, min_limit);
  } else {
    print_text(arguments, setup, rows.size(), trace_rows, parsed.trace->torn_rows, result, min_limit);
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) {
    fmt::print(stderr, "{}: cannot write the report to standard output\n", kProgram);
    return kExitTrace;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string_view> args;
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    return run(args);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpumem-replay: %s\n", error.what());
  } catch (...) {
    std::fprintf(stderr, "gpumem-replay: unexpected error\n");
  }
  return kExitTrace;
}
