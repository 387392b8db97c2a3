// multi_stream_copy: overlaps host-to-device copies, a kernel and device-to-host copies on four
// streams through page-locked host buffers (cudaHostAlloc), in the shape of NVIDIA's multi-copy
// sample; events time the rounds. Device buffers are allocated and freed every round while the
// other streams still work, so an allocator underneath must not hand out memory they still use.
// Every round trip of the input is verified; the kernel's output unless --no-kernel-check.
//
//   multi_stream_copy [--no-kernel-check] [SCALE]   SCALE x 8 rounds (default 1)
#include <cstdint>
#include <cstring>

#include "check.h"

namespace {

constexpr int kStreams = 4;
constexpr std::size_t kInts = std::size_t{1} << 18;  // 1 MiB of ints per stream and round
constexpr int kInnerSteps = 5;

__global__ void increment(int* out, const int* in, std::size_t n, int steps) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    int v = in[i];
    for (int s = 0; s < steps; ++s) ++v;
    out[i] = v;
  }
}

std::uint64_t seed_of(int round, int stream) { return static_cast<std::uint64_t>(round) * kStreams + stream + 1; }

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const int rounds = 8 * static_cast<int>(examples::parse_argument(argc, argv, 1, "SCALE"));
  const std::size_t bytes = kInts * sizeof(int);
  CHECK(cudaSetDevice(0));

  cudaStream_t streams[kStreams];
  int* host_in[kStreams];
  int* host_out[kStreams];
  int* host_back[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamCreate(&streams[s]));
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_in[s]), bytes, cudaHostAllocDefault));
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_out[s]), bytes, cudaHostAllocDefault));
    CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_back[s]), bytes));
  }
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));

  examples::Checksum checksum;
  float total_ms = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int s = 0; s < kStreams; ++s) examples::fill_pattern(host_in[s], bytes, seed_of(round, s));
    CHECK(cudaEventRecord(start, nullptr));
    int* device_in[kStreams];
    int* device_out[kStreams];
    for (int s = 0; s < kStreams; ++s) {
      CHECK(cudaMalloc(reinterpret_cast<void**>(&device_in[s]), bytes));
      CHECK(cudaMalloc(reinterpret_cast<void**>(&device_out[s]), bytes));
      CHECK(cudaMemcpyAsync(device_in[s], host_in[s], bytes, cudaMemcpyHostToDevice, streams[s]));
      increment<<<static_cast<unsigned>(kInts / 256), 256, 0, streams[s]>>>(device_out[s], device_in[s], kInts,
                                                                             kInnerSteps);
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpyAsync(host_out[s], device_out[s], bytes, cudaMemcpyDeviceToHost, streams[s]));
      CHECK(cudaMemcpyAsync(host_back[s], device_in[s], bytes, cudaMemcpyDeviceToHost, streams[s]));
    }
    // Freed while the streams may still be copying: the memory must not be reused before they finish.
    for (int s = 0; s < kStreams; ++s) {
      CHECK(cudaFree(device_in[s]));
      CHECK(cudaFree(device_out[s]));
    }
    CHECK(cudaEventRecord(stop, nullptr));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaDeviceSynchronize());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    total_ms += ms;
    for (int s = 0; s < kStreams; ++s) {
      examples::expect_pattern(host_back[s], bytes, seed_of(round, s), "input copied back");
      checksum.add(host_back[s], bytes);
      for (std::size_t i = 0; kernel_results.checked && i < kInts; ++i) {
        if (host_out[s][i] != host_in[s][i] + kInnerSteps)
          examples::fail("round %d stream %d: out[%zu] = %d, expected %d", round, s, i, host_out[s][i],
                         host_in[s][i] + kInnerSteps);
      }
      kernel_results.add(checksum, host_out[s], bytes);
    }
  }

  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaFreeHost(host_in[s]));
    CHECK(cudaFreeHost(host_out[s]));
    CHECK(cudaFreeHost(host_back[s]));
    CHECK(cudaStreamDestroy(streams[s]));
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));

  std::printf("multi_stream_copy: %d rounds x %d streams of copy in, kernel, copy out (%s each), results %s\n",
              rounds, kStreams, examples::format_bytes(bytes).c_str(),
              kernel_results.checked ? "verified" : "not checked");
  std::printf("  time per round: %.3f ms\n", static_cast<double>(total_ms) / rounds);
  kernel_results.print();
  checksum.print();
  return 0;
}
