// fragmentation: the pattern that defeats an allocator which neither splits nor coalesces.
//  1. 64 blocks of one unit are allocated side by side, then every other one is freed: half the
//     memory is free, but only as 32 separate one-unit holes.
//  2. 16 blocks of 1.5 units are requested: none fits a hole, so they must come from elsewhere.
//  3. The remaining unit blocks are freed: with coalescing, the holes and their freed neighbours
//     merge back into one 64-unit range ...
//  4. ... so a 48-unit block, larger than any hole was, fits in memory already reserved.
// A pool needs 88 units with coalescing, 136 without. Every block is verified.
//
//   fragmentation [UNIT_MIB]   size of one unit in MiB (default 1)
#include <algorithm>
#include <vector>

#include "check.h"

namespace {

constexpr std::size_t kUnitBlocks = 64;
constexpr std::size_t kMediumBlocks = 16;
constexpr std::size_t kLargeUnits = 48;

struct Block {
  char* pointer = nullptr;
  std::size_t size = 0;
  std::uint64_t seed = 0;
};

// Time spent inside cudaMalloc and cudaFree, and how many calls that was.
struct AllocationTimer {
  double ms = 0;
  unsigned long calls = 0;

  void allocate(char** pointer, std::size_t size) {
    examples::Stopwatch timer;
    CHECK(cudaMalloc(reinterpret_cast<void**>(pointer), size));
    ms += timer.elapsed_ms();
    ++calls;
  }
  void free(char* pointer) {
    examples::Stopwatch timer;
    CHECK(cudaFree(pointer));
    ms += timer.elapsed_ms();
    ++calls;
  }
};

Block allocate_filled(std::size_t size, std::uint64_t seed, std::vector<unsigned char>& host,
                      AllocationTimer& timer) {
  Block block{nullptr, size, seed};
  timer.allocate(&block.pointer, size);
  examples::fill_pattern(host.data(), size, seed);
  CHECK(cudaMemcpy(block.pointer, host.data(), size, cudaMemcpyHostToDevice));
  return block;
}

void verify_and_free(Block& block, std::vector<unsigned char>& host, examples::Checksum& checksum,
                     AllocationTimer& timer, const char* what) {
  CHECK(cudaMemcpy(host.data(), block.pointer, block.size, cudaMemcpyDeviceToHost));
  examples::expect_pattern(host.data(), block.size, block.seed, what);
  checksum.add(host.data(), block.size);
  timer.free(block.pointer);
  block = Block{};
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t unit = examples::parse_argument(argc, argv, 1, "UNIT_MIB") << 20;
  const std::size_t medium = unit + unit / 2;
  std::vector<unsigned char> host(kLargeUnits * unit);
  examples::Checksum checksum;
  AllocationTimer timer;
  examples::Stopwatch total;
  CHECK(cudaSetDevice(0));
  const examples::MemoryInfo before = examples::query_memory_info();

  std::vector<Block> units;
  for (std::size_t i = 0; i < kUnitBlocks; ++i) units.push_back(allocate_filled(unit, 100 + i, host, timer));
  // The address range the unit blocks covered, compared as integers (they are separate objects).
  auto address = [](const char* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); };
  std::uintptr_t span_begin = address(units.front().pointer);
  std::uintptr_t span_end = span_begin + unit;
  for (const Block& block : units) {
    span_begin = std::min(span_begin, address(block.pointer));
    span_end = std::max(span_end, address(block.pointer) + unit);
  }
  for (std::size_t i = 0; i < kUnitBlocks; i += 2) timer.free(units[i].pointer);
  std::printf("fragmentation: %zu blocks of %s, every other one freed: %zu holes of %s\n", kUnitBlocks,
              examples::format_bytes(unit).c_str(), kUnitBlocks / 2, examples::format_bytes(unit).c_str());

  std::vector<Block> mediums;
  for (std::size_t i = 0; i < kMediumBlocks; ++i)
    mediums.push_back(allocate_filled(medium, 200 + i, host, timer));
  std::printf("  %zu blocks of %s requested: none fits a hole\n", kMediumBlocks,
              examples::format_bytes(medium).c_str());

  for (std::size_t i = 1; i < kUnitBlocks; i += 2)
    verify_and_free(units[i], host, checksum, timer, "unit block");
  std::printf("  remaining unit blocks verified and freed: the holes can coalesce into %s\n",
              examples::format_bytes(kUnitBlocks * unit).c_str());
  // A phase boundary, as real programs have: once the device is idle, a pool that holds freed blocks
  // back until then (so the GPU can no longer be using them) may hand them out again.
  CHECK(cudaDeviceSynchronize());

  Block large = allocate_filled(kLargeUnits * unit, 300, host, timer);
  const bool reused = address(large.pointer) >= span_begin && address(large.pointer) + large.size <= span_end;
  std::printf("  a %s block fits, %s\n", examples::format_bytes(large.size).c_str(),
              reused ? "inside the freed range (the holes were coalesced and reused)"
                     : "outside the freed range (the allocator took new memory)");
  const examples::MemoryInfo during = examples::query_memory_info();

  verify_and_free(large, host, checksum, timer, "large block");
  for (Block& block : mediums) verify_and_free(block, host, checksum, timer, "medium block");
  std::printf("  memory a pool must hold: %s if freed neighbours coalesce, %s if not\n",
              examples::format_bytes((kUnitBlocks + kMediumBlocks * 3 / 2) * unit).c_str(),
              examples::format_bytes((kUnitBlocks + kMediumBlocks * 3 / 2 + kLargeUnits) * unit).c_str());
  examples::print_memory_info("at start", before);
  examples::print_memory_info("with the large block", during);
  std::printf("  allocation time: %.3f ms in cudaMalloc/cudaFree (%lu calls)\n", timer.ms, timer.calls);
  std::printf("  total time: %.3f ms\n", total.elapsed_ms());
  checksum.print();
  return 0;
}
