// The launcher's ranks from the environment, and how many local ranks use one GPU.
#include "policy/ranks.h"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

#include "policy/value_parsers.h"

namespace gpumem {
namespace {

constexpr unsigned kMaxRanks = 1u << 24;  // far beyond any job; keeps every product in range

constexpr std::string_view kRankExpected = "not a rank (a decimal number, 0 or more)";
constexpr std::string_view kCountExpected = "not a number of ranks (a decimal number, 1 or more)";

struct LauncherVariables {
  Launcher launcher;
  std::array<std::string_view, 2> recognised_by;  // any of these set: this launcher started the process
  std::string_view rank;
  std::array<std::string_view, 2> local_rank;     // the first set wins; every one set is validated
  std::array<std::string_view, 2> local_ranks;    // empty for Slurm, whose count is a list per node
};

// Innermost first: see ranks_from_environment.
constexpr std::array<LauncherVariables, 4> kLaunchers{{
    {Launcher::torchrun, {"LOCAL_RANK", ""}, "RANK", {"LOCAL_RANK", ""}, {"LOCAL_WORLD_SIZE", ""}},
    {Launcher::open_mpi, {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_RANK"}, "OMPI_COMM_WORLD_RANK",
     {"OMPI_COMM_WORLD_LOCAL_RANK", ""}, {"OMPI_COMM_WORLD_LOCAL_SIZE", ""}},
    {Launcher::mpich, {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}, "PMI_RANK", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
     {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}},
    {Launcher::slurm, {"SLURM_LOCALID", ""}, "SLURM_PROCID", {"SLURM_LOCALID", ""}, {"", ""}},
}};

class RankReader {
 public:
  explicit RankReader(const TrimmedLookup& value_of) : value_of_(value_of) {}

  // The first valid one of `names` that is set, parsed with `minimum`; every one set is validated.
  // `role` names the value in the fallback of a bad one ("local rank").
  void read(std::span<const std::string_view> names, unsigned minimum, std::string_view role, RankValue& out) {
    const std::size_t problems_before = problems_.size();
    for (const std::string_view name : names) {
      if (name.empty()) continue;
      const std::optional<std::string_view> text = value_of_(name);
      if (!text) continue;
      const std::optional<unsigned> value = parse_count(*text, kMaxRanks);
      if (!value || *value < minimum) {
        reject(name, *text, minimum == 0 ? kRankExpected : kCountExpected, role);
        continue;
      }
      if (!out.value) out = RankValue{value, std::string(name)};
    }
    if (!out.value) return;
    for (std::size_t i = problems_before; i < problems_.size(); ++i) {  // another of the names gave it
      problems_[i].fallback = fmt::format("the launcher's {} is {} ({})", role, *out.value, out.variable);
    }
  }

  void reject(std::string_view name, std::string_view value, std::string_view what, std::string_view role) {
    problems_.push_back(invalid_variable(name, value, what, unknown(role)));
  }

  // The fallback of a bad value: it is left unknown, as if the launcher had not given it.
  static std::string unknown(std::string_view role) {
    return fmt::format("the launcher's {} is unknown", role);
  }

  // Slurm: the entry SLURM_NODEID of SLURM_STEP_TASKS_PER_NODE (a step started by srun), else of
  // SLURM_TASKS_PER_NODE (the job's).
  void read_slurm_tasks(RankValue& out) {
    RankValue node;
    const std::array<std::string_view, 1> node_names{"SLURM_NODEID"};
    read(node_names, 0, "node index", node);
    for (const std::string_view name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      const std::optional<std::string_view> text = value_of_(name);
      if (!text) continue;
      if (!slurm_tasks_on_node(*text, 0)) {
        reject(name, *text, "not Slurm's list of tasks per node (e.g. 4, or 2(x3),1)", "number of local ranks");
        return;
      }
      if (!node.value) {
        // Without the node's index only a one-node list says how many tasks run here.
        if (!slurm_tasks_on_node(*text, 1)) out = RankValue{slurm_tasks_on_node(*text, 0), std::string(name)};
        return;
      }
      const std::optional<unsigned> tasks = slurm_tasks_on_node(*text, *node.value);
      if (!tasks) {
        problems_.push_back(VariableProblem{
            "SLURM_NODEID", fmt::format("SLURM_NODEID={} has no entry in {}={}", *node.value, name, quote_value(*text)),
            unknown("number of local ranks")});
        return;
      }
      out = RankValue{tasks, std::string(name) + "[" + node.variable + "]"};
      return;
    }
  }

  bool set(std::string_view name) const { return !name.empty() && value_of_(name).has_value(); }
  std::vector<VariableProblem>& problems() { return problems_; }

 private:
  const TrimmedLookup& value_of_;
  std::vector<VariableProblem> problems_;
};

std::string shown(const RankValue& value) {
  if (!value.value) return "?";
  return fmt::format("{}({})", *value.value, value.variable);
}

}  // namespace

std::string_view to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::torchrun: return "torchrun";
    case Launcher::open_mpi: return "Open MPI";
    case Launcher::mpich: return "MPICH/PMI";
    case Launcher::slurm: return "Slurm";
    case Launcher::none: break;
  }
  return "none";
}

std::string LaunchRanks::describe() const {
  if (launcher == Launcher::none) return "none";
  return fmt::format("{}: rank {}, local rank {} of {}", to_string(launcher), shown(rank), shown(local_rank),
                     shown(local_ranks));
}

LaunchRanksResult ranks_from_environment(const TrimmedLookup& value_of) {
  RankReader reader(value_of);
  LaunchRanksResult result;
  for (const LauncherVariables& candidate : kLaunchers) {
    if (!std::ranges::any_of(candidate.recognised_by, [&](std::string_view name) { return reader.set(name); })) {
      continue;
    }
    LaunchRanks& ranks = result.ranks;
    ranks.launcher = candidate.launcher;
    const std::array<std::string_view, 1> rank_names{candidate.rank};
    reader.read(rank_names, 0, "rank", ranks.rank);
    reader.read(candidate.local_rank, 0, "local rank", ranks.local_rank);
    if (candidate.launcher == Launcher::slurm) {
      reader.read_slurm_tasks(ranks.local_ranks);
    } else {
      reader.read(candidate.local_ranks, 1, "number of local ranks", ranks.local_ranks);
    }
    // The count decides how a GPU is split, so it is kept and the local rank is the value dropped.
    if (ranks.local_rank.value && ranks.local_ranks.value && *ranks.local_rank.value >= *ranks.local_ranks.value) {
      reader.problems().push_back(VariableProblem{
          ranks.local_rank.variable,
          fmt::format("{}={} is not below {}={}, the number of ranks on this node", ranks.local_rank.variable,
                      *ranks.local_rank.value, ranks.local_ranks.variable, *ranks.local_ranks.value),
          RankReader::unknown("local rank")});
      ranks.local_rank = RankValue{};
    }
    break;
  }
  result.problems = std::move(reader.problems());
  return result;
}

std::optional<unsigned> slurm_tasks_on_node(std::string_view list, unsigned node) {
  // Entries "COUNT" or "COUNT(xREPEAT)", separated by commas.
  std::optional<unsigned> found;
  std::uint64_t first_node_of_entry = 0;
  while (true) {
    const std::size_t comma = list.find(',');
    const std::string_view entry = trim_blanks(list.substr(0, comma));
    std::string_view count_text = entry;
    unsigned repeat = 1;
    if (const std::size_t open = entry.find("(x"); open != std::string_view::npos) {
      if (entry.back() != ')') return std::nullopt;
      count_text = entry.substr(0, open);
      const std::optional<unsigned> times = parse_count(entry.substr(open + 2, entry.size() - open - 3), kMaxRanks);
      if (!times || *times == 0) return std::nullopt;
      repeat = *times;
    }
    const std::optional<unsigned> count = parse_count(count_text, kMaxRanks);
    if (!count) return std::nullopt;
    if (!found && node >= first_node_of_entry && node < first_node_of_entry + repeat) found = count;
    first_node_of_entry += repeat;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return found;
}

unsigned local_ranks_on_gpu(unsigned local_ranks, std::span<const GpuId> visible, std::size_t device) {
  if (visible.empty() || device >= visible.size()) return 1;
  unsigned sharing = 0;
  for (unsigned rank = 0; rank < local_ranks; ++rank) {
    if (visible[rank % visible.size()] == visible[device]) ++sharing;
  }
  return std::max(sharing, 1u);
}

}  // namespace gpumem
