// NCCL: one communicator per device over two devices (ncclCommInitAll), each one's rank and size
// asked for, then destroyed.
#include <cuda_runtime.h>
#include <nccl.h>

#include "library_calls.h"

int main() {
  constexpr int ranks = 2;
  int version = 0;
  ncclComm_t comms[ranks] = {};
  const int devices[ranks] = {0, 1};
  CALL("nccl", ncclGetVersion(&version));
  std::printf("nccl: version %d\n", version);
  CALL("nccl", ncclCommInitAll(comms, ranks, devices));
  for (int i = 0; i < ranks; ++i) {
    int rank = -1, count = 0;
    CALL("nccl", ncclCommUserRank(comms[i], &rank));
    CALL("nccl", ncclCommCount(comms[i], &count));
    std::printf("nccl: communicator %d is rank %d of %d\n", i, rank, count);
  }
  for (int i = 0; i < ranks; ++i) CALL("nccl", ncclCommDestroy(comms[i]));
  std::printf("nccl_calls: done\n");
  return 0;
}
