// A PyTorch-shaped process (framework_shape.h has the steps): its device memory managed as PyTorch's
// CUDA allocator does (c10/cuda/CUDACachingAllocator.cpp, CUDAMallocAsyncAllocator.cpp), from the
// variables it reads, over the CUDA runtime as PyTorch calls it:
//
//   PYTORCH_NO_CUDA_MEMORY_CACHING  set to anything (PyTorch tests getenv != nullptr): every tensor a
//                                   cudaMalloc, its free a cudaFree
//   PYTORCH_CUDA_ALLOC_CONF         "backend:cudaMallocAsync" among its options: cudaMallocAsync and
//                                   cudaFreeAsync on the current stream (the default pool, its
//                                   release threshold the largest value: it keeps what is freed)
//   otherwise, the caching allocator: sizes rounded up to 512 bytes; up to 1 MiB from 2 MiB segments
//   (the small pool), larger from segments of at least 20 MiB (the large pool); a block is split when
//   the rest is at least 512 bytes (small) or above 1 MiB (large); freed blocks stay cached; when
//   cudaMalloc fails, every cached segment of both pools is freed and the request retried once.
// Large segments are at least 20 MiB here; PyTorch makes those above 10 MiB of exactly the request
// rounded to 2 MiB, which changes how many segments there are, not what is cached.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "framework_shape.h"
#include "runtime_check.h"

namespace {

using framework_shape::DeviceCalls;
using framework_shape::FrameworkAllocator;
using framework_shape::kMiB;
using framework_shape::PoolAllocator;

bool runtime_malloc(std::size_t bytes, std::uintptr_t& out) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // PyTorch clears the error before it retries or reports
    return false;
  }
  out = reinterpret_cast<std::uintptr_t>(ptr);
  return true;
}
void runtime_free(std::uintptr_t ptr) { CHECK_CUDA(cudaFree(reinterpret_cast<void*>(ptr))); }
void runtime_mem_info(std::size_t& free, std::size_t& total) { CHECK_CUDA(cudaMemGetInfo(&free, &total)); }
constexpr DeviceCalls kRuntime{runtime_malloc, runtime_free, runtime_mem_info};

constexpr std::size_t kSmallSize = kMiB;  // the largest request the small pool serves

gpumem::ArenaOptions pool_options(std::size_t segment, std::size_t split_above) {
  gpumem::ArenaOptions options;
  options.limit = std::size_t{1} << 50;  // no cap of its own (set_per_process_memory_fraction is code)
  options.preallocate = false;
  options.min_growth_bytes = segment;
  options.max_internal_fragmentation = split_above;
  options.block_alignment = 512;
  options.garbage_collection = true;  // its own cached segments freed before it reports out-of-memory
  return options;
}

class CachingAllocator final : public FrameworkAllocator {
 public:
  CachingAllocator()
      : small_(kRuntime, pool_options(2 * kMiB, 512), [this] { large_->release_free(); }),
        large_(std::make_unique<PoolAllocator>(kRuntime, pool_options(20 * kMiB, kMiB + 512),
                                               [this] { small_.release_free(); })) {}
  bool allocate(std::size_t bytes, std::uintptr_t& out) override {
    return (bytes <= kSmallSize ? static_cast<FrameworkAllocator&>(small_) : *large_).allocate(bytes, out);
  }
  void deallocate(std::uintptr_t ptr) override {
    if (small_.owns(ptr)) {
      small_.deallocate(ptr);
    } else {
      large_->deallocate(ptr);
    }
  }
  std::size_t reserved() const override { return small_.reserved() + large_->reserved(); }
  std::size_t peak_reserved() const override { return small_.peak_reserved() + large_->peak_reserved(); }

 private:
  PoolAllocator small_;
  std::unique_ptr<PoolAllocator> large_;
};

// backend:cudaMallocAsync.
class AsyncAllocator final : public FrameworkAllocator {
 public:
  AsyncAllocator() {
    CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool_, 0));
    std::uint64_t threshold = ~std::uint64_t{0};
    CHECK_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  bool allocate(std::size_t bytes, std::uintptr_t& out) override {
    void* ptr = nullptr;
    if (cudaMallocAsync(&ptr, bytes, nullptr) != cudaSuccess) {
      (void)cudaGetLastError();
      CHECK_CUDA(cudaDeviceSynchronize());  // PyTorch synchronises, trims and retries once
      CHECK_CUDA(cudaMemPoolTrimTo(pool_, 0));
      if (cudaMallocAsync(&ptr, bytes, nullptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
    }
    out = reinterpret_cast<std::uintptr_t>(ptr);
    return true;
  }
  void deallocate(std::uintptr_t ptr) override { CHECK_CUDA(cudaFreeAsync(reinterpret_cast<void*>(ptr), nullptr)); }
  std::size_t reserved() const override { return attribute(cudaMemPoolAttrReservedMemCurrent); }
  std::size_t peak_reserved() const override { return attribute(cudaMemPoolAttrReservedMemHigh); }

 private:
  std::size_t attribute(cudaMemPoolAttr which) const {
    std::uint64_t value = 0;
    return cudaMemPoolGetAttribute(pool_, which, &value) == cudaSuccess ? value : 0;
  }
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const bool uncached = std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING") != nullptr;
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  const bool async_backend = conf != nullptr && std::strstr(conf, "backend:cudaMallocAsync") != nullptr;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(nullptr));  // the context, as torch.cuda.init() makes it

  framework_shape::Program program(kRuntime, [&]() -> std::unique_ptr<FrameworkAllocator> {
    std::printf("framework_limit=0\n");
    if (async_backend) {
      std::printf("framework_allocator=cudaMallocAsync\n");
      return std::make_unique<AsyncAllocator>();
    }
    if (uncached) {
      std::printf("framework_allocator=uncached\n");
      return std::make_unique<framework_shape::DriverAllocator>(kRuntime);
    }
    std::printf("framework_allocator=caching\n");
    return std::make_unique<CachingAllocator>();
  });
  return program.run(argc, argv);
}
