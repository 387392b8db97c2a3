// NCCL's legacy-IPC probe (NCCL_CUMEM_ENABLE=0): cudaMalloc a buffer, take its IPC handle with the
// driver's cuIpcGetMemHandle (found through cudaGetDriverEntryPoint, as NCCL finds driver calls); a
// peer process opens it with cuIpcOpenMemHandle and writes into it. NCCL turns P2P off when either
// step fails. Prints `p2p=usable` when the exporter reads back exactly what the peer wrote, else
// `p2p=disabled` with the failing step; exits 3 on an unexpected CUDA error.
//
//   probe          the exporter
//   peer HANDLE    (started by probe)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "ipc_support.h"
#include "runtime_check.h"

using namespace ipc_test;

namespace {

constexpr std::size_t kBufferBytes = 8192 + 64;
constexpr std::size_t kPeerOffset = 4096 + 128;
constexpr std::size_t kPeerBytes = 1024;

int peer(const std::string& hex) {
  CUipcMemHandle handle{};
  if (!handle_from_hex(hex, handle, "peer")) return 2;
  CHECK_CUDA(cudaSetDevice(0));
  const auto open = driver_entry<PFN_cuIpcOpenMemHandle_v11000>("cuIpcOpenMemHandle");
  const auto close = driver_entry<PFN_cuIpcCloseMemHandle_v4010>("cuIpcCloseMemHandle");
  CUdeviceptr mapped = 0;
  const CUresult opened = open(&mapped, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (opened != CUDA_SUCCESS) {
    std::printf("open=%d\n", static_cast<int>(opened));
    return 6;
  }
  const auto data = pattern(kPeerBytes, 5);
  CHECK_CUDA(cudaMemcpy(reinterpret_cast<void*>(mapped + kPeerOffset), data.data(), data.size(),
                        cudaMemcpyHostToDevice));
  if (close(mapped) != CUDA_SUCCESS) return 3;
  return 0;
}

int probe() {
  CHECK_CUDA(cudaSetDevice(0));
  void *first = nullptr, *buffer = nullptr;
  CHECK_CUDA(cudaMalloc(&first, 1 << 16));  // NCCL's buffers are rarely the process's first allocation
  CHECK_CUDA(cudaMalloc(&buffer, kBufferBytes));
  CHECK_CUDA(cudaMemset(buffer, 0, kBufferBytes));
  CHECK_CUDA(cudaDeviceSynchronize());  // cleared before the peer writes (cudaMemset does not wait)
  const auto get_handle = driver_entry<PFN_cuIpcGetMemHandle_v4010>("cuIpcGetMemHandle");
  CUipcMemHandle handle{};
  const CUresult exported = get_handle(&handle, reinterpret_cast<CUdeviceptr>(buffer));
  if (exported != CUDA_SUCCESS) {
    std::printf("p2p=disabled export=%d\n", static_cast<int>(exported));
    return 0;
  }
  std::fflush(stdout);
  const int status = wait_exit(spawn_self({"peer", to_hex(&handle, sizeof handle)}));
  if (status != 0) {
    std::printf("p2p=disabled peer_exit=%d\n", status);
    return 0;
  }
  std::vector<std::uint8_t> read(kPeerBytes);
  CHECK_CUDA(cudaMemcpy(read.data(), static_cast<char*>(buffer) + kPeerOffset, read.size(), cudaMemcpyDeviceToHost));
  if (read != pattern(kPeerBytes, 5)) {
    std::printf("p2p=disabled data=wrong\n");
    return 4;
  }
  std::printf("p2p=usable\n");
  CHECK_CUDA(cudaFree(buffer));
  CHECK_CUDA(cudaFree(first));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "probe" && argc == 2) return probe();
  if (role == "peer" && argc == 3) return peer(argv[2]);
  std::fprintf(stderr, "usage: %s probe | peer HANDLE\n", argv[0]);
  return 2;
}
