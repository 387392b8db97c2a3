// vector_add: a real kernel (c = a + b) on device memory from cudaMalloc, so a pooling allocator
// underneath is exercised by actual GPU work. Needs nvcc to build; on the simulator, which runs no
// device code, give --no-kernel-check.
//
//   vector_add [--no-kernel-check] [SCALE]   adds SCALE x 4 Mi floats (default 1), ten times with fresh buffers
#include <vector>

#include "check.h"

namespace {

__global__ void add(const float* a, const float* b, float* c, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// Small integers, so every sum is exact in float and the checksum is the same on any GPU.
float value(std::uint64_t seed, std::size_t i) { return static_cast<float>((seed * 31 + i * 7) % 1024); }

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const std::size_t n = (std::size_t{4} << 20) * examples::parse_argument(argc, argv, 1, "SCALE");
  constexpr int kRepeats = 10;
  std::vector<float> a(n), b(n), c(n);
  examples::Checksum checksum;
  examples::Stopwatch total;
  CHECK(cudaSetDevice(0));

  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = value(static_cast<std::uint64_t>(repeat), i);
      b[i] = value(static_cast<std::uint64_t>(repeat) + 1000, i);
    }
    float* device_a = nullptr;
    float* device_b = nullptr;
    float* device_c = nullptr;
    CHECK(cudaMalloc(&device_a, n * sizeof(float)));
    CHECK(cudaMalloc(&device_b, n * sizeof(float)));
    CHECK(cudaMalloc(&device_c, n * sizeof(float)));
    CHECK(cudaMemcpy(device_a, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(device_b, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    const unsigned threads = 256;
    const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
    add<<<blocks, threads>>>(device_a, device_b, device_c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c.data(), device_c, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(device_a));
    CHECK(cudaFree(device_b));
    CHECK(cudaFree(device_c));
    for (std::size_t i = 0; kernel_results.checked && i < n; ++i) {
      if (c[i] != a[i] + b[i]) {
        examples::fail("repeat %d: c[%zu] = %g, expected %g", repeat, i, static_cast<double>(c[i]),
                       static_cast<double>(a[i] + b[i]));
      }
    }
    checksum.add(a.data(), n * sizeof(float));
    checksum.add(b.data(), n * sizeof(float));
    kernel_results.add(checksum, c.data(), n * sizeof(float));
  }

  std::printf("vector_add: %d times c = a + b over %zu floats (%s per vector), results %s\n", kRepeats, n,
              examples::format_bytes(n * sizeof(float)).c_str(), kernel_results.checked ? "verified" : "not checked");
  std::printf("  total time: %.3f ms\n", total.elapsed_ms());
  kernel_results.print();
  checksum.print();
  return 0;
}
