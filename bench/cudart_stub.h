// A stand-in for the few CUDA runtime entry points cub's CachingDeviceAllocator calls (cudaMalloc,
// cudaFree, cudaGetDevice, cudaSetDevice, cudaGetLastError and the cudaEvent* calls), for the
// benchmarks that compare allocators without a device. Like FakeRegionSource for the arena, cudaMalloc
// hands out addresses nobody touches (a bump pointer: no memory exists behind them), so neither side
// pays a driver's own time; what each side asks of the driver is counted instead. Single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpumem::bench {

struct StubRuntimeCounters {
  std::uint64_t mallocs = 0;         // cudaMalloc calls that succeeded
  std::uint64_t frees = 0;           // cudaFree calls of a non-null pointer
  std::uint64_t events_created = 0;  // cudaEventCreateWithFlags
  std::uint64_t events_recorded = 0; // cudaEventRecord
  std::size_t held_bytes = 0;        // bytes cudaMalloc'd and not yet freed (while tracking)
  std::size_t peak_held_bytes = 0;
};

// Zeroes the counters. With `track_bytes`, cudaMalloc/cudaFree also keep each block's size so that
// held_bytes and its peak are known (a hash map: leave it off while timing).
void stub_runtime_reset(bool track_bytes);
void stub_runtime_track_bytes(bool track_bytes);
StubRuntimeCounters stub_runtime_counters();

}  // namespace gpumem::bench
