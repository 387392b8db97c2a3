// multi_stream_copy: overlaps host-to-device copies, a kernel and device-to-host copies on four
// streams through page-locked host buffers (cudaHostAlloc), in the shape of NVIDIA's multi-copy
// sample; events time the rounds. Device buffers are allocated and freed every round while the
// other streams still work, so an allocator underneath must not hand out memory they still use.
// A stream callback (cudaStreamAddCallback) after each stream's copies checks, when the stream
// reaches it, that the input already came back: callbacks run in stream order.
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

// What a stream's callback checks and counts. Written by the callback's thread, read by main after
// the round's synchronisation (which orders them).
struct CopiesDone {
  const int* back = nullptr;
  std::size_t bytes = 0;
  std::uint64_t seed = 0;
  int calls = 0;      // callbacks run
  int too_early = 0;  // run before the input was back, or with an error status
};

// Calls no CUDA function, as a stream callback must not.
void CUDART_CB on_copies_done(cudaStream_t, cudaError_t status, void* data) {
  CopiesDone& done = *static_cast<CopiesDone*>(data);
  ++done.calls;
  if (status != cudaSuccess || examples::find_pattern_mismatch(done.back, done.bytes, done.seed) != done.bytes) {
    ++done.too_early;
  }
}

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
  CopiesDone copies_done[kStreams];
  int callbacks = 0;
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
      copies_done[s] = CopiesDone{host_back[s], bytes, seed_of(round, s)};
      CHECK(cudaStreamAddCallback(streams[s], on_copies_done, &copies_done[s], 0));
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
      if (copies_done[s].calls != 1 || copies_done[s].too_early != 0)
        examples::fail("round %d stream %d: its callback ran %d times, %d before its copies were done", round, s,
                       copies_done[s].calls, copies_done[s].too_early);
      callbacks += copies_done[s].calls;
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
  std::printf("  stream callbacks: %d, each after its stream's copies\n", callbacks);
  std::printf("  time per round: %.3f ms\n", static_cast<double>(total_ms) / rounds);
  kernel_results.print();
  checksum.print();
  return 0;
}
