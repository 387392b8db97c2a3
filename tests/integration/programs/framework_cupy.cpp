// A CuPy-shaped process (framework_shape.h has the steps): its device memory managed as CuPy's default
// memory pool does (cupy/cuda/memory.pyx, SingleDeviceMemoryPool), over the CUDA runtime:
//
//   sizes rounded up to 512 bytes; the best-fitting free chunk, split; a new chunk is one cudaMalloc of
//   the rounded size; freed chunks stay in the pool, merged with free neighbours; when cudaMalloc
//   fails, the pool frees every free chunk that is a whole allocation and retries (twice, as CuPy
//   retries after a garbage collection)
//   CUPY_GPU_MEMORY_LIMIT   the pool's cap: "N%" of cudaMemGetInfo's total, or bytes (digits); 0 or
//                           unset: none; past it the pool refuses without asking the driver
//
// Extra step: allocator:none, as the program calling cupy.cuda.set_allocator(None): no pool, each
// array its own cudaMalloc and cudaFree (CuPy has no variable for it).
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "framework_shape.h"
#include "runtime_check.h"

namespace {

using framework_shape::DeviceCalls;
using framework_shape::FrameworkAllocator;

bool runtime_malloc(std::size_t bytes, std::uintptr_t& out) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  out = reinterpret_cast<std::uintptr_t>(ptr);
  return true;
}
void runtime_free(std::uintptr_t ptr) { CHECK_CUDA(cudaFree(reinterpret_cast<void*>(ptr))); }
void runtime_mem_info(std::size_t& free, std::size_t& total) { CHECK_CUDA(cudaMemGetInfo(&free, &total)); }
constexpr DeviceCalls kRuntime{runtime_malloc, runtime_free, runtime_mem_info};

// CuPy's _parse_limit_string and set_limit: bytes, or 0 for none. Exits with status 2 where CuPy
// raises (a malformed value, a fraction out of [0, 1]).
std::size_t pool_limit() {
  const char* text = std::getenv("CUPY_GPU_MEMORY_LIMIT");
  if (text == nullptr) return 0;
  const std::size_t length = std::strlen(text);
  char* end = nullptr;
  if (length > 0 && text[length - 1] == '%') {
    const std::string number(text, length - 1);
    const double fraction = std::strtod(number.c_str(), &end) / 100.0;
    if (end == number.c_str() || *end != '\0' || fraction < 0 || fraction > 1) {
      std::fprintf(stderr, "framework_cupy: memory limit fraction out of range: %s\n", text);
      std::exit(2);
    }
    std::size_t free = 0, total = 0;
    runtime_mem_info(free, total);
    return static_cast<std::size_t>(fraction * static_cast<double>(total));
  }
  const unsigned long long bytes = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') {
    std::fprintf(stderr, "framework_cupy: invalid literal for int(): %s\n", text);
    std::exit(2);
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(nullptr));
  bool pool = true;
  framework_shape::Program program(
      kRuntime,
      [&]() -> std::unique_ptr<FrameworkAllocator> {
        if (!pool) {
          std::printf("framework_allocator=none\nframework_limit=0\n");
          return std::make_unique<framework_shape::DriverAllocator>(kRuntime);
        }
        const std::size_t limit = pool_limit();
        std::printf("framework_allocator=pool\nframework_limit=%zu\n", limit);
        gpumem::ArenaOptions options;
        options.limit = limit == 0 ? std::size_t{1} << 50 : std::max<std::size_t>(limit, 512);
        options.preallocate = false;
        options.min_growth_bytes = 512;  // a new chunk is a cudaMalloc of the rounded request
        options.max_internal_fragmentation = 512;
        options.block_alignment = 512;
        options.garbage_collection = true;  // free_all_blocks, then retry
        return std::make_unique<framework_shape::PoolAllocator>(kRuntime, options);
      },
      [&](const std::string& step) {
        if (step != "allocator:none") return false;
        pool = false;
        return true;
      });
  return program.run(argc, argv);
}
