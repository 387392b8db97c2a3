// async_pool: stream-ordered allocation (cudaMallocAsync/cudaFreeAsync) across streams. Each block
// is allocated and filled on one stream; memory freed there is reused at once on the same stream
// (legal: stream order protects it); the result is then read and freed on another stream that
// waits for an event, which is how memory moves between streams safely. Every byte is verified.
//
//   async_pool [SCALE]   runs SCALE x 256 iterations over 3 streams (default 1)
#include <vector>

#include "check.h"

namespace {

constexpr int kStreams = 3;
constexpr unsigned long kBatch = 32;  // iterations between two synchronisations

// One iteration's host side: the data uploaded and the buffer the result is read back into; both
// must live until the streams have finished with them.
struct Transfer {
  std::vector<unsigned char> input;
  std::vector<unsigned char> output;
  std::uint64_t seed = 0;
  cudaEvent_t produced = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const unsigned long iterations = 256 * examples::parse_argument(argc, argv, 1, "SCALE");
  examples::Rng rng(11);
  examples::Checksum checksum;
  examples::Stopwatch total;
  std::uint64_t verified = 0;
  CHECK(cudaSetDevice(0));

  std::vector<cudaStream_t> streams(kStreams);
  for (cudaStream_t& stream : streams) CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  for (unsigned long start = 0; start < iterations; start += kBatch) {
    std::vector<Transfer> batch;
    for (unsigned long i = start; i < start + kBatch && i < iterations; ++i) {
      cudaStream_t producer = streams[i % kStreams];
      cudaStream_t consumer = streams[(i + 1) % kStreams];
      const std::size_t size = rng.log_uniform(1024, 512 * 1024);
      Transfer& transfer = batch.emplace_back();
      transfer.seed = 5000 + i;
      transfer.input.resize(size);
      transfer.output.resize(size);
      examples::fill_pattern(transfer.input.data(), size, transfer.seed);

      void* staging = nullptr;
      void* result = nullptr;
      void* scratch = nullptr;
      CHECK(cudaMallocAsync(&staging, size, producer));
      CHECK(cudaMemcpyAsync(staging, transfer.input.data(), size, cudaMemcpyHostToDevice, producer));
      CHECK(cudaMallocAsync(&result, size, producer));
      CHECK(cudaMemcpyAsync(result, staging, size, cudaMemcpyDeviceToDevice, producer));
      CHECK(cudaFreeAsync(staging, producer));
      // Likely the memory just freed: reusable at once because it is the same stream.
      CHECK(cudaMallocAsync(&scratch, size, producer));
      CHECK(cudaMemsetAsync(scratch, 0x5a, size, producer));
      CHECK(cudaFreeAsync(scratch, producer));

      CHECK(cudaEventCreateWithFlags(&transfer.produced, cudaEventDisableTiming));
      CHECK(cudaEventRecord(transfer.produced, producer));
      CHECK(cudaStreamWaitEvent(consumer, transfer.produced, 0));
      CHECK(cudaMemcpyAsync(transfer.output.data(), result, size, cudaMemcpyDeviceToHost, consumer));
      CHECK(cudaFreeAsync(result, consumer));  // freed on another stream than it was allocated on
    }
    for (cudaStream_t stream : streams) CHECK(cudaStreamSynchronize(stream));
    for (Transfer& transfer : batch) {
      examples::expect_pattern(transfer.output.data(), transfer.output.size(), transfer.seed,
                               "block read back on another stream");
      checksum.add(transfer.output.data(), transfer.output.size());
      verified += transfer.output.size();
      CHECK(cudaEventDestroy(transfer.produced));
    }
  }
  for (cudaStream_t stream : streams) CHECK(cudaStreamDestroy(stream));

  std::printf("async_pool: %lu iterations over %d streams, 3 cudaMallocAsync each\n", iterations, kStreams);
  std::printf("  freed and allocated again on the same stream: %lu times; freed on another stream: %lu\n",
              iterations, iterations);
  std::printf("  every byte read back and verified: %s\n", examples::format_bytes(verified).c_str());
  std::printf("  total time: %.3f ms\n", total.elapsed_ms());
  checksum.print();
  return 0;
}
