// stream_ordered_allocation: vector addition on memory from cudaMallocAsync / cudaFreeAsync, in the
// shape of NVIDIA's stream-ordered allocation sample: first one pass where allocation, copies, the
// kernel and the frees are all ordered on one stream; then many passes with the default pool's
// release threshold raised, so memory freed on the stream is reused across synchronisations
// instead of going back to the device each time. Every input copied back is verified; the sums are
// verified unless --no-kernel-check.
//
//   stream_ordered_allocation [--no-kernel-check] [SCALE]   SCALE x 1 Mi floats per vector (default 1)
#include <cstdint>
#include <vector>

#include "check.h"

namespace {

__global__ void vector_add(const float* a, const float* b, float* c, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

float value(std::uint64_t seed, std::size_t i) { return static_cast<float>((seed * 131 + i * 17) % 4096); }

struct Vectors {
  std::vector<float> a, b, c, a_back;
  explicit Vectors(std::size_t n) : a(n), b(n), c(n), a_back(n) {}
};

// One pass: everything on `stream`, in stream order, one synchronisation at the end.
void pass(Vectors& v, std::uint64_t seed, cudaStream_t stream, examples::Checksum& checksum,
          examples::KernelResults& kernel_results) {
  const std::size_t n = v.a.size();
  const std::size_t bytes = n * sizeof(float);
  for (std::size_t i = 0; i < n; ++i) {
    v.a[i] = value(seed, i);
    v.b[i] = value(seed + 7, i);
  }
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&a), bytes, stream));
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&b), bytes, stream));
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&c), bytes, stream));
  CHECK(cudaMemcpyAsync(a, v.a.data(), bytes, cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemcpyAsync(b, v.b.data(), bytes, cudaMemcpyHostToDevice, stream));
  const unsigned threads = 256;
  vector_add<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(a, b, c, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(v.c.data(), c, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaMemcpyAsync(v.a_back.data(), a, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(a, stream));
  CHECK(cudaFreeAsync(b, stream));
  CHECK(cudaFreeAsync(c, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (std::size_t i = 0; i < n; ++i) {
    if (v.a_back[i] != v.a[i]) examples::fail("pass %llu: a[%zu] came back as %g", static_cast<unsigned long long>(seed), i, static_cast<double>(v.a_back[i]));
    if (kernel_results.checked && v.c[i] != v.a[i] + v.b[i])
      examples::fail("pass %llu: c[%zu] = %g, expected %g", static_cast<unsigned long long>(seed), i,
                     static_cast<double>(v.c[i]), static_cast<double>(v.a[i] + v.b[i]));
  }
  checksum.add(v.a_back.data(), bytes);
  kernel_results.add(checksum, v.c.data(), bytes);
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const std::size_t n = (std::size_t{1} << 20) * examples::parse_argument(argc, argv, 1, "SCALE");
  constexpr int kPoolPasses = 32;
  CHECK(cudaSetDevice(0));
  int pools_supported = 0;
  CHECK(cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, 0));
  if (!pools_supported) examples::fail("device 0 does not support stream-ordered allocation");

  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Vectors vectors(n);
  examples::Checksum checksum;
  examples::Stopwatch basic_time;
  pass(vectors, 0, stream, checksum, kernel_results);
  const double basic_ms = basic_time.elapsed_ms();

  cudaMemPool_t pool = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  std::uint64_t threshold = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  examples::Stopwatch pool_time;
  for (int p = 1; p <= kPoolPasses; ++p) pass(vectors, static_cast<std::uint64_t>(p), stream, checksum, kernel_results);
  const double pool_ms = pool_time.elapsed_ms();
  threshold = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  CHECK(cudaStreamDestroy(stream));

  std::printf("stream_ordered_allocation: %zu floats per vector (%s), results %s\n", n,
              examples::format_bytes(n * sizeof(float)).c_str(), kernel_results.checked ? "verified" : "not checked");
  std::printf("  basic: 1 pass of allocate, copy, add, copy back, free on one stream: %.3f ms\n", basic_ms);
  std::printf("  pool with release threshold: %d passes: %.3f ms per pass\n", kPoolPasses, pool_ms / kPoolPasses);
  kernel_results.print();
  checksum.print();
  return 0;
}
