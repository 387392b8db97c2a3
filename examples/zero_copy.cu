// zero_copy: mapped pinned host memory read and written by kernels in place, in the shape of NVIDIA's
// simple zero-copy sample, with host functions queued behind the work on several streams. The host
// buffers come from cudaHostAlloc(cudaHostAllocMapped) and from cudaHostRegister(cudaHostRegisterMapped);
// kernels get their device pointers (cudaHostGetDevicePointer) and scale one into the other; each
// stream copies its slice of the mapped input into device memory (cudaMalloc) and then runs a host
// function (cudaLaunchHostFunc) that fingerprints the slice, in stream order. The device copy is
// read back and compared with the input after every round.
// Each host function must run once per round and see that round's input; the scaled values are
// verified unless --no-kernel-check.
//
//   zero_copy [--no-kernel-check] [SCALE]    SCALE x 256 Ki floats (default 1)
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "check.h"

namespace {

__global__ void scale(const float* in, float* out, std::size_t n, float factor) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

// What a stream's host function sees: its slice of the input, fingerprinted in stream order.
struct Slice {
  const float* data = nullptr;
  std::size_t n = 0;
  std::uint64_t fingerprint = 0;
  std::atomic<int> runs{0};
};

void CUDART_CB fingerprint(void* user) {
  auto* slice = static_cast<Slice*>(user);
  examples::Checksum sum;
  sum.add(slice->data, slice->n * sizeof(float));
  slice->fingerprint = sum.value();
  slice->runs.fetch_add(1);
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const std::size_t n = (std::size_t{1} << 18) * examples::parse_argument(argc, argv, 1, "SCALE");
  const std::size_t bytes = n * sizeof(float);
  constexpr int kStreams = 4;
  constexpr int kRounds = 8;
  constexpr float kFactor = 0.5f;
  CHECK(cudaSetDevice(0));
  int can_map = 0;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  if (!can_map) examples::fail("device 0 cannot map host memory");
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));

  float* input = nullptr;  // pinned and mapped by the runtime
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&input), bytes, cudaHostAllocMapped));
  void* registered = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);  // the program's own, registered
  if (registered == nullptr) examples::fail("no host memory for %zu bytes", bytes);
  CHECK(cudaHostRegister(registered, bytes, cudaHostRegisterMapped));
  auto* output = static_cast<float*>(registered);
  float* device_input = nullptr;
  float* device_output = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_input), input, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_output), output, 0));

  float* device_copy = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&device_copy), bytes));
  std::vector<float> copy_back(n);
  std::vector<cudaStream_t> streams(kStreams);
  for (cudaStream_t& stream : streams) CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::size_t per_stream = (n + kStreams - 1) / kStreams;
  std::vector<Slice> slices(kStreams);
  examples::Checksum checksum;
  examples::Stopwatch stopwatch;
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t i = 0; i < n; ++i) input[i] = static_cast<float>((i * 29 + round * 5) % 997);
    std::fill(output, output + n, 0.0f);
    for (int s = 0; s < kStreams; ++s) {
      const std::size_t first = s * per_stream;
      const std::size_t count = first >= n ? 0 : std::min(per_stream, n - first);
      slices[s].data = input + first;
      slices[s].n = count;
      if (count > 0) {
        scale<<<static_cast<unsigned>((count + 255) / 256), 256, 0, streams[s]>>>(device_input + first,
                                                                                  device_output + first, count, kFactor);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(device_copy + first, device_input + first, count * sizeof(float),
                              cudaMemcpyDeviceToDevice, streams[s]));
      }
      CHECK(cudaLaunchHostFunc(streams[s], fingerprint, &slices[s]));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(copy_back.data(), device_copy, bytes, cudaMemcpyDeviceToHost));
    if (!std::equal(copy_back.begin(), copy_back.end(), input)) examples::fail("round %d: the device copy differs", round);
    for (int s = 0; s < kStreams; ++s) {
      if (slices[s].runs.load() != round + 1) examples::fail("round %d: stream %d's host function did not run", round, s);
      examples::Checksum slice_sum;
      slice_sum.add(slices[s].data, slices[s].n * sizeof(float));
      if (slice_sum.value() != slices[s].fingerprint) examples::fail("round %d: stream %d saw other input", round, s);
      checksum.add_value(slices[s].fingerprint);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (kernel_results.checked && output[i] != input[i] * kFactor) {
        examples::fail("round %d: output[%zu] = %g, expected %g", round, i, static_cast<double>(output[i]),
                       static_cast<double>(input[i] * kFactor));
      }
    }
    kernel_results.add(checksum, output, bytes);
  }
  const double per_round_ms = stopwatch.elapsed_ms() / kRounds;
  for (cudaStream_t stream : streams) CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(device_copy));
  CHECK(cudaHostUnregister(registered));
  std::free(registered);
  CHECK(cudaFreeHost(input));

  std::printf("zero_copy: %zu floats in mapped pinned memory (%s), %d streams, %d rounds, results %s\n", n,
              examples::format_bytes(bytes).c_str(), kStreams, kRounds,
              kernel_results.checked ? "verified" : "not checked");
  std::printf("  per round: %.3f ms\n", per_round_ms);
  kernel_results.print();
  checksum.print();
  return 0;
}
