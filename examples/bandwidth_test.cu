// bandwidth_test: host-to-device, device-to-host and device-to-device copy bandwidth for pageable,
// page-locked (cudaMallocHost), write-combined (cudaHostAlloc) and registered (cudaHostRegister)
// host memory, timed with events, in the shape of NVIDIA's bandwidth test sample; with two or more
// devices, peer access between devices 0 and 1 is queried and enabled. Every transfer's data is
// verified. No kernel runs.
//
//   bandwidth_test [SCALE]   transfers of SCALE x 16 MiB (default 1), 10 of each
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "check.h"

namespace {

constexpr int kRepeats = 10;

enum class HostKind { Pageable, Pinned, WriteCombined, Registered };
const char* name_of(HostKind kind) {
  switch (kind) {
    case HostKind::Pageable: return "pageable";
    case HostKind::Pinned: return "pinned";
    case HostKind::WriteCombined: return "write-combined";
    case HostKind::Registered: return "registered";
  }
  return "?";
}

struct HostBuffer {
  HostKind kind;
  std::size_t bytes;
  void* data = nullptr;

  HostBuffer(HostKind k, std::size_t n) : kind(k), bytes(n) {
    switch (kind) {
      case HostKind::Pageable: data = std::malloc(bytes); break;
      case HostKind::Pinned: CHECK(cudaMallocHost(&data, bytes)); break;
      case HostKind::WriteCombined: CHECK(cudaHostAlloc(&data, bytes, cudaHostAllocWriteCombined)); break;
      case HostKind::Registered:
        data = std::malloc(bytes);
        CHECK(cudaHostRegister(data, bytes, cudaHostRegisterDefault));
        break;
    }
    if (data == nullptr) examples::fail("no host memory for %zu bytes", bytes);
  }
  ~HostBuffer() {
    if (kind == HostKind::Pinned || kind == HostKind::WriteCombined) CHECK(cudaFreeHost(data));
    if (kind == HostKind::Registered) CHECK(cudaHostUnregister(data));
    if (kind == HostKind::Pageable || kind == HostKind::Registered) std::free(data);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
};

// GB/s of `repeats` copies of `bytes` that took `ms` (never divided by zero on a platform whose
// events all complete at once).
double bandwidth(std::size_t bytes, int repeats, float ms) {
  const double seconds = (ms > 1e-3f ? ms : 1e-3f) / 1000.0;
  return static_cast<double>(bytes) * repeats / seconds / 1e9;
}

// Times kRepeats copies with events on `stream` (pinned memory) or the legacy stream (pageable).
template <typename Copy>
float timed(cudaStream_t stream, Copy copy) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, stream));
  for (int r = 0; r < kRepeats; ++r) copy();
  CHECK(cudaEventRecord(stop, stream));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms;
}

void measure(HostKind kind, std::size_t bytes, void* device, cudaStream_t stream, examples::Checksum& checksum) {
  HostBuffer host(kind, bytes);
  const bool pageable = kind == HostKind::Pageable;
  const std::uint64_t seed = 100 + static_cast<std::uint64_t>(kind);
  examples::fill_pattern(host.data, bytes, seed);
  const float to_device = timed(stream, [&] {
    if (pageable) CHECK(cudaMemcpy(device, host.data, bytes, cudaMemcpyHostToDevice));
    else CHECK(cudaMemcpyAsync(device, host.data, bytes, cudaMemcpyHostToDevice, stream));
  });
  examples::fill_pattern(host.data, bytes, 0);  // overwritten, so the copy back must restore it
  const float to_host = timed(stream, [&] {
    if (pageable) CHECK(cudaMemcpy(host.data, device, bytes, cudaMemcpyDeviceToHost));
    else CHECK(cudaMemcpyAsync(host.data, device, bytes, cudaMemcpyDeviceToHost, stream));
  });
  CHECK(cudaStreamSynchronize(stream));
  examples::expect_pattern(host.data, bytes, seed, name_of(kind));
  checksum.add(host.data, bytes);
  std::printf("  %-14s host to device: %8.2f GB/s   device to host: %8.2f GB/s\n", name_of(kind),
              bandwidth(bytes, kRepeats, to_device), bandwidth(bytes, kRepeats, to_host));
}

void peer_access(examples::Checksum& checksum) {
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("  peer access: one device only\n");
    return;
  }
  int forward = 0;
  int backward = 0;
  CHECK(cudaDeviceCanAccessPeer(&forward, 0, 1));
  CHECK(cudaDeviceCanAccessPeer(&backward, 1, 0));
  int atomics = 0;
  CHECK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, 0, 1));
  std::printf("  peer access: 0 -> 1 %s, 1 -> 0 %s, native atomics %s\n", forward ? "yes" : "no",
              backward ? "yes" : "no", atomics ? "yes" : "no");
  checksum.add_value(static_cast<std::uint64_t>(forward * 4 + backward * 2 + atomics));
  if (!forward) return;
  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceEnablePeerAccess(1, 0));
  const cudaError_t again = cudaDeviceEnablePeerAccess(1, 0);
  if (again != cudaErrorPeerAccessAlreadyEnabled) examples::fail("enabling peer access twice returned %s", cudaGetErrorName(again));
  (void)cudaGetLastError();  // clears the error just expected
  CHECK(cudaDeviceDisablePeerAccess(1));
  std::printf("  peer access: enabled and disabled from device 0 to device 1\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = (std::size_t{16} << 20) * examples::parse_argument(argc, argv, 1, "SCALE");
  CHECK(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* device = nullptr;
  void* device_copy = nullptr;
  CHECK(cudaMalloc(&device, bytes));
  CHECK(cudaMalloc(&device_copy, bytes));
  std::printf("bandwidth_test: %d transfers of %s each way\n", kRepeats, examples::format_bytes(bytes).c_str());

  examples::Checksum checksum;
  for (HostKind kind : {HostKind::Pageable, HostKind::Pinned, HostKind::WriteCombined, HostKind::Registered})
    measure(kind, bytes, device, stream, checksum);

  const float device_ms = timed(stream, [&] {
    CHECK(cudaMemcpyAsync(device_copy, device, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  HostBuffer back(HostKind::Pinned, bytes);
  CHECK(cudaMemcpy(back.data, device_copy, bytes, cudaMemcpyDeviceToHost));
  examples::expect_pattern(back.data, bytes, 100 + static_cast<std::uint64_t>(HostKind::Registered), "device copy");
  checksum.add(back.data, bytes);
  // Each device-to-device copy reads and writes the bytes, as the NVIDIA sample counts it.
  std::printf("  device to device: %8.2f GB/s\n", 2 * bandwidth(bytes, kRepeats, device_ms));
  peer_access(checksum);

  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(device));
  CHECK(cudaFree(device_copy));
  CHECK(cudaStreamDestroy(stream));
  checksum.print();
  return 0;
}
