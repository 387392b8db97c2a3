// multistream: copies queued on several streams are still waiting when the blocks they read and
// write are freed and the memory is allocated again and overwritten from the host. cudaFree waits
// for the device, so every queued copy must still see its own blocks; an allocator that handed a
// freed block out while a stream still used it would corrupt the data, and every byte is verified.
//
// Each stream first runs a host function that sleeps, so its copies are really in flight (queued
// behind it) when the program frees their blocks. The streams are non-blocking: the synchronous
// uploads on the default stream do not wait for them.
//
//   multistream [SCALE]   runs SCALE x 8 rounds over 4 streams (default 1)
#include <chrono>
#include <thread>
#include <vector>

#include "check.h"

namespace {

constexpr int kStreams = 4;
constexpr int kDelayMs = 2;

void CUDART_CB sleep_on_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(kDelayMs)); }

struct Block {
  void* pointer = nullptr;
  std::size_t size = 0;
  std::uint64_t seed = 0;
};

Block allocate(std::size_t size, std::uint64_t seed) {
  Block block{nullptr, size, seed};
  CHECK(cudaMalloc(&block.pointer, size));
  return block;
}

void upload(const Block& block, std::vector<unsigned char>& host) {
  examples::fill_pattern(host.data(), block.size, block.seed);
  CHECK(cudaMemcpy(block.pointer, host.data(), block.size, cudaMemcpyHostToDevice));
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned long rounds = 8 * examples::parse_argument(argc, argv, 1, "SCALE");
  const std::size_t max_size = std::size_t{1} << 20;
  std::vector<unsigned char> host(max_size);
  examples::Rng rng(7);
  examples::Stopwatch total;
  CHECK(cudaSetDevice(0));

  std::vector<cudaStream_t> streams(kStreams);
  for (cudaStream_t& stream : streams) CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::vector<Block> kept;  // blocks whose content is checked once all streams are done
  unsigned long freed_in_flight = 0;
  std::uint64_t seed = 1000;
  for (unsigned long round = 0; round < rounds; ++round) {
    for (cudaStream_t stream : streams) {
      const std::size_t size = rng.log_uniform(64 * 1024, max_size);
      Block source = allocate(size, seed++);
      upload(source, host);
      const Block copy = allocate(size, source.seed);  // will hold the source's data
      const Block scratch = allocate(size, 0);
      CHECK(cudaLaunchHostFunc(stream, sleep_on_stream, nullptr));
      CHECK(cudaMemcpyAsync(copy.pointer, source.pointer, size, cudaMemcpyDeviceToDevice, stream));
      CHECK(cudaMemcpyAsync(scratch.pointer, source.pointer, size, cudaMemcpyDeviceToDevice, stream));
      // Both still in use by the queued copies: one is read, the other written.
      CHECK(cudaFree(source.pointer));
      CHECK(cudaFree(scratch.pointer));
      freed_in_flight += 2;
      // Same size, so these are the likeliest to get the freed memory; written at once.
      const Block first = allocate(size, seed++);
      upload(first, host);
      const Block second = allocate(size, seed++);
      upload(second, host);
      kept.insert(kept.end(), {copy, first, second});
    }
  }
  CHECK(cudaDeviceSynchronize());

  examples::Checksum checksum;
  std::uint64_t verified = 0;
  for (Block& block : kept) {
    CHECK(cudaMemcpy(host.data(), block.pointer, block.size, cudaMemcpyDeviceToHost));
    examples::expect_pattern(host.data(), block.size, block.seed, "block written while streams ran");
    checksum.add(host.data(), block.size);
    verified += block.size;
    CHECK(cudaFree(block.pointer));
  }
  for (cudaStream_t stream : streams) CHECK(cudaStreamDestroy(stream));

  std::printf(
      "multistream: %lu rounds over %d non-blocking streams, each copy queued behind a %d ms host function\n",
      rounds, kStreams, kDelayMs);
  std::printf(
      "  blocks freed while a queued copy still used them: %lu, each allocated again and overwritten\n",
      freed_in_flight);
  std::printf("  every byte verified afterwards: %zu blocks, %s\n", kept.size(),
              examples::format_bytes(verified).c_str());
  std::printf("  total time: %.3f ms\n", total.elapsed_ms());
  checksum.print();
  return 0;
}
