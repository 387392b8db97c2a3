// vLLM's custom all-reduce shape of CUDA IPC: N ranks (separate processes) each cudaMalloc a buffer,
// export it with cudaIpcGetMemHandle, exchange the handles (here through the launcher), open every
// other rank's buffer with cudaIpcOpenMemHandle, write a flag into each peer's buffer, then sum every
// rank's data by reading the peers' buffers. Prints `all_reduce=ok ranks=N` when every rank saw
// exactly the data and flags the others wrote; exits 3 on an unexpected CUDA error, 4 on wrong data.
//
//   launch N                         starts N ranks and relays their handles
//   rank R N TO_LAUNCHER FROM_LAUNCHER   (started by launch; the two are pipe descriptors)
#include <cuda_runtime.h>
#include <fcntl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ipc_support.h"
#include "runtime_check.h"

using namespace ipc_test;

namespace {

constexpr int kMaxRanks = 8;
constexpr std::size_t kElements = 64 * 1024 + 17;  // floats per rank
constexpr std::size_t kDataBytes = kElements * sizeof(float);

float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)); }

int rank_main(int rank, int ranks, int to_launcher, int from_launcher) {
  CHECK_CUDA(cudaSetDevice(0));
  // A small block first, so the buffer lies inside a region under gpumem.
  void* scratch = nullptr;
  CHECK_CUDA(cudaMalloc(&scratch, 4096 + 512 * static_cast<std::size_t>(rank)));
  void* buffer = nullptr;  // kElements floats, then one flag per rank
  CHECK_CUDA(cudaMalloc(&buffer, kDataBytes + kMaxRanks * sizeof(int)));
  std::vector<float> mine(kElements);
  for (std::size_t i = 0; i < kElements; ++i) mine[i] = value(rank, i);
  CHECK_CUDA(cudaMemcpy(buffer, mine.data(), kDataBytes, cudaMemcpyHostToDevice));
  auto* flags = reinterpret_cast<int*>(static_cast<char*>(buffer) + kDataBytes);
  CHECK_CUDA(cudaMemset(flags, 0, kMaxRanks * sizeof(int)));
  CHECK_CUDA(cudaDeviceSynchronize());  // cleared before any peer can write a flag
  cudaIpcMemHandle_t handle{};
  CHECK_CUDA(cudaIpcGetMemHandle(&handle, buffer));
  std::vector<cudaIpcMemHandle_t> handles(static_cast<std::size_t>(ranks));
  if (!write_all(to_launcher, &handle, sizeof handle) ||
      !read_all(from_launcher, handles.data(), handles.size() * sizeof(cudaIpcMemHandle_t))) {
    return 5;
  }
  std::vector<void*> peers(static_cast<std::size_t>(ranks), nullptr);
  for (int p = 0; p < ranks; ++p) {
    if (p == rank) {
      peers[p] = buffer;
      continue;
    }
    CHECK_CUDA(cudaIpcOpenMemHandle(&peers[p], handles[p], cudaIpcMemLazyEnablePeerAccess));
    const int flag = rank + 1;
    auto* peer_flags = reinterpret_cast<int*>(static_cast<char*>(peers[p]) + kDataBytes);
    CHECK_CUDA(cudaMemcpy(peer_flags + rank, &flag, sizeof flag, cudaMemcpyHostToDevice));
  }
  CHECK_CUDA(cudaDeviceSynchronize());  // the flags have landed before this rank says so
  char step = 'r';
  if (!write_all(to_launcher, &step, 1) || !read_all(from_launcher, &step, 1)) return 5;  // every rank wrote
  std::vector<float> sum(kElements, 0.0f), peer(kElements);
  for (int p = 0; p < ranks; ++p) {
    CHECK_CUDA(cudaMemcpy(peer.data(), peers[p], kDataBytes, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < kElements; ++i) sum[i] += peer[i];
  }
  for (std::size_t i = 0; i < kElements; ++i) {
    float expected = 0.0f;
    for (int p = 0; p < ranks; ++p) expected += value(p, i);
    if (sum[i] != expected) {
      std::fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, i, sum[i], expected);
      return 4;
    }
  }
  std::vector<int> seen(kMaxRanks);
  CHECK_CUDA(cudaMemcpy(seen.data(), flags, seen.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int p = 0; p < ranks; ++p) {
    if (seen[p] != (p == rank ? 0 : p + 1)) {
      std::fprintf(stderr, "rank %d: flag of rank %d is %d\n", rank, p, seen[p]);
      return 4;
    }
  }
  // Nobody closes or frees before every rank has read.
  if (!write_all(to_launcher, &step, 1) || !read_all(from_launcher, &step, 1)) return 5;
  for (int p = 0; p < ranks; ++p) {
    if (p != rank) CHECK_CUDA(cudaIpcCloseMemHandle(peers[p]));
  }
  CHECK_CUDA(cudaFree(buffer));
  CHECK_CUDA(cudaFree(scratch));
  return 0;
}

// Each step: read one message of `bytes` from every rank, then answer every rank with `reply`.
bool relay(const std::vector<int>& from_ranks, const std::vector<int>& to_ranks, std::size_t bytes,
           bool send_all) {
  std::vector<char> gathered(from_ranks.size() * bytes);
  for (std::size_t r = 0; r < from_ranks.size(); ++r) {
    if (!read_all(from_ranks[r], gathered.data() + r * bytes, bytes)) return false;
  }
  for (int fd : to_ranks) {
    if (!(send_all ? write_all(fd, gathered.data(), gathered.size()) : write_all(fd, "g", 1))) return false;
  }
  return true;
}

int launch(int ranks) {
  if (ranks < 2 || ranks > kMaxRanks) {
    std::fprintf(stderr, "launch: expected 2 to %d ranks, got %d\n", kMaxRanks, ranks);
    return 2;
  }
  std::vector<int> from_ranks, to_ranks;
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return 5;
    // The launcher's ends stay out of the ranks, so a rank that dies is seen as end of file.
    fcntl(up[0], F_SETFD, FD_CLOEXEC);
    fcntl(down[1], F_SETFD, FD_CLOEXEC);
    pids.push_back(spawn_self({"rank", std::to_string(r), std::to_string(ranks), std::to_string(up[1]),
                               std::to_string(down[0])}));
    close(up[1]);
    close(down[0]);
    from_ranks.push_back(up[0]);
    to_ranks.push_back(down[1]);
  }
  const bool relayed = relay(from_ranks, to_ranks, sizeof(cudaIpcMemHandle_t), true) &&
                       relay(from_ranks, to_ranks, 1, false) && relay(from_ranks, to_ranks, 1, false);
  for (int fd : to_ranks) close(fd);  // a rank still waiting sees end of file
  int failed = 0;
  for (int r = 0; r < ranks; ++r) {
    const int status = wait_exit(pids[r]);
    if (status != 0) {
      std::printf("rank%d_exit=%d\n", r, status);
      ++failed;
    }
  }
  if (!relayed || failed > 0) return 4;
  std::printf("all_reduce=ok ranks=%d\n", ranks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "launch" && argc == 3) return launch(std::atoi(argv[2]));
  if (role == "rank" && argc == 6) {
    return rank_main(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
  }
  std::fprintf(stderr, "usage: %s launch N | rank R N TO_LAUNCHER FROM_LAUNCHER\n", argv[0]);
  return 2;
}
