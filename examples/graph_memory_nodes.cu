// graph_memory_nodes: a CUDA graph that allocates and frees its own memory, in the shape of NVIDIA's
// graph memory nodes sample. A stream capture records cudaMallocAsync of two buffers, a copy in, a
// kernel that scales the data, copies out and cudaFreeAsync of both; the graph is instantiated once
// and launched many times, each launch with new input. Every copy back of the input is verified; the
// scaled values are verified unless --no-kernel-check.
//
//   graph_memory_nodes [--no-kernel-check] [SCALE]    SCALE x 256 Ki floats (default 1)
#include <cstdint>
#include <vector>

#include "check.h"

namespace {

__global__ void scale(const float* in, float* out, std::size_t n, float factor) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const std::size_t n = (std::size_t{1} << 18) * examples::parse_argument(argc, argv, 1, "SCALE");
  const std::size_t bytes = n * sizeof(float);
  constexpr int kLaunches = 16;
  constexpr float kFactor = 3.0f;
  CHECK(cudaSetDevice(0));

  std::vector<float> input(n), output(n), input_back(n);
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // The graph: its two buffers are allocated and freed by the graph itself (memory nodes).
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  float* in = nullptr;
  float* out = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&in), bytes, stream));
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&out), bytes, stream));
  CHECK(cudaMemcpyAsync(in, input.data(), bytes, cudaMemcpyHostToDevice, stream));
  scale<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(in, out, n, kFactor);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(output.data(), out, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaMemcpyAsync(input_back.data(), in, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(in, stream));
  CHECK(cudaFreeAsync(out, stream));
  CHECK(cudaStreamEndCapture(stream, &graph));
  std::size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  examples::Checksum checksum;
  examples::Stopwatch stopwatch;
  for (int launch = 0; launch < kLaunches; ++launch) {
    for (std::size_t i = 0; i < n; ++i) input[i] = static_cast<float>((i * 37 + launch * 11) % 1021);
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < n; ++i) {
      if (input_back[i] != input[i]) {
        examples::fail("launch %d: input[%zu] came back as %g, expected %g", launch, i,
                       static_cast<double>(input_back[i]), static_cast<double>(input[i]));
      }
      if (kernel_results.checked && output[i] != input[i] * kFactor) {
        examples::fail("launch %d: output[%zu] = %g, expected %g", launch, i, static_cast<double>(output[i]),
                       static_cast<double>(input[i] * kFactor));
      }
    }
    checksum.add(input_back.data(), bytes);
    kernel_results.add(checksum, output.data(), bytes);
  }
  const double per_launch_ms = stopwatch.elapsed_ms() / kLaunches;
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));

  std::printf("graph_memory_nodes: a graph of %zu nodes allocating and freeing %s twice, launched %d times, "
              "results %s\n", nodes, examples::format_bytes(bytes).c_str(), kLaunches,
              kernel_results.checked ? "verified" : "not checked");
  std::printf("  per launch: %.3f ms\n", per_launch_ms);
  kernel_results.print();
  checksum.print();
  return 0;
}
