// A TensorFlow-shaped process (framework_shape.h has the steps): its device memory managed as
// TensorFlow's GPU device does, from the variables it reads (tensorflow/core/common_runtime/gpu:
// gpu_device.cc, gpu_process_state.cc, gpu_cudamalloc_allocator.cc; xla's
// gpu_cudamallocasync_allocator.cc):
//
//   TF_GPU_ALLOCATOR           compared exactly: "cuda_malloc": one cuMemAlloc per tensor, freed when it
//                              dies; "cuda_malloc_async": the device's default pool, its release
//                              threshold the memory limit; anything else (unset, "memory_guard"): the
//                              GPU BFC allocator
//   TF_FORCE_GPU_ALLOW_GROWTH  "true": the BFC grows on demand (and gives wholly free regions back
//                              only when the driver refuses it more); "false" or unset: it
//                              preallocates its memory limit at the first allocation; anything else
//                              is said and ignored, as TensorFlow logs an error
//   TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC  cuda_malloc_async: bytes allocated and freed at once to
//                              warm the pool; -1: the memory limit
//   TF_DEVICE_MIN_SYS_MEMORY_IN_MB  the memory left to the system, else TensorFlow's rule: 225 MiB
//                              below 2 GiB free, else 500, 1050 or 1536 MiB by compute capability
//
// The memory limit is what cuMemGetInfo says is free when the device is made, less that reserve.
#include <cuda.h>

#include <cstring>
#include <string>

#include "driver_check.h"
#include "framework_shape.h"

namespace {

using framework_shape::DeviceCalls;
using framework_shape::FrameworkAllocator;
using framework_shape::kMiB;

bool driver_malloc(std::size_t bytes, std::uintptr_t& out) {
  CUdeviceptr ptr = 0;
  if (cuMemAlloc(&ptr, bytes) != CUDA_SUCCESS) return false;
  out = ptr;
  return true;
}
void driver_free(std::uintptr_t ptr) { CHECK_CU(cuMemFree(ptr)); }
void driver_mem_info(std::size_t& free, std::size_t& total) { CHECK_CU(cuMemGetInfo(&free, &total)); }
constexpr DeviceCalls kDriver{driver_malloc, driver_free, driver_mem_info};

// cuda_malloc_async: the default pool keeps what is freed, up to a release threshold of the limit.
class AsyncPoolAllocator final : public FrameworkAllocator {
 public:
  AsyncPoolAllocator(std::size_t limit, long long prealloc) : limit_(limit) {
    CHECK_CU(cuDeviceGetDefaultMemPool(&pool_, 0));
    cuuint64_t threshold = limit;
    CHECK_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    const std::size_t warm_bytes = prealloc < 0 ? limit : static_cast<std::size_t>(prealloc);
    if (warm_bytes > 0) {
      CUdeviceptr warm = 0;
      if (cuMemAllocFromPoolAsync(&warm, warm_bytes, pool_, nullptr) == CUDA_SUCCESS) {
        CHECK_CU(cuMemFreeAsync(warm, nullptr));
      }
    }
  }
  bool allocate(std::size_t bytes, std::uintptr_t& out) override {
    if (in_use_ + bytes > limit_) return false;  // TensorFlow's own check against its memory limit
    CUdeviceptr ptr = 0;
    CUresult status = cuMemAllocFromPoolAsync(&ptr, bytes, pool_, nullptr);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) {  // synchronise the stream and retry once
      CHECK_CU(cuStreamSynchronize(nullptr));
      status = cuMemAllocFromPoolAsync(&ptr, bytes, pool_, nullptr);
    }
    if (status != CUDA_SUCCESS) return false;
    in_use_ += bytes;
    sizes_.push_back({ptr, bytes});
    out = ptr;
    return true;
  }
  void deallocate(std::uintptr_t ptr) override {
    CHECK_CU(cuMemFreeAsync(ptr, nullptr));
    for (auto it = sizes_.begin(); it != sizes_.end(); ++it) {
      if (it->first != ptr) continue;
      in_use_ -= it->second;
      sizes_.erase(it);
      break;
    }
  }
  std::size_t reserved() const override { return attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT); }
  std::size_t peak_reserved() const override { return attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH); }

 private:
  std::size_t attribute(CUmemPool_attribute which) const {
    cuuint64_t value = 0;
    return cuMemPoolGetAttribute(pool_, which, &value) == CUDA_SUCCESS ? value : 0;
  }
  CUmemoryPool pool_ = nullptr;
  std::size_t limit_;
  std::size_t in_use_ = 0;
  std::vector<std::pair<std::uintptr_t, std::size_t>> sizes_;
};

// TensorFlow's reserve for the system (gpu_device.cc, MinSystemMemory).
std::size_t min_system_memory(std::size_t available) {
  if (const char* text = std::getenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB"); text != nullptr && *text != '\0') {
    return std::strtoull(text, nullptr, 10) * kMiB;
  }
  if (available < (std::size_t{1} << 31)) return 225 * kMiB;
  int major = 0;
  CUdevice device = 0;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  return (major <= 6 ? 500 : major <= 7 ? 1050 : 1536) * kMiB;
}

}  // namespace

int main(int argc, char** argv) {
  const char* allocator_text = std::getenv("TF_GPU_ALLOCATOR");
  const std::string allocator = allocator_text == nullptr ? "" : allocator_text;
  bool allow_growth = false;
  if (const char* growth = std::getenv("TF_FORCE_GPU_ALLOW_GROWTH")) {
    if (std::strcmp(growth, "true") == 0) {
      allow_growth = true;
    } else if (std::strcmp(growth, "false") != 0) {
      std::fprintf(stderr, "framework_tf: TF_FORCE_GPU_ALLOW_GROWTH=%s is invalid; it should be 'true' or 'false'\n",
                   growth);
    }
  }
  long long async_prealloc = 0;
  if (const char* text = std::getenv("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"); text != nullptr && *text != '\0') {
    async_prealloc = std::strtoll(text, nullptr, 10);
  }

  CHECK_CU(cuInit(0));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, 0));
  CHECK_CU(cuCtxSetCurrent(context));
  // The device and its memory limit are made when TensorFlow starts, before any tensor.
  std::size_t free = 0, total = 0;
  driver_mem_info(free, total);
  const std::size_t reserve = min_system_memory(free);
  const std::size_t limit = free > reserve ? free - reserve : 0;

  framework_shape::Program program(kDriver, [&]() -> std::unique_ptr<FrameworkAllocator> {
    if (allocator == "cuda_malloc") {
      std::printf("framework_allocator=cuda_malloc\nframework_limit=0\n");
      return std::make_unique<framework_shape::DriverAllocator>(kDriver);
    }
    std::printf("framework_limit=%zu\nframework_free_seen=%zu\n", limit, free);
    if (allocator == "cuda_malloc_async") {
      std::printf("framework_allocator=cuda_malloc_async\n");
      return std::make_unique<AsyncPoolAllocator>(limit, async_prealloc);
    }
    std::printf("framework_allocator=bfc\nframework_preallocate=%d\n", allow_growth ? 0 : 1);
    gpumem::ArenaOptions options;
    options.limit = std::max<std::size_t>(limit, 256);  // the arena needs a limit above 0
    options.preallocate = !allow_growth;
    options.min_growth_bytes = 2 * kMiB;
    options.max_internal_fragmentation = 128 * kMiB;
    options.garbage_collection = true;  // TensorFlow's GPU BFC: on
    return std::make_unique<framework_shape::PoolAllocator>(kDriver, options);
  });
  return program.run(argc, argv);
}
