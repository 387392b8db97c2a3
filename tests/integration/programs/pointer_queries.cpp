// What programs ask the driver about a cudaMalloc pointer, and rely on: cuMemGetAddressRange and the
// RANGE_START_ADDR / RANGE_SIZE pointer attributes give a range holding the whole allocation (Numba
// exports cuMemGetAddressRange's base with cudaIpcGetMemHandle and sends the offset beside it, vLLM
// does the same with RANGE_START_ADDR); CONTEXT, DEVICE_ORDINAL, MEMORY_TYPE, DEVICE_POINTER and
// IS_MANAGED say where the memory is; cuPointerGetAttributes answers them all at once. Asked of the
// first byte of a block, a byte inside it (past its first 2 MiB) and a small block after it, on two
// devices. Prints `key=value` lines; exits 0 when every call succeeded, 3 on an unexpected CUDA error.
//
//   queries         the questions, then the bases exported and opened by a fresh process
//   open HANDLE OFFSET SEED BYTES FROM   (started by `queries`) opens the handle and checks that the
//                   bytes at OFFSET from the pointer it gets are those of a BYTES-byte block of pattern
//                   SEED from its byte FROM on; exits 0 if so, 4 if not, 5 or 6 when it cannot read
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

using namespace ipc_test;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kWorkspaceBytes = 256 * kKiB;  // allocated first: the blocks below start no region
constexpr std::size_t kBlockBytes = 5 * kMiB + 3;     // over several 2 MiB granules
constexpr std::size_t kInsideOffset = 3 * kMiB + 5;
constexpr std::size_t kSmallBytes = 1000;  // right after the block: in the granule where the block ends

struct Driver {
  PFN_cuMemGetAddressRange_v3020 address_range = driver_entry<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange");
  PFN_cuPointerGetAttribute_v4000 attribute = driver_entry<PFN_cuPointerGetAttribute_v4000>("cuPointerGetAttribute");
  PFN_cuPointerGetAttributes_v7000 attributes =
      driver_entry<PFN_cuPointerGetAttributes_v7000>("cuPointerGetAttributes");
  PFN_cuCtxGetCurrent_v4000 current_context = driver_entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent");
};

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  std::fprintf(stderr, "%s -> CUresult %d\n", what, static_cast<int>(result));
  std::exit(3);
}

struct Range {
  CUdeviceptr base = 0;
  std::size_t size = 0;
};

Range address_range(const Driver& driver, CUdeviceptr ptr) {
  Range range;
  check(driver.address_range(&range.base, &range.size, ptr), "cuMemGetAddressRange");
  return range;
}

bool holds(const Range& range, CUdeviceptr base, std::size_t bytes) {
  return range.base <= base && base + bytes <= range.base + range.size;
}

// Asks everything of `ptr`, which lies in the block [block, + bytes) on `device`; prints `name_*` lines.
void ask(const Driver& driver, const char* name, CUdeviceptr ptr, CUdeviceptr block, std::size_t bytes, int device) {
  const Range range = address_range(driver, ptr);
  std::printf("%s_range_holds_block=%d\n", name, holds(range, block, bytes) ? 1 : 0);
  std::printf("%s_range_is_block=%d\n", name, range.base == block ? 1 : 0);
  Range attribute_range;
  check(driver.attribute(&attribute_range.base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr), "RANGE_START_ADDR");
  check(driver.attribute(&attribute_range.size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr), "RANGE_SIZE");
  std::printf("%s_attribute_range_holds_block=%d\n", name, holds(attribute_range, block, bytes) ? 1 : 0);
  std::printf("%s_attribute_range_is_address_range=%d\n", name,
              attribute_range.base == range.base && attribute_range.size == range.size ? 1 : 0);

  CUcontext current = nullptr;
  check(driver.current_context(&current), "cuCtxGetCurrent");
  CUcontext context = nullptr;
  CUmemorytype type{};
  CUdeviceptr device_pointer = 0;
  int ordinal = -1, managed = -1, ipc_capable = -1;
  check(driver.attribute(&context, CU_POINTER_ATTRIBUTE_CONTEXT, ptr), "CONTEXT");
  check(driver.attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr), "MEMORY_TYPE");
  check(driver.attribute(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr), "DEVICE_POINTER");
  check(driver.attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr), "DEVICE_ORDINAL");
  check(driver.attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr), "IS_MANAGED");
  // cudaIpcGetMemHandle exports cudaMalloc memory, and programs that choose how to share a buffer (UCX,
  // say) ask this first.
  check(driver.attribute(&ipc_capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr),
        "IS_LEGACY_CUDA_IPC_CAPABLE");
  std::printf("%s_legacy_ipc_capable=%d\n", name, ipc_capable);
  const bool where = context == current && type == CU_MEMORYTYPE_DEVICE && device_pointer == ptr &&
                     ordinal == device && managed == 0;
  std::printf("%s_where=%s\n", name, where ? "ok" : "wrong");

  // All at once: the same answers.
  CUcontext all_context = nullptr;
  CUmemorytype all_type{};
  CUdeviceptr all_pointer = 0;
  int all_ordinal = -1, all_managed = -1, all_ipc_capable = -1;
  Range all_range;
  CUpointer_attribute asked[] = {CU_POINTER_ATTRIBUTE_CONTEXT,        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,     CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE,     CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  void* answers[] = {&all_context, &all_type,       &all_pointer,    &all_ordinal,
                     &all_managed, &all_range.base, &all_range.size, &all_ipc_capable};
  check(driver.attributes(sizeof asked / sizeof asked[0], asked, answers, ptr), "cuPointerGetAttributes");
  const bool agree = all_context == context && all_type == type && all_pointer == device_pointer &&
                     all_ordinal == ordinal && all_managed == managed && all_range.base == attribute_range.base &&
                     all_range.size == attribute_range.size && all_ipc_capable == ipc_capable;
  std::printf("%s_all_at_once_agree=%d\n", name, agree ? 1 : 0);
}

CUdeviceptr filled(std::size_t bytes, unsigned seed) {
  void* ptr = nullptr;
  CHECK_CUDA(cudaMalloc(&ptr, bytes));
  const auto data = pattern(bytes, seed);
  CHECK_CUDA(cudaMemcpy(ptr, data.data(), bytes, cudaMemcpyHostToDevice));
  return reinterpret_cast<CUdeviceptr>(ptr);
}

// Exports `base` and has a fresh process open it and read at `ptr - base` what lies at `ptr` in the block
// [block, + bytes) of pattern `seed`.
std::string read_elsewhere(CUdeviceptr base, CUdeviceptr ptr, CUdeviceptr block, unsigned seed, std::size_t bytes) {
  cudaIpcMemHandle_t handle{};
  const cudaError_t exported = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
  if (exported != cudaSuccess) return cudaGetErrorName(exported);
  std::fflush(stdout);
  const int status = wait_exit(spawn_self({"open", to_hex(&handle, sizeof handle), std::to_string(ptr - base),
                                           std::to_string(seed), std::to_string(bytes),
                                           std::to_string(ptr - block)}));
  return status == 0 ? "ok" : "exit_" + std::to_string(status);
}

int queries() {
  const Driver driver;
  CHECK_CUDA(cudaSetDevice(0));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, kWorkspaceBytes));
  const CUdeviceptr block = filled(kBlockBytes, 5);
  const CUdeviceptr small = filled(kSmallBytes, 6);
  ask(driver, "block", block, block, kBlockBytes, 0);
  ask(driver, "inside", block + kInsideOffset, block, kBlockBytes, 0);
  ask(driver, "small", small + 10, small, kSmallBytes, 0);
  CHECK_CUDA(cudaDeviceSynchronize());  // the data has landed before another process reads it

  // Numba's way (cuMemGetAddressRange) and vLLM's (RANGE_START_ADDR): export the base, send the offset.
  const CUdeviceptr inside = block + kInsideOffset;
  std::printf("numba_inside=%s\n",
              read_elsewhere(address_range(driver, inside).base, inside, block, 5, kBlockBytes).c_str());
  std::printf("numba_small=%s\n",
              read_elsewhere(address_range(driver, small).base, small, small, 6, kSmallBytes).c_str());
  CUdeviceptr start = 0;
  check(driver.attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, small), "RANGE_START_ADDR");
  std::printf("vllm_small=%s\n", read_elsewhere(start, small, small, 6, kSmallBytes).c_str());

  // Another device's block names its own context and ordinal.
  CHECK_CUDA(cudaSetDevice(1));
  const CUdeviceptr other = filled(kBlockBytes, 7);
  ask(driver, "other_device", other + kInsideOffset, other, kBlockBytes, 1);
  CHECK_CUDA(cudaFree(reinterpret_cast<void*>(other)));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(reinterpret_cast<void*>(small)));
  CHECK_CUDA(cudaFree(reinterpret_cast<void*>(block)));
  CHECK_CUDA(cudaFree(workspace));
  return 0;
}

int open_and_read(const std::string& hex, const std::string& offset, const std::string& seed,
                  const std::string& bytes, const std::string& from) {
  cudaIpcMemHandle_t handle{};
  if (!handle_from_hex(hex, handle, "open")) return 2;
  CHECK_CUDA(cudaSetDevice(0));
  void* base = nullptr;
  const cudaError_t opened = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
  if (opened != cudaSuccess) {
    std::fprintf(stderr, "open: cudaIpcOpenMemHandle -> %s\n", cudaGetErrorName(opened));
    return 5;
  }
  const auto seed_number = static_cast<unsigned>(std::strtoul(seed.c_str(), nullptr, 10));
  const std::vector<std::uint8_t> block = pattern(std::strtoull(bytes.c_str(), nullptr, 10), seed_number);
  const std::size_t start = std::strtoull(from.c_str(), nullptr, 10);
  if (start >= block.size()) return 2;
  const std::vector<std::uint8_t> expected(block.begin() + static_cast<std::ptrdiff_t>(start), block.end());
  const std::size_t count = expected.size();
  std::vector<std::uint8_t> read(count);
  const char* at = static_cast<char*>(base) + std::strtoull(offset.c_str(), nullptr, 10);
  const cudaError_t copied = cudaMemcpy(read.data(), at, count, cudaMemcpyDeviceToHost);
  if (copied != cudaSuccess) {
    std::fprintf(stderr, "open: reading at the offset -> %s\n", cudaGetErrorName(copied));
    return 6;
  }
  CHECK_CUDA(cudaIpcCloseMemHandle(base));
  return read == expected ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "queries" && argc == 2) return queries();
  if (role == "open" && argc == 7) return open_and_read(argv[2], argv[3], argv[4], argv[5], argv[6]);
  std::fprintf(stderr, "usage: %s queries | open HANDLE OFFSET SEED BYTES FROM\n", argv[0]);
  return 2;
}
