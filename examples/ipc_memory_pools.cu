// ipc_memory_pools: stream-ordered allocations shared with another process through an exportable
// memory pool, in the shape of NVIDIA's stream-ordered allocation IPC sample. The parent creates a
// pool whose memory can be exported as a POSIX file descriptor, allocates four buffers of different
// sizes from it on a stream (cudaMallocFromPoolAsync), fills them, exports the pool
// (cudaMemPoolExportToShareableHandle) and each buffer (cudaMemPoolExportPointer), and starts itself
// again as the child, passing the pool's descriptor over a Unix socket. The child imports the pool
// and the buffers (cudaMemPoolImportFromShareableHandle, cudaMemPoolImportPointer), checks the
// parent's data, overwrites it with its own and frees its imports. The parent checks what the child
// wrote; with two devices it gives device 1 read-write access to the pool (cudaMemPoolSetAccess),
// copies a buffer to device 1 and runs a kernel there that reads the pool directly; then a kernel on
// device 0 increments every buffer. Kernel results are verified unless --no-kernel-check.
//
//   ipc_memory_pools [--no-kernel-check] [SCALE]    SCALE x 256 Ki ints in the largest buffer (default 1)
#include <cstdint>
#include <vector>

#include "check.h"
#include "ipc_socket.h"

namespace {

constexpr int kBuffers = 4;

__global__ void add_one(const int* in, int* out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i] + 1;
}

void launch_add_one(const int* in, int* out, std::size_t n, cudaStream_t stream) {
  add_one<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(in, out, n);
  CHECK(cudaGetLastError());
}

int parent_value(int buffer, std::size_t i) { return static_cast<int>((i * 7919 + 104729 * buffer) % 1000003); }
int child_value(int buffer, std::size_t i) { return parent_value(buffer, i) ^ 0x5a5a5a; }

// What the parent sends the child, with the pool's descriptor.
struct PoolMessage {
  std::uint64_t ints[kBuffers];
  cudaMemPoolPtrExportData exports[kBuffers];
};

void check_ints(const std::vector<int>& seen, int buffer, int (*expected)(int, std::size_t), const char* who) {
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != expected(buffer, i)) {
      examples::fail("%s: buffer %d element %zu is %d, expected %d", who, buffer, i, seen[i], expected(buffer, i));
    }
  }
}

int child(int socket) {
  CHECK(cudaSetDevice(0));
  PoolMessage message{};
  const int pool_fd = examples::receive_message(socket, &message, sizeof message);
  if (pool_fd == -1) examples::fail("child: the pool's descriptor did not come with the message");
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(pool_fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0));
  close(pool_fd);  // the driver keeps what it needs of the pool
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::vector<int>> own(kBuffers);
  for (int b = 0; b < kBuffers; ++b) {
    const std::size_t n = message.ints[b];
    int* data = nullptr;
    CHECK(cudaMemPoolImportPointer(reinterpret_cast<void**>(&data), pool, &message.exports[b]));
    std::vector<int> seen(n);
    CHECK(cudaMemcpyAsync(seen.data(), data, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    check_ints(seen, b, parent_value, "child");
    own[b].resize(n);
    for (std::size_t i = 0; i < n; ++i) own[b][i] = child_value(b, i);
    CHECK(cudaMemcpyAsync(data, own[b].data(), n * sizeof(int), cudaMemcpyHostToDevice, stream));
    // Imports are freed before the exporter frees: the parent frees only after this process ends.
    CHECK(cudaFreeAsync(data, stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaMemPoolDestroy(pool));
  return 0;
}

// With a second device: device 1 gets read-write access to the pool, buffer 0 is copied to device 1
// and back, and a kernel on device 1 reads the pool directly. Returns the number of ints copied.
std::size_t use_from_peer(cudaMemPool_t pool, const int* buffer, std::size_t n, examples::Checksum& checksum,
                          examples::KernelResults& kernel_results) {
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 1;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(cudaMemPoolSetAccess(pool, &access, 1));
  cudaMemAccessFlags granted = cudaMemAccessFlagsProtNone;
  CHECK(cudaMemPoolGetAccess(&granted, pool, &access.location));
  if (granted != cudaMemAccessFlagsProtReadWrite) examples::fail("device 1 has access %d to the pool, not read-write", granted);

  CHECK(cudaSetDevice(1));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int* copy = nullptr;
  int* incremented = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&copy), n * sizeof(int), stream));
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&incremented), n * sizeof(int), stream));
  CHECK(cudaMemcpyPeerAsync(copy, 1, buffer, 0, n * sizeof(int), stream));
  launch_add_one(buffer, incremented, n, stream);  // reads device 0's pool: what the access is for
  std::vector<int> copied(n), computed(n);
  CHECK(cudaMemcpyAsync(copied.data(), copy, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaMemcpyAsync(computed.data(), incremented, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaFreeAsync(copy, stream));
  CHECK(cudaFreeAsync(incremented, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaSetDevice(0));

  check_ints(copied, 0, child_value, "device 1's copy");
  if (kernel_results.checked) {
    for (std::size_t i = 0; i < n; ++i) {
      if (computed[i] != copied[i] + 1) examples::fail("device 1's kernel: element %zu is %d, expected %d", i, computed[i], copied[i] + 1);
    }
  }
  checksum.add(copied.data(), n * sizeof(int));
  kernel_results.add(checksum, computed.data(), n * sizeof(int));
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  const int socket = examples::child_socket(argc, argv);
  if (socket != -1) return child(socket);
  const std::size_t n = (std::size_t{1} << 18) * examples::parse_argument(argc, argv, 1, "SCALE");
  // Sizes from a whole 2 MiB chunk's worth down to one int, so small blocks carved from a shared
  // chunk travel as well as large ones.
  const std::size_t ints[kBuffers] = {n, n / 2 + 17, 3000, 1};

  CHECK(cudaSetDevice(0));
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  if (!supported) examples::fail("device 0 does not support stream-ordered allocation");
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  if ((supported & cudaMemHandleTypePosixFileDescriptor) == 0) {
    examples::fail("device 0's pools cannot be exported as POSIX file descriptors");
  }
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  int peer_capable = 0;
  if (devices >= 2) CHECK(cudaDeviceCanAccessPeer(&peer_capable, 1, 0));

  const cudaMemPoolProps props{.allocType = cudaMemAllocationTypePinned,
                                .handleTypes = cudaMemHandleTypePosixFileDescriptor,
                                .location = {.type = cudaMemLocationTypeDevice, .id = 0}};
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolCreate(&pool, &props));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  PoolMessage message{};
  int* buffers[kBuffers] = {};
  std::vector<std::vector<int>> host(kBuffers);
  std::size_t total = 0;
  for (int b = 0; b < kBuffers; ++b) {
    message.ints[b] = ints[b];
    total += ints[b];
    host[b].resize(ints[b]);
    for (std::size_t i = 0; i < ints[b]; ++i) host[b][i] = parent_value(b, i);
    CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&buffers[b]), ints[b] * sizeof(int), pool, stream));
    CHECK(cudaMemcpyAsync(buffers[b], host[b].data(), ints[b] * sizeof(int), cudaMemcpyHostToDevice, stream));
  }
  // The child may touch the buffers only once their allocations (and the copies) have completed.
  CHECK(cudaStreamSynchronize(stream));
  for (int b = 0; b < kBuffers; ++b) CHECK(cudaMemPoolExportPointer(&message.exports[b], buffers[b]));
  int pool_fd = -1;
  CHECK(cudaMemPoolExportToShareableHandle(&pool_fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));

  examples::Stopwatch stopwatch;
  examples::ChildProcess process = examples::start_child();
  examples::send_message(process.socket, &message, sizeof message, pool_fd);
  close(pool_fd);
  examples::wait_for_child(process);
  const double child_ms = stopwatch.elapsed_ms();

  examples::Checksum checksum;
  for (int b = 0; b < kBuffers; ++b) {
    CHECK(cudaMemcpyAsync(host[b].data(), buffers[b], ints[b] * sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    check_ints(host[b], b, child_value, "from the child");
    checksum.add(host[b].data(), ints[b] * sizeof(int));
  }
  const std::size_t peer_ints = peer_capable ? use_from_peer(pool, buffers[0], ints[0], checksum, kernel_results) : 0;

  std::vector<std::vector<int>> incremented(kBuffers);
  for (int b = 0; b < kBuffers; ++b) {
    launch_add_one(buffers[b], buffers[b], ints[b], stream);
    incremented[b].resize(ints[b]);
    CHECK(cudaMemcpyAsync(incremented[b].data(), buffers[b], ints[b] * sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaFreeAsync(buffers[b], stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  for (int b = 0; b < kBuffers; ++b) {
    if (kernel_results.checked) {
      for (std::size_t i = 0; i < ints[b]; ++i) {
        if (incremented[b][i] != host[b][i] + 1) {
          examples::fail("buffer %d element %zu is %d after the kernel, expected %d", b, i, incremented[b][i], host[b][i] + 1);
        }
      }
    }
    kernel_results.add(checksum, incremented[b].data(), ints[b] * sizeof(int));
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaMemPoolDestroy(pool));

  std::printf("ipc_memory_pools: %d buffers, %zu ints, from an exportable pool shared with a child process (%s), results %s\n",
              kBuffers, total, examples::format_bytes(total * sizeof(int)).c_str(),
              kernel_results.checked ? "verified" : "not checked");
  std::printf("  child imported the pool and %d pointers, checked and rewrote them, freed its imports: %.3f ms\n", kBuffers,
              child_ms);
  if (peer_ints != 0) {
    std::printf("  peer: device 1 given read-write access to the pool; %zu ints copied to device 1 and read there by a kernel\n",
                peer_ints);
  } else {
    std::printf("  peer: no second device that can access device 0, not shown\n");
  }
  kernel_results.print();
  checksum.print();
  return 0;
}
