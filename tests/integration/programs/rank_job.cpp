// One rank of a job, shaped like a framework's worker.
//
// It picks its GPU by local rank (as torchrun, Horovod and the MPI examples do), allocates its
// working set through the CUDA runtime, waits until every local rank has tried (so that all hold
// their memory at once, as a job's ranks do), prints its line, waits until every rank has printed
// (mpirun stops the rest of a job when one rank exits non-zero), then frees and exits: 0 when its
// allocation succeeded, 1 when it (or the context before it) was refused.
//
// The local ranks make their first allocation in turn, rank 0 first, as ranks whose start-up takes a
// little longer each do; it makes the outcome certain. (Ranks that preallocate at the same instant
// each retry a refused preallocation at 0.9x of its size, and may by chance share a GPU in pieces
// that happen to fit.)
//
//   rank_job BYTES BARRIER_DIR RANKS
// Prints one line: rank=R local_rank=L device=D result=ok|<error> free=F total=T
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "runtime_check.h"

namespace {

// The first of `names` set in the environment, as a number; `fallback` when none is.
long from_environment(std::initializer_list<const char*> names, long fallback) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return std::strtol(value, nullptr, 10);
  }
  return fallback;
}

// Waits until `count` files named PREFIX.* are in `folder`; false after 60 s.
bool wait_for(const std::filesystem::path& folder, const std::string& prefix, long count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    long found = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.path().filename().string().rfind(prefix + ".", 0) == 0) ++found;
    }
    if (found >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void mark(const std::filesystem::path& folder, const std::string& prefix, long rank) {
  std::ofstream(folder / (prefix + "." + std::to_string(rank))) << rank << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: rank_job BYTES BARRIER_DIR RANKS\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const std::filesystem::path folder = argv[2];
  const long ranks = std::strtol(argv[3], nullptr, 10);
  const long rank = from_environment({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}, 0);
  const long local_rank = from_environment(
      {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}, 0);

  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  bool in_time = wait_for(folder, "tried", local_rank);  // ranks 0 .. local_rank - 1 went first
  const int device = static_cast<int>(local_rank % devices);
  // A rank that finds its GPU full cannot even make its context: that is its refusal too.
  cudaError_t status = cudaSetDevice(device);
  void* block = nullptr;
  if (status == cudaSuccess) status = cudaMalloc(&block, bytes);
  std::size_t free = 0;
  std::size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) free = total = 0;
  mark(folder, "tried", local_rank);
  in_time = wait_for(folder, "tried", ranks) && in_time;  // all hold their memory at once
  std::printf("rank=%ld local_rank=%ld device=%d result=%s free=%zu total=%zu\n", rank, local_rank, device,
              status == cudaSuccess ? "ok" : cudaGetErrorName(status), free, total);
  std::fflush(stdout);
  // And none exits before every rank has printed: mpirun stops the others when one exits non-zero.
  mark(folder, "printed", local_rank);
  in_time = wait_for(folder, "printed", ranks) && in_time;
  if (!in_time) {
    std::fprintf(stderr, "rank_job: rank %ld: the other ranks did not try, or print, within 60 s\n", rank);
    return 4;
  }
  if (status == cudaSuccess) CHECK_CUDA(cudaFree(block));
  return status == cudaSuccess ? 0 : 1;
}
