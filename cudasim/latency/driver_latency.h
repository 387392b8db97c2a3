// How long NVIDIA's driver takes per call, as published measurements put it: the simulator sleeps
// that long in each call when asked (CUDASIM_LATENCY), and gpumem-replay and the benchmarks turn the
// driver calls an arena makes into modelled time in the driver. The simulator otherwise answers for
// free, which would hide what an allocator costs in the driver.
//
// Figures, microseconds per call (cudasim/README.md, "Driver latency", has the sources in full):
//   cuMemCreate 193.32, cuMemMap 1.45, cuMemSetAccess 35.99, cuMemUnmap 25.63 (averages of 4096
//   calls on 2 MiB pages, one thread), cuMemAddressReserve 19 (one reservation of 8 GB): measured on
//   an A100 by the kvcached project (github.com/ovg-project/kvcached, benchmarks/bench_vmm/README.md).
//   cuMemAlloc 50: "a relatively constant overhead of about 50 microseconds" from 4 KB to 512 KB
//   (www.cs.virginia.edu/~mwb7w/cuda_support/memory_management_overhead.html, an older GPU).
//   Not measured in any source found, so assumed, and said so wherever they are used: cuMemFree as
//   cuMemAlloc (it also waits for the device, which an idle device makes free), cuMemRelease as
//   cuMemUnmap, cuMemAddressFree as cuMemAddressReserve, cuMemRetainAllocationHandle as cuMemMap.
//   Per call, whatever the size: PyTorch's allocator notes that mapping cost grows with the number
//   of physical allocations, not their size.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cudasim {

enum class TimedCall : std::size_t {
  mem_alloc,
  mem_free,
  address_reserve,
  address_free,
  mem_create,
  mem_map,
  mem_set_access,
  mem_unmap,
  mem_release,
  retain_allocation_handle,
  count
};

inline constexpr std::array<std::string_view, static_cast<std::size_t>(TimedCall::count)> kTimedCallNames{
    "cuMemAlloc", "cuMemFree", "cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate",
    "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemRelease", "cuMemRetainAllocationHandle"};

// Microseconds per call, by TimedCall.
struct DriverLatency {
  std::array<double, static_cast<std::size_t>(TimedCall::count)> us{};
  double of(TimedCall call) const noexcept { return us[static_cast<std::size_t>(call)]; }
};

// The published figures above.
inline constexpr DriverLatency kPublishedLatency{{50.0, 50.0, 19.0, 19.0, 193.32, 1.45, 35.99, 25.63, 25.63, 1.45}};
// Whether a call's figure is assumed rather than measured.
inline constexpr std::array<bool, static_cast<std::size_t>(TimedCall::count)> kAssumedLatency{
    false, true, false, true, false, false, false, false, true, true};

// Reads a latency model: comma-separated items, each "published" (the figures above), "none" (every
// call free; the start) or NAME=MICROSECONDS (one call's figure, NAME from kTimedCallNames, a
// decimal number of 0 to 10^6). "published,cuMemCreate=100". nullopt with `error` saying what was
// wrong.
inline std::optional<DriverLatency> parse_driver_latency(std::string_view text, std::string& error) {
  DriverLatency latency{};
  if (text.empty()) {
    error = "expected published, none or NAME=MICROSECONDS items, got nothing";
    return std::nullopt;
  }
  while (true) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "published") {
      latency = kPublishedLatency;
    } else if (item == "none") {
      latency = DriverLatency{};
    } else {
      const std::size_t equals = item.find('=');
      const std::string_view name = item.substr(0, equals);
      std::size_t index = 0;
      while (index < kTimedCallNames.size() && kTimedCallNames[index] != name) ++index;
      double us = -1.0;
      const std::string_view value = equals == std::string_view::npos ? std::string_view() : item.substr(equals + 1);
      const auto [end, status] = std::from_chars(value.data(), value.data() + value.size(), us);
      if (equals == std::string_view::npos || index == kTimedCallNames.size() || value.empty() ||
          status != std::errc{} || end != value.data() + value.size() || !(us >= 0.0 && us <= 1e6)) {
        error = "expected published, none or NAME=MICROSECONDS (NAME one of cuMemAlloc, cuMemFree, "
                "cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, "
                "cuMemRelease, cuMemRetainAllocationHandle; 0 to 1000000), got \"" + std::string(item) + "\"";
        return std::nullopt;
      }
      latency.us[index] = us;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return latency;
}

}  // namespace cudasim
