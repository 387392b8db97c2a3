// The simulator's configuration, read once from CUDASIM_* environment variables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driver_latency.h"

namespace cudasim {

constexpr int kDefaultDriverVersion = 13000;
constexpr int kOldestDriverVersion = 12000;

// CUDASIM_DRIVER_VERSION: a CUDA version number (1000 x major + 10 x minor) from 12000 to 13000.
std::optional<int> parse_driver_version(std::string_view text);

// What a kernel launch does (CUDASIM_KERNELS): the simulator never runs device code, so a launch is
// either queued and completed as a no-op on its stream (Skip) or refused (Fail).
enum class KernelLaunches { Skip, Fail };

// Invariant: when `valid`, device_memory.size() == device_count >= 1 and every entry > 0, and
// `visible` holds distinct numbers below device_count.
struct Config {
  bool valid = true;
  int device_count = 1;                      // every simulated device (CUDASIM_DEVICES)
  std::vector<std::uint64_t> device_memory;  // by device number
  // The devices CUDA sees, by number, in CUDA ordinal order (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER);
  // empty: none (cuInit answers CUDA_ERROR_NO_DEVICE).
  std::vector<int> visible;
  std::uint64_t context_overhead = 300ull << 20;
  std::uint64_t alloc_latency_us = 0;
  std::uint64_t free_latency_us = 0;
  DriverLatency latency;  // CUDASIM_LATENCY: what each call sleeps besides; none by default
  std::optional<std::uint64_t> fail_alloc_after;  // allocations allowed before failing
  KernelLaunches kernels = KernelLaunches::Skip;   // CUDASIM_KERNELS
  bool peer_access = true;                         // CUDASIM_PEER_ACCESS: all device pairs are peers
  // CUDASIM_VMM: bit N set when device N (physical number) supports virtual memory management.
  std::uint64_t vmm_devices = ~std::uint64_t{0};
  std::string report_path;                         // empty: no report
  std::string shared_devices_dir;                  // CUDASIM_SHARED_DEVICES: empty, devices are this process's
  int driver_version = kDefaultDriverVersion;      // what cuDriverGetVersion reports (CUDASIM_DRIVER_VERSION)
};

// Whether physical device `physical` supports virtual memory management (CUDASIM_VMM).
inline bool supports_vmm(const Config& config, int physical) {
  return physical >= 0 && physical < 64 && (config.vmm_devices >> physical & 1) != 0;
}

// "16G", "512MiB", "300 MB", "4096" (bytes). Units are binary (K = 1024). nullopt when malformed.
std::optional<std::uint64_t> parse_size(std::string_view text);

// The devices CUDA_VISIBLE_DEVICES selects among `count` (nullptr: the variable is unset, all of them),
// as the driver reads it: comma-separated entries, each a device number or a UUID ("GPU-" optional,
// any prefix long enough to name one device); the first entry naming no device (or one already
// listed) ends the list.
std::vector<int> visible_devices(const char* list, int count);

// Reads the environment. A malformed variable yields valid == false after one line on stderr
// naming the variable and what it expects.
Config read_config();

// Whether device `peer` can access device `device`'s memory (cuDeviceCanAccessPeer; numbers are
// physical or ordinal alike, as every pair is treated the same): every distinct pair unless
// CUDASIM_PEER_ACCESS=none; a device is never its own peer.
inline bool devices_are_peers(const Config& config, int device, int peer) { return config.peer_access && device != peer; }

}  // namespace cudasim
