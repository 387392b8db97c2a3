// A JAX-shaped process (framework_shape.h has the steps): its device memory managed as jaxlib's GPU
// client does, from the variables JAX reads (jax xla_bridge make_gpu_client; xla pjrt gpu client,
// gpu_helpers.cc; the JAX page "GPU memory allocation"):
//
//   XLA_PYTHON_CLIENT_ALLOCATOR  lower-cased; default|bfc: a BFC arena; platform: one cuMemAlloc per
//                                buffer, freed when it dies, no fraction, no preallocation;
//                                cuda_async: the device's default pool, stream-ordered; anything else
//                                is an error (status 2), as JAX raises
//   XLA_CLIENT_MEM_FRACTION,     the arena's size as a fraction of cuMemGetInfo's total (default
//   XLA_PYTHON_CLIENT_MEM_FRACTION  0.75); both set is an error, as JAX refuses
//   XLA_PYTHON_CLIENT_PREALLOCATE   "false", "False" or "0": grow on demand up to that size; anything
//                                else: preallocate it at the first allocation (0.9x while refused)
//
// Over the driver API, as XLA's stream executor allocates. Growth takes regions of the request (at
// least 2 MiB); XLA's own doubles its region sizes, which only the number of regions would show.
#include <cuda.h>

#include <cstring>
#include <string>

#include "driver_check.h"
#include "framework_shape.h"

namespace {

using framework_shape::DeviceCalls;
using framework_shape::FrameworkAllocator;

bool driver_malloc(std::size_t bytes, std::uintptr_t& out) {
  CUdeviceptr ptr = 0;
  if (cuMemAlloc(&ptr, bytes) != CUDA_SUCCESS) return false;
  out = ptr;
  return true;
}
void driver_free(std::uintptr_t ptr) { CHECK_CU(cuMemFree(ptr)); }
void driver_mem_info(std::size_t& free, std::size_t& total) { CHECK_CU(cuMemGetInfo(&free, &total)); }
constexpr DeviceCalls kDriver{driver_malloc, driver_free, driver_mem_info};

// cuda_async: the device's default pool, its release threshold the fraction of the total (so freed
// memory stays in the pool), warmed with the whole of it when preallocating.
class AsyncPoolAllocator final : public FrameworkAllocator {
 public:
  AsyncPoolAllocator(std::size_t limit, bool preallocate) {
    CHECK_CU(cuDeviceGetDefaultMemPool(&pool_, 0));
    cuuint64_t threshold = limit;
    CHECK_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    if (preallocate) {
      CUdeviceptr warm = 0;
      if (cuMemAllocFromPoolAsync(&warm, limit, pool_, nullptr) == CUDA_SUCCESS) {
        CHECK_CU(cuMemFreeAsync(warm, nullptr));
        CHECK_CU(cuStreamSynchronize(nullptr));
      }
    }
  }
  bool allocate(std::size_t bytes, std::uintptr_t& out) override {
    CUdeviceptr ptr = 0;
    if (cuMemAllocFromPoolAsync(&ptr, bytes, pool_, nullptr) != CUDA_SUCCESS) return false;
    out = ptr;
    return true;
  }
  void deallocate(std::uintptr_t ptr) override { CHECK_CU(cuMemFreeAsync(ptr, nullptr)); }
  std::size_t reserved() const override { return attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT); }
  std::size_t peak_reserved() const override { return attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH); }

 private:
  std::size_t attribute(CUmemPool_attribute which) const {
    cuuint64_t value = 0;
    return cuMemPoolGetAttribute(pool_, which, &value) == CUDA_SUCCESS ? value : 0;
  }
  CUmemoryPool pool_ = nullptr;
};

int fail(const char* line) {
  std::fprintf(stderr, "framework_xla: %s\n", line);
  return 2;
}

// JAX's settings, read when its GPU backend is made (at the first operation).
struct Settings {
  std::string allocator = "default";
  double fraction = 0.75;
  bool preallocate = true;
};

// Ends the program with status 2 where JAX raises.
Settings read_settings() {
  Settings settings;
  if (const char* value = std::getenv("XLA_PYTHON_CLIENT_ALLOCATOR")) settings.allocator = value;
  for (char& c : settings.allocator) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (settings.allocator != "default" && settings.allocator != "bfc" && settings.allocator != "platform" &&
      settings.allocator != "cuda_async") {
    std::exit(fail("XLA_PYTHON_CLIENT_ALLOCATOR: invalid value"));
  }
  const char* current = std::getenv("XLA_CLIENT_MEM_FRACTION");
  const char* older = std::getenv("XLA_PYTHON_CLIENT_MEM_FRACTION");
  if (current != nullptr && *current != '\0' && older != nullptr && *older != '\0') {
    std::exit(fail("XLA_CLIENT_MEM_FRACTION is specified together with XLA_PYTHON_CLIENT_MEM_FRACTION"));
  }
  const char* fraction_text = current != nullptr && *current != '\0' ? current : older;
  if (fraction_text != nullptr && *fraction_text != '\0' &&
      !framework_shape::parse_double(fraction_text, settings.fraction)) {
    std::exit(fail("the memory fraction is not a number"));
  }
  const char* preallocate_text = std::getenv("XLA_PYTHON_CLIENT_PREALLOCATE");
  settings.preallocate = preallocate_text == nullptr || (std::strcmp(preallocate_text, "false") != 0 &&
                                                         std::strcmp(preallocate_text, "False") != 0 &&
                                                         std::strcmp(preallocate_text, "0") != 0);
  return settings;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK_CU(cuInit(0));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, 0));
  CHECK_CU(cuCtxSetCurrent(context));

  framework_shape::Program program(kDriver, []() -> std::unique_ptr<FrameworkAllocator> {
    const Settings settings = read_settings();
    if (settings.allocator == "platform") {
      std::printf("framework_allocator=platform\nframework_limit=0\n");
      return std::make_unique<framework_shape::DriverAllocator>(kDriver);
    }
    std::size_t free = 0, total = 0;
    driver_mem_info(free, total);
    const auto limit = static_cast<std::size_t>(static_cast<double>(total) * settings.fraction);
    const bool async = settings.allocator == "cuda_async";
    std::printf("framework_allocator=%s\nframework_limit=%zu\nframework_preallocate=%d\nframework_total_seen=%zu\n",
                async ? "cuda_async" : "bfc", limit, settings.preallocate ? 1 : 0, total);
    if (async) return std::make_unique<AsyncPoolAllocator>(limit, settings.preallocate);
    gpumem::ArenaOptions options;
    options.limit = std::max<std::size_t>(limit, 256);
    options.preallocate = settings.preallocate;
    options.min_growth_bytes = 2 * framework_shape::kMiB;
    options.max_internal_fragmentation = 128 * framework_shape::kMiB;  // XLA's split rule
    options.garbage_collection = false;                                 // JAX: off
    return std::make_unique<framework_shape::PoolAllocator>(kDriver, options);
  });
  return program.run(argc, argv);
}
