// The budget's paths through the CUDA runtime (built against the shared and the static runtime, as
// nvcc links either): each scenario allocates SIZE_MIB blocks until refused, then frees them, and
// prints `key=value` lines with what cudaMemGetInfo and cudaGetDeviceProperties report. Exits 0 when
// every call behaved as documented, 3 on an unexpected error.
//
//   malloc SIZE_MIB        cudaMalloc (PyTorch's caching allocator, CuPy's pool)
//   managed SIZE_MIB       cudaMallocManaged (CuPy's malloc_managed, TensorFlow's unified memory)
//   pool SIZE_MIB          cudaMemPoolCreate + cudaMallocFromPoolAsync (RMM's async resource)
//   array SIDE             cudaMallocArray of float4 SIDE x SIDE (textures)
//   expandable STEP_MIB    VMM through cudaGetDriverEntryPoint, as PyTorch's expandable segments
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime_check.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Totals {
  std::size_t free = 0, total = 0, properties = 0;
};

Totals totals() {
  Totals t;
  CHECK_CUDA(cudaMemGetInfo(&t.free, &t.total));
  cudaDeviceProp properties{};
  CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
  t.properties = properties.totalGlobalMem;
  return t;
}

void print_result(std::size_t blocks, std::size_t bytes, cudaError_t stopped_by, const Totals& full, const Totals& after) {
  std::printf("blocks=%zu\nbytes=%zu\nstopped_by=%s\ntotal=%zu\ndevice_properties_total=%zu\nfree_when_full=%zu\n"
              "free_after=%zu\n",
              blocks, bytes, stopped_by == cudaSuccess ? "count" : cudaGetErrorName(stopped_by), full.total,
              full.properties, full.free, after.free);
}

template <typename Allocate, typename Free>
int until_refused(std::size_t size, Allocate&& allocate, Free&& free) {
  std::vector<void*> blocks;
  cudaError_t refused = cudaSuccess;
  for (;;) {
    void* ptr = nullptr;
    refused = allocate(&ptr, size);
    if (refused != cudaSuccess) break;
    blocks.push_back(ptr);
  }
  (void)cudaGetLastError();  // the refusal is the expected end, not an error to carry on
  const Totals full = totals();
  for (void* ptr : blocks) CHECK_CUDA(free(ptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  print_result(blocks.size(), blocks.size() * size, refused, full, totals());
  return refused == cudaErrorMemoryAllocation ? 0 : 3;
}

int expandable(std::size_t step) {
  // PyTorch asks the runtime for the driver's entry points (cudaGetDriverEntryPoint, by version since
  // CUDA 12.5), then calls them directly.
  auto entry = [](const char* name) {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult status{};
    CHECK_CUDA(cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &status));
    return function;
  };
  const auto create = reinterpret_cast<PFN_cuMemCreate_v10020>(entry("cuMemCreate"));
  const auto release = reinterpret_cast<PFN_cuMemRelease_v10020>(entry("cuMemRelease"));
  const auto reserve = reinterpret_cast<PFN_cuMemAddressReserve_v10020>(entry("cuMemAddressReserve"));
  const auto address_free = reinterpret_cast<PFN_cuMemAddressFree_v10020>(entry("cuMemAddressFree"));
  const auto map = reinterpret_cast<PFN_cuMemMap_v10020>(entry("cuMemMap"));
  const auto unmap = reinterpret_cast<PFN_cuMemUnmap_v10020>(entry("cuMemUnmap"));
  const auto set_access = reinterpret_cast<PFN_cuMemSetAccess_v10020>(entry("cuMemSetAccess"));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  const Totals before = totals();
  const std::size_t range = before.total / step * step + step;
  CUdeviceptr base = 0;
  if (reserve(&base, range, 0, 0, 0) != CUDA_SUCCESS) return 3;
  std::vector<CUmemGenericAllocationHandle> handles;
  CUresult refused = CUDA_SUCCESS;
  while ((handles.size() + 1) * step <= range) {
    CUmemGenericAllocationHandle handle{};
    refused = create(&handle, step, &prop, 0);
    if (refused != CUDA_SUCCESS) break;
    const CUdeviceptr at = base + handles.size() * step;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (map(at, step, 0, handle, 0) != CUDA_SUCCESS || set_access(at, step, &access, 1) != CUDA_SUCCESS) return 3;
    handles.push_back(handle);
  }
  const Totals full = totals();
  for (std::size_t i = 0; i < handles.size(); ++i) {
    if (unmap(base + i * step, step) != CUDA_SUCCESS || release(handles[i]) != CUDA_SUCCESS) return 3;
  }
  if (address_free(base, range) != CUDA_SUCCESS) return 3;
  print_result(handles.size(), handles.size() * step,
               refused == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : cudaSuccess, full, totals());
  return refused == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::size_t number = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(nullptr));  // the context, as frameworks make it at start
  if (scenario == "malloc") {
    return until_refused(number * kMiB, [](void** p, std::size_t s) { return cudaMalloc(p, s); }, cudaFree);
  }
  if (scenario == "managed") {
    return until_refused(number * kMiB, [](void** p, std::size_t s) { return cudaMallocManaged(p, s); }, cudaFree);
  }
  if (scenario == "pool") {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = nullptr;
    CHECK_CUDA(cudaMemPoolCreate(&pool, &props));
    cudaStream_t stream = nullptr;
    CHECK_CUDA(cudaStreamCreate(&stream));
    const int result = until_refused(
        number * kMiB, [&](void** p, std::size_t s) { return cudaMallocFromPoolAsync(p, s, pool, stream); },
        [&](void* p) { return cudaFreeAsync(p, stream); });
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaMemPoolDestroy(pool));
    return result;
  }
  if (scenario == "array") {
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float4>();
    return until_refused(
        number, [&](void** p, std::size_t side) {
          return cudaMallocArray(reinterpret_cast<cudaArray_t*>(p), &desc, side, side);
        },
        [](void* p) { return cudaFreeArray(static_cast<cudaArray_t>(p)); });
  }
  if (scenario == "expandable") return expandable(number * kMiB);
  std::fprintf(stderr, "%s: unknown scenario '%s'\n", argv[0], scenario.c_str());
  return 2;
}
