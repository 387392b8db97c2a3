// alloc_churn: many cudaMalloc/cudaFree calls of mixed sizes (64 B to 256 KiB), each block filled
// with known data and verified before it is freed. Times the allocation calls, which is where a
// pooling allocator pays off: real cudaMalloc/cudaFree cost tens of microseconds each.
//
//   alloc_churn [SCALE]   runs SCALE x 4000 steps (default 1)
#include "churn.h"
#include "runtime_memory.h"

int main(int argc, char** argv) {
  examples::ChurnConfig config;
  config.steps *= examples::parse_argument(argc, argv, 1, "SCALE");
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // creates the context here, so its cost is not in the timings

  examples::RuntimeMemory memory;
  const examples::ChurnResult result = examples::run_churn(memory, config);
  examples::print_churn_summary("alloc_churn", "cudaMalloc/cudaFree", config, result);
  result.checksum.print();
  return 0;
}
