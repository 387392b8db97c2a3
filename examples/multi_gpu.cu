// multi_gpu: one reduction spread over every device, in the shape of NVIDIA's simpleMultiGPU sample.
// Each device (up to 4) gets its own slice of the input, a stream, device buffers (cudaMalloc) and
// pinned host buffers (cudaMallocHost); all devices are started before any is waited for: on each,
// the slice is copied in, a kernel reduces it to one partial sum per thread, and the partial sums
// and the slice are copied back, all asynchronously on that device's stream. The host then waits
// for each stream, adds up the partial sums and compares the total with its own sum of the input.
// Every slice copied back is verified; the sums are verified unless --no-kernel-check.
//
//   multi_gpu [--no-kernel-check] [SCALE]    SCALE x 256 Ki floats per device (default 1)
#include <cmath>
#include <vector>

#include "check.h"

namespace {

constexpr int kMaxDevices = 4;
constexpr unsigned kBlocks = 32;
constexpr unsigned kThreads = 256;
constexpr std::size_t kPartials = std::size_t{kBlocks} * kThreads;

// Each thread adds a strided share of the slice: one partial sum per thread.
__global__ void reduce(const float* in, float* partial, std::size_t n) {
  const std::size_t thread = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  float sum = 0.0f;
  for (std::size_t i = thread; i < n; i += stride) sum += in[i];
  partial[thread] = sum;
}

// Multiples of 1/16 below 64: every partial and total sum here is exact in float and double.
float value(int device, std::size_t i) { return static_cast<float>((device * 7919 + i * 13) % 1024) / 16.0f; }

struct DeviceWork {
  cudaStream_t stream = nullptr;
  float* input = nullptr;     // device
  float* partial = nullptr;   // device
  float* host_input = nullptr;    // pinned
  float* host_partial = nullptr;  // pinned
  float* host_back = nullptr;     // pinned: the slice as copied back
};

void start(int device, DeviceWork& work, std::size_t n) {
  CHECK(cudaSetDevice(device));
  CHECK(cudaStreamCreateWithFlags(&work.stream, cudaStreamNonBlocking));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&work.input), n * sizeof(float)));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&work.partial), kPartials * sizeof(float)));
  CHECK(cudaMallocHost(reinterpret_cast<void**>(&work.host_input), n * sizeof(float)));
  CHECK(cudaMallocHost(reinterpret_cast<void**>(&work.host_partial), kPartials * sizeof(float)));
  CHECK(cudaMallocHost(reinterpret_cast<void**>(&work.host_back), n * sizeof(float)));
  for (std::size_t i = 0; i < n; ++i) work.host_input[i] = value(device, i);
  CHECK(cudaMemcpyAsync(work.input, work.host_input, n * sizeof(float), cudaMemcpyHostToDevice, work.stream));
  reduce<<<kBlocks, kThreads, 0, work.stream>>>(work.input, work.partial, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(work.host_partial, work.partial, kPartials * sizeof(float), cudaMemcpyDeviceToHost, work.stream));
  CHECK(cudaMemcpyAsync(work.host_back, work.input, n * sizeof(float), cudaMemcpyDeviceToHost, work.stream));
}

// Waits for the device's stream, checks the slice that came back and returns the device's sum.
double finish(int device, DeviceWork& work, std::size_t n, examples::Checksum& checksum,
              examples::KernelResults& kernel_results) {
  CHECK(cudaSetDevice(device));
  CHECK(cudaStreamSynchronize(work.stream));
  for (std::size_t i = 0; i < n; ++i) {
    if (work.host_back[i] != work.host_input[i]) {
      examples::fail("device %d: element %zu came back as %g, expected %g", device, i,
                     static_cast<double>(work.host_back[i]), static_cast<double>(work.host_input[i]));
    }
  }
  checksum.add(work.host_back, n * sizeof(float));
  kernel_results.add(checksum, work.host_partial, kPartials * sizeof(float));
  double sum = 0.0;
  for (std::size_t i = 0; i < kPartials; ++i) sum += work.host_partial[i];
  CHECK(cudaFree(work.input));
  CHECK(cudaFree(work.partial));
  CHECK(cudaFreeHost(work.host_input));
  CHECK(cudaFreeHost(work.host_partial));
  CHECK(cudaFreeHost(work.host_back));
  CHECK(cudaStreamDestroy(work.stream));
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const std::size_t n = (std::size_t{1} << 18) * examples::parse_argument(argc, argv, 1, "SCALE");
  int available = 0;
  CHECK(cudaGetDeviceCount(&available));
  if (available < 1) examples::fail("no CUDA device");
  const int devices = available < kMaxDevices ? available : kMaxDevices;

  double expected = 0.0;
  for (int d = 0; d < devices; ++d) {
    for (std::size_t i = 0; i < n; ++i) expected += value(d, i);
  }

  examples::Stopwatch stopwatch;
  std::vector<DeviceWork> work(devices);
  for (int d = 0; d < devices; ++d) start(d, work[d], n);
  examples::Checksum checksum;
  double total = 0.0;
  for (int d = 0; d < devices; ++d) total += finish(d, work[d], n, checksum, kernel_results);
  const double elapsed_ms = stopwatch.elapsed_ms();
  if (kernel_results.checked && std::fabs(total - expected) > 1e-9 * expected) {
    examples::fail("the devices' sum is %.17g, the host's %.17g", total, expected);
  }

  std::printf("multi_gpu: %d of %d devices, %zu floats each (%s), results %s\n", devices, available, n,
              examples::format_bytes(n * sizeof(float)).c_str(), kernel_results.checked ? "verified" : "not checked");
  std::printf("  per device: a stream, copy in, a reduction kernel of %u x %u threads, %zu partial sums and the slice copied back\n",
              kBlocks, kThreads, kPartials);
  std::printf("  host sum of every slice: %.1f; all devices started, then waited for: %.3f ms\n", expected, elapsed_ms);
  kernel_results.print();
  checksum.print();
  return 0;
}
