// oom: allocates fixed-size blocks until the device refuses, reports how far it got and what
// cudaMemGetInfo says, frees everything and shows that as many blocks can be allocated again.
// Each block gets a small stamp at both ends (so the run stays cheap however large the device),
// and every stamp is verified. The number of blocks depends on the device and the allocator, so
// the checksum covers only the stamps of the first four blocks of each round.
//
//   oom [BLOCK_MIB]   block size in MiB (default 256)
#include <vector>

#include "check.h"

namespace {

constexpr std::size_t kStampBytes = 4096;
constexpr std::size_t kChecksumBlocks = 4;
constexpr std::size_t kMaxBlocks = 1 << 16;  // a device that never refuses is a bug, not a result

struct Stamper {
  std::size_t block_size;
  std::vector<unsigned char> host = std::vector<unsigned char>(kStampBytes);

  std::uint64_t seed(std::uint64_t round, std::size_t index, int end) const {
    return (round * kMaxBlocks + index) * 2 + static_cast<std::uint64_t>(end);
  }
  char* end_address(void* block, int end) const {
    return static_cast<char*>(block) + (end == 0 ? 0 : block_size - kStampBytes);
  }
  void write(void* block, std::uint64_t round, std::size_t index) {
    for (int end = 0; end < 2; ++end) {
      examples::fill_pattern(host.data(), kStampBytes, seed(round, index, end));
      CHECK(cudaMemcpy(end_address(block, end), host.data(), kStampBytes, cudaMemcpyHostToDevice));
    }
  }
  void verify(void* block, std::uint64_t round, std::size_t index, examples::Checksum& checksum) {
    for (int end = 0; end < 2; ++end) {
      CHECK(cudaMemcpy(host.data(), end_address(block, end), kStampBytes, cudaMemcpyDeviceToHost));
      examples::expect_pattern(host.data(), kStampBytes, seed(round, index, end), "block stamp");
      if (index < kChecksumBlocks) checksum.add(host.data(), kStampBytes);
    }
  }
};

void verify_and_free_all(std::vector<void*>& blocks, Stamper& stamper, std::uint64_t round,
                         examples::Checksum& checksum) {
  for (std::size_t i = 0; i < blocks.size(); ++i) stamper.verify(blocks[i], round, i, checksum);
  for (void* block : blocks) CHECK(cudaFree(block));
  blocks.clear();
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t block_size = examples::parse_argument(argc, argv, 256, "BLOCK_MIB") << 20;
  Stamper stamper{block_size};
  examples::Checksum checksum;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  const examples::MemoryInfo at_start = examples::query_memory_info();

  std::vector<void*> blocks;
  for (;;) {
    void* block = nullptr;
    const cudaError_t status = cudaMalloc(&block, block_size);
    if (status == cudaErrorMemoryAllocation) break;
    CHECK(status);
    stamper.write(block, 0, blocks.size());
    blocks.push_back(block);
    if (blocks.size() == kMaxBlocks)
      examples::fail("%zu blocks and still no out-of-memory error", kMaxBlocks);
  }
  const cudaError_t last_error = cudaGetLastError();  // the refusal, which this also clears
  if (last_error != cudaErrorMemoryAllocation) {
    examples::fail("cudaGetLastError after the refusal returned %s, expected cudaErrorMemoryAllocation",
                   cudaGetErrorName(last_error));
  }
  const std::size_t count = blocks.size();
  if (count < kChecksumBlocks) {
    examples::fail("only %zu blocks of %s fit; at least %zu are needed (give a smaller BLOCK_MIB)", count,
                   examples::format_bytes(block_size).c_str(), kChecksumBlocks);
  }
  const examples::MemoryInfo when_full = examples::query_memory_info();
  verify_and_free_all(blocks, stamper, 0, checksum);
  CHECK(cudaDeviceSynchronize());
  const examples::MemoryInfo after_free = examples::query_memory_info();

  for (std::size_t i = 0; i < count; ++i) {
    void* block = nullptr;
    const cudaError_t status = cudaMalloc(&block, block_size);
    if (status != cudaSuccess) {
      examples::fail("after freeing everything, block %zu of the %zu that fitted before was refused: %s", i,
                     count, cudaGetErrorName(status));
    }
    stamper.write(block, 1, i);
    blocks.push_back(block);
  }
  verify_and_free_all(blocks, stamper, 1, checksum);

  std::printf("oom: allocating blocks of %s until the device refuses\n",
              examples::format_bytes(block_size).c_str());
  std::printf("  got %zu blocks (%s) before cudaMalloc returned cudaErrorMemoryAllocation\n", count,
              examples::format_bytes(count * block_size).c_str());
  examples::print_memory_info("at start", at_start);
  examples::print_memory_info("when refused", when_full);
  examples::print_memory_info("after freeing", after_free);
  std::printf("  allocated all %zu blocks again after freeing: the memory came back\n", count);
  checksum.print();
  return 0;
}
