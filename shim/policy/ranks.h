// What the launcher that started the process says of it: its rank, its local rank and how many ranks
// run on its node, and how many of those use one GPU. Pure functions of the environment and of the
// GPUs' identities (docs/configuration.md, "Many ranks").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/value_parsers.h"

namespace gpumem {

enum class Launcher : std::uint8_t { none, torchrun, open_mpi, mpich, slurm };

// "none", "torchrun", "Open MPI", "MPICH/PMI", "Slurm".
std::string_view to_string(Launcher launcher);

// One value the launcher gave, and the variable it came from.
struct RankValue {
  std::optional<unsigned> value;
  std::string variable;
};

struct LaunchRanks {
  Launcher launcher = Launcher::none;
  RankValue rank;         // the global rank
  RankValue local_rank;   // the rank among the ranks of this node
  RankValue local_ranks;  // how many ranks run on this node

  // "Open MPI: rank 5(OMPI_COMM_WORLD_RANK), local rank 1(OMPI_COMM_WORLD_LOCAL_RANK) of
  // 4(OMPI_COMM_WORLD_LOCAL_SIZE)", each value the launcher left out as "?"; "none" without one.
  std::string describe() const;
};

// A variable's value without surrounding blanks; nullopt when unset, empty or only blanks.
using TrimmedLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

// The ranks, and a problem for each variable whose value is wrong: that value alone is left unknown
// (the others the launcher gave still count).
struct LaunchRanksResult {
  LaunchRanks ranks;
  std::vector<VariableProblem> problems;
};

// Recognises the innermost launcher whose variables are set, in this order: torchrun (LOCAL_RANK),
// Open MPI (OMPI_COMM_WORLD_LOCAL_RANK or OMPI_COMM_WORLD_RANK), MPICH/Hydra and PMI (MPI_LOCALRANKID
// or PMI_LOCAL_RANK), Slurm (SLURM_LOCALID). A launcher started under another (torchrun under srun,
// mpirun inside a Slurm allocation) inherits the outer one's variables, so the first found wins and
// only its variables are read and validated. Values are decimal counts; a local rank must be below
// the number of local ranks (else the local rank is left unknown).
LaunchRanksResult ranks_from_environment(const TrimmedLookup& value_of);

// Entry `node` of Slurm's compressed list of tasks per node ("2(x3),1" is 2, 2, 2, 1); nullopt when
// the list is malformed or has no such entry.
std::optional<unsigned> slurm_tasks_on_node(std::string_view list, unsigned node);

// A GPU's identity: its UUID, the same in every process whatever CUDA_VISIBLE_DEVICES says.
using GpuId = std::array<std::uint8_t, 16>;

// The local ranks that use the GPU `visible[device]`, counted by identity: every local rank sees the
// same `visible` GPUs (they share one launcher environment) and rank r uses visible[r % size], the
// convention of torchrun, Horovod and the MPI examples. At least 1 (this process uses it); 1 when
// `device` is not an index of `visible`.
unsigned local_ranks_on_gpu(unsigned local_ranks, std::span<const GpuId> visible, std::size_t device);

}  // namespace gpumem
