// The allocation churn shared by alloc_churn (runtime API) and driver_api (driver API): a fixed set
// of slots; each step picks one at random and either verifies and frees the block it holds or fills
// it with a new block of a random size. Only the memory calls differ between the two programs, so
// they are supplied by a `Memory` type:
//   std::uint64_t allocate(std::size_t size);          // device address
//   void release(std::uint64_t address);
//   void upload(std::uint64_t address, const void* data, std::size_t size);
//   void download(void* data, std::uint64_t address, std::size_t size);
// each of which ends the program on any error.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "common.h"

namespace examples {

struct ChurnConfig {
  unsigned long steps = 4000;
  std::size_t slots = 64;
  std::size_t min_size = 64;
  std::size_t max_size = 256 * 1024;
  std::uint64_t seed = 42;
};

struct ChurnResult {
  unsigned long allocations = 0;
  unsigned long frees = 0;
  std::uint64_t bytes_verified = 0;
  std::size_t peak_live_blocks = 0;
  std::uint64_t peak_live_bytes = 0;
  double allocation_ms = 0;  // time inside allocate + release only
  double total_ms = 0;
  Checksum checksum;
};

template <class Memory>
ChurnResult run_churn(Memory& memory, const ChurnConfig& config) {
  // Invariant: a slot with size > 0 holds a live block filled with fill_pattern(seed).
  struct Slot {
    std::uint64_t address = 0;
    std::size_t size = 0;
    std::uint64_t seed = 0;
  };
  std::vector<Slot> slots(config.slots);
  std::vector<unsigned char> host(config.max_size);
  ChurnResult result;
  Rng rng(config.seed);
  Stopwatch total;
  std::size_t live_blocks = 0;
  std::uint64_t live_bytes = 0;

  auto verify_and_free = [&](Slot& slot) {
    memory.download(host.data(), slot.address, slot.size);
    expect_pattern(host.data(), slot.size, slot.seed, "churn block");
    result.checksum.add(host.data(), slot.size);
    result.bytes_verified += slot.size;
    Stopwatch timer;
    memory.release(slot.address);
    result.allocation_ms += timer.elapsed_ms();
    ++result.frees;
    --live_blocks;
    live_bytes -= slot.size;
    slot = Slot{};
  };

  for (unsigned long step = 0; step < config.steps; ++step) {
    Slot& slot = slots[rng.below(slots.size())];
    if (slot.size > 0) {
      verify_and_free(slot);
      continue;
    }
    slot.size = rng.log_uniform(config.min_size, config.max_size);
    slot.seed = config.seed * 1000003 + step;
    Stopwatch timer;
    slot.address = memory.allocate(slot.size);
    result.allocation_ms += timer.elapsed_ms();
    ++result.allocations;
    fill_pattern(host.data(), slot.size, slot.seed);
    memory.upload(slot.address, host.data(), slot.size);
    ++live_blocks;
    live_bytes += slot.size;
    if (live_blocks > result.peak_live_blocks) result.peak_live_blocks = live_blocks;
    if (live_bytes > result.peak_live_bytes) result.peak_live_bytes = live_bytes;
  }
  for (Slot& slot : slots) {
    if (slot.size > 0) verify_and_free(slot);
  }
  result.total_ms = total.elapsed_ms();
  return result;
}

// The summary block both churn programs print (the checksum line is theirs to print last); `api`
// names the calls that were timed.
inline void print_churn_summary(const char* program, const char* api, const ChurnConfig& config,
                                const ChurnResult& result) {
  std::printf("%s: %lu steps over %zu slots, block sizes %s to %s\n", program, config.steps, config.slots,
              format_bytes(config.min_size).c_str(), format_bytes(config.max_size).c_str());
  std::printf("  allocations: %lu, frees: %lu, every block verified (%s)\n", result.allocations, result.frees,
              format_bytes(result.bytes_verified).c_str());
  std::printf("  peak live: %zu blocks, %s\n", result.peak_live_blocks,
              format_bytes(result.peak_live_bytes).c_str());
  const unsigned long calls = result.allocations + result.frees;
  std::printf("  allocation time: %.3f ms in %s (%.2f us per call)\n", result.allocation_ms, api,
              calls ? result.allocation_ms * 1000.0 / static_cast<double>(calls) : 0.0);
  std::printf("  total time: %.3f ms\n", result.total_ms);
}

}  // namespace examples
