// Peer access as multi-GPU programs use it: PyTorch and NCCL call cudaDeviceEnablePeerAccess from each
// device to the others, then a kernel or copy on one device reads the other's cudaMalloc memory. With
// cuMemAlloc memory the driver opens it to the peer; memory mapped with cuMemCreate is open only to the
// devices cuMemSetAccess names, so this program asks the driver, through cuMemGetAccess, which devices
// may access each block, or for pool memory (cuda_async mode) cuMemPoolGetAccess, since pools, too, are
// open only to the devices cuMemPoolSetAccess names. It prints `key=value` lines, the access as
// readwrite, read or none (not_vmm: memory of neither kind, whose peer access the driver keeps
// itself); exits 0 when
// every call succeeded and the data arrived, 3 on an unexpected CUDA error, 4 on wrong data.
//
//   runtime   the runtime on two devices: access enabled before the peer's first allocation, after
//             it, blocks made afterwards, a copy read from the peer, disabled again
//   driver    the driver API with created contexts: two contexts of device 1 enable access to device
//             0's context, one disables it, the other is destroyed; the driver's errors pass through
//   ipc       a block of device 0 opened by another process on device 0 (cudaIpcOpenMemHandle, lazy
//             peer access): device 1 may access it there, and it holds what was written
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "driver_check.h"
#include "ipc_support.h"
#include "runtime_check.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGranule = 2 * kMiB;  // every question below is asked once per 2 MiB of a block
constexpr std::size_t kIpcBytes = 6 * kMiB;  // the block ipc shares: over several granules


const char* flags_name(unsigned long long flags) {
  switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_NONE: return "none";
    case CU_MEM_ACCESS_FLAGS_PROT_READ: return "read";
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: return "readwrite";
    default: return "unknown";
  }
}

// What `device` may do with pool memory at `address` (its pool's access, cuMemPoolGetAccess); "not_vmm"
// for memory of no pool either, whose peer access the driver keeps with the context's.
std::string pool_access_of(int device, CUdeviceptr address) {
  CUmemoryPool pool = nullptr;
  const CUresult asked = cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, address);
  if (asked != CUDA_SUCCESS || pool == nullptr) return "not_vmm";
  CUmemLocation location{CU_MEM_LOCATION_TYPE_DEVICE, device};
  CUmemAccess_flags flags{};
  const CUresult result = cuMemPoolGetAccess(&flags, pool, &location);
  if (result != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuMemPoolGetAccess(device %d) -> %s\n", device, cu_error_name(result));
    std::exit(3);
  }
  return flags_name(flags);
}

// What `device` may do with [ptr, ptr + bytes), asked of every 2 MiB and of the last byte; "mixed"
// when the answers differ.
std::string access_of(int device, const void* ptr, std::size_t bytes) {
  const auto base = reinterpret_cast<CUdeviceptr>(ptr);
  const CUmemLocation location{CU_MEM_LOCATION_TYPE_DEVICE, device};
  std::string seen;
  for (std::size_t offset = 0;; offset = std::min(offset + kGranule, bytes - 1)) {
    unsigned long long flags = 0;
    const CUresult result = cuMemGetAccess(&flags, &location, base + offset);
    std::string answer;
    if (result == CUDA_SUCCESS) {
      answer = flags_name(flags);
    } else if (result == CUDA_ERROR_INVALID_VALUE) {
      answer = pool_access_of(device, base + offset);  // not a mapping of virtual memory
    } else {
      std::fprintf(stderr, "cuMemGetAccess(device %d, %p + %zu) -> %s\n", device, ptr, offset, cu_error_name(result));
      std::exit(3);
    }
    if (!seen.empty() && seen != answer) return "mixed";
    seen = answer;
    if (offset == bytes - 1) return seen;
  }
}

void* filled_block(std::size_t bytes, unsigned seed) {
  void* block = nullptr;
  CHECK_CUDA(cudaMalloc(&block, bytes));
  const auto data = ipc_test::pattern(bytes, seed);
  CHECK_CUDA(cudaMemcpy(block, data.data(), bytes, cudaMemcpyHostToDevice));
  return block;
}

bool holds_pattern(const void* device, std::size_t bytes, unsigned seed) {
  std::vector<std::uint8_t> read(bytes);
  CHECK_CUDA(cudaMemcpy(read.data(), device, bytes, cudaMemcpyDeviceToHost));
  return read == ipc_test::pattern(bytes, seed);
}

int runtime_scenario() {
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::fprintf(stderr, "runtime: needs two devices, found %d\n", devices);
    return 3;
  }
  int can = 0;
  CHECK_CUDA(cudaDeviceCanAccessPeer(&can, 1, 0));
  std::printf("can_access_peer=%d\n", can);

  // Device 0 may access device 1's memory before device 1 allocated anything.
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaDeviceEnablePeerAccess(1, 0));
  constexpr std::size_t kEarlyBytes = 5 * kMiB + 3;  // over several 2 MiB granules
  void* early = filled_block(kEarlyBytes, 1);
  CHECK_CUDA(cudaSetDevice(1));
  void* destination = filled_block(kEarlyBytes, 2);
  std::printf("enabled_before_first_allocation=%s\n", access_of(0, destination, kEarlyBytes).c_str());

  // Device 1 may access device 0's memory, which it already holds.
  std::printf("before_enable=%s\n", access_of(1, early, kEarlyBytes).c_str());
  CHECK_CUDA(cudaDeviceEnablePeerAccess(0, 0));
  std::printf("again=%s\n", cudaGetErrorName(cudaDeviceEnablePeerAccess(0, 0)));
  std::printf("early_peer=%s\n", access_of(1, early, kEarlyBytes).c_str());
  std::printf("early_owner=%s\n", access_of(0, early, kEarlyBytes).c_str());
  // The peer reads the block: a device-to-device copy on device 1 (unified addressing), as a kernel would.
  CHECK_CUDA(cudaMemcpy(destination, early, kEarlyBytes, cudaMemcpyDeviceToDevice));
  std::printf("peer_copy=%s\n", holds_pattern(destination, kEarlyBytes, 1) ? "ok" : "wrong");

  // Blocks made afterwards, past what device 0 had mapped: open to device 1 too.
  CHECK_CUDA(cudaSetDevice(0));
  constexpr std::size_t kLateBytes = 24 * kMiB;
  void* late = filled_block(kLateBytes, 3);
  std::printf("late_peer=%s\n", access_of(1, late, kLateBytes).c_str());

  // Disabled: device 1 loses it on every block, device 0 keeps its own.
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaDeviceDisablePeerAccess(0));
  std::printf("not_enabled=%s\n", cudaGetErrorName(cudaDeviceDisablePeerAccess(0)));
  std::printf("disabled_early=%s\n", access_of(1, early, kEarlyBytes).c_str());
  std::printf("disabled_late=%s\n", access_of(1, late, kLateBytes).c_str());
  std::printf("disabled_owner=%s\n", access_of(0, late, kLateBytes).c_str());
  CHECK_CUDA(cudaSetDevice(0));
  const bool intact = holds_pattern(early, kEarlyBytes, 1) && holds_pattern(late, kLateBytes, 3);
  std::printf("intact=%s\n", intact ? "ok" : "wrong");
  CHECK_CUDA(cudaFree(early));
  CHECK_CUDA(cudaFree(late));
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaFree(destination));
  return 0;
}

CUcontext created_context(CUdevice device) {
  CUcontext context = nullptr;
  CHECK_CU(cuCtxCreate(&context, nullptr, 0, device));  // now current
  return context;
}

int driver_scenario() {
  CHECK_CU(cuInit(0));
  CUdevice first = 0, second = 0;
  CHECK_CU(cuDeviceGet(&first, 0));
  CHECK_CU(cuDeviceGet(&second, 1));
  const CUcontext owner = created_context(first);
  constexpr std::size_t kBytes = 3 * kMiB;
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAlloc(&block, kBytes));
  const void* ptr = reinterpret_cast<const void*>(block);
  const CUcontext reader = created_context(second);
  const CUcontext other_reader = created_context(second);

  CHECK_CU(cuCtxSetCurrent(reader));
  CHECK_CU(cuCtxEnablePeerAccess(owner, 0));
  std::printf("enabled=%s\n", access_of(1, ptr, kBytes).c_str());
  CHECK_CU(cuCtxSetCurrent(other_reader));
  CHECK_CU(cuCtxEnablePeerAccess(owner, 0));
  CHECK_CU(cuCtxSetCurrent(reader));
  CHECK_CU(cuCtxDisablePeerAccess(owner));
  std::printf("one_of_two_disabled=%s\n", access_of(1, ptr, kBytes).c_str());  // the other context keeps it
  CHECK_CU(cuCtxDestroy(other_reader));
  std::printf("last_reader_destroyed=%s\n", access_of(1, ptr, kBytes).c_str());
  std::printf("owner_kept=%s\n", access_of(0, ptr, kBytes).c_str());

  // The driver's own answers come back untouched.
  CHECK_CU(cuCtxSetCurrent(owner));
  std::printf("destroyed_context=%s\n", cu_error_name(cuCtxEnablePeerAccess(other_reader, 0)));
  std::printf("bad_flags=%s\n", cu_error_name(cuCtxEnablePeerAccess(reader, 1)));
  std::printf("never_enabled=%s\n", cu_error_name(cuCtxDisablePeerAccess(reader)));
  CHECK_CU(cuMemFree(block));
  CHECK_CU(cuCtxDestroy(reader));
  CHECK_CU(cuCtxDestroy(owner));
  return 0;
}

}  // namespace

// The importer of ipc_scenario: opens the handle on device 0 as PyTorch does (the lazy flag, the only
// one allowed, which lets the devices that can access device 0 reach the memory too) and says who may
// access it.
int open_imported(const std::string& hex) {
  cudaIpcMemHandle_t handle{};
  if (!ipc_test::handle_from_hex(hex, handle, "ipc-open")) return 2;
  CHECK_CUDA(cudaSetDevice(0));
  void* opened = nullptr;
  CHECK_CUDA(cudaIpcOpenMemHandle(&opened, handle, cudaIpcMemLazyEnablePeerAccess));
  std::printf("imported_owner=%s\n", access_of(0, opened, kIpcBytes).c_str());
  std::printf("imported_peer=%s\n", access_of(1, opened, kIpcBytes).c_str());
  std::printf("imported_intact=%s\n", holds_pattern(opened, kIpcBytes, 9) ? "ok" : "wrong");
  std::fflush(stdout);
  CHECK_CUDA(cudaIpcCloseMemHandle(opened));
  return 0;
}

// A block of device 0 shared with another process, which opens it on device 0: device 1 reaches it there.
int ipc_scenario() {
  CHECK_CUDA(cudaSetDevice(0));
  void* block = filled_block(kIpcBytes, 9);
  cudaIpcMemHandle_t handle{};
  CHECK_CUDA(cudaIpcGetMemHandle(&handle, block));
  std::fflush(stdout);
  const int status = ipc_test::wait_exit(ipc_test::spawn_self({"ipc-open", ipc_test::to_hex(&handle, sizeof handle)}));
  std::printf("importer=%s\n", status == 0 ? "ok" : ("exit_" + std::to_string(status)).c_str());
  CHECK_CUDA(cudaFree(block));
  return status == 0 ? 0 : 3;
}

int main(int argc, char** argv) {
  const std::string scenario = argc >= 2 ? argv[1] : "";
  if (scenario == "runtime" && argc == 2) return runtime_scenario();
  if (scenario == "driver" && argc == 2) return driver_scenario();
  if (scenario == "ipc" && argc == 2) return ipc_scenario();
  if (scenario == "ipc-open" && argc == 3) return open_imported(argv[2]);
  std::fprintf(stderr, "usage: %s runtime | driver | ipc\n", argv[0]);
  return 2;
}
