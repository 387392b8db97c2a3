// ipc_memory_events: CUDA IPC of device memory and of an event between two processes, in the shape
// of NVIDIA's simple IPC sample. The parent fills a device buffer, exports it (cudaIpcGetMemHandle)
// with an interprocess event (cudaIpcGetEventHandle), and starts itself again as the child, passing
// both handles in hex on the command line. The child opens them, checks the parent's data, writes
// its own block after it, records the event and exits; the parent waits for the child, then for the
// event, checks what the child wrote, and runs a kernel that doubles the child's block in place. The
// doubled values are verified unless --no-kernel-check.
//
//   ipc_memory_events [--no-kernel-check] [SCALE]    SCALE x 256 Ki ints (default 1)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

namespace {

__global__ void double_in_place(int* data, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] *= 2;
}

int value(std::size_t i) { return static_cast<int>((i * 7919) % 100003); }

std::string to_hex(const void* data, std::size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    text += digits[bytes[i] >> 4];
    text += digits[bytes[i] & 15];
  }
  return text;
}

template <typename Handle>
Handle from_hex(const char* text) {
  Handle handle{};
  auto* bytes = reinterpret_cast<unsigned char*>(&handle);
  if (std::strlen(text) != 2 * sizeof handle) examples::fail("a handle of %zu hex digits was expected", 2 * sizeof handle);
  for (std::size_t i = 0; i < sizeof handle; ++i) {
    const auto nibble = [&](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      examples::fail("'%c' is not a hex digit", c);
    };
    bytes[i] = static_cast<unsigned char>(nibble(text[2 * i]) * 16 + nibble(text[2 * i + 1]));
  }
  return handle;
}

// The child: argv = self --child MEM_HANDLE EVENT_HANDLE N
int child(const char* memory_text, const char* event_text, std::size_t n) {
  CHECK(cudaSetDevice(0));
  int* data = nullptr;
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&data), from_hex<cudaIpcMemHandle_t>(memory_text),
                             cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t done = nullptr;
  CHECK(cudaIpcOpenEventHandle(&done, from_hex<cudaIpcEventHandle_t>(event_text)));
  std::vector<int> seen(n);
  CHECK(cudaMemcpy(seen.data(), data, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) {
    if (seen[i] != value(i)) examples::fail("child: element %zu is %d, expected %d", i, seen[i], value(i));
  }
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<int> own(n);
  for (std::size_t i = 0; i < n; ++i) own[i] = value(i) + 1;
  CHECK(cudaMemcpyAsync(data + n, own.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream));
  CHECK(cudaEventRecord(done, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaIpcCloseMemHandle(data));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  if (argc == 5 && std::strcmp(argv[1], "--child") == 0) {
    return child(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10));
  }
  const std::size_t n = (std::size_t{1} << 18) * examples::parse_argument(argc, argv, 1, "SCALE");
  CHECK(cudaSetDevice(0));
  int* data = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&data), 2 * n * sizeof(int)));  // the parent's half, the child's
  std::vector<int> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = value(i);
  CHECK(cudaMemcpy(data, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(data + n, 0, n * sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t memory{};
  CHECK(cudaIpcGetMemHandle(&memory, data));
  cudaEvent_t done = nullptr;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t event{};
  CHECK(cudaIpcGetEventHandle(&event, done));

  examples::Stopwatch stopwatch;
  const std::string memory_text = to_hex(&memory, sizeof memory);
  const std::string event_text = to_hex(&event, sizeof event);
  const std::string count = std::to_string(n);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) examples::fail("fork failed");
  if (pid == 0) {  // a fresh process: CUDA cannot be used across fork
    std::vector<const char*> args{"/proc/self/exe", "--child", memory_text.c_str(), event_text.c_str(), count.c_str(),
                                  nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(args.data()));
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    examples::fail("the child process failed (status %d)", status);
  }
  CHECK(cudaEventSynchronize(done));
  const double child_ms = stopwatch.elapsed_ms();

  std::vector<int> from_child(n);
  CHECK(cudaMemcpy(from_child.data(), data + n, n * sizeof(int), cudaMemcpyDeviceToHost));
  double_in_place<<<static_cast<unsigned>((n + 255) / 256), 256>>>(data + n, n);
  CHECK(cudaGetLastError());
  std::vector<int> doubled(n);
  CHECK(cudaMemcpy(doubled.data(), data + n, n * sizeof(int), cudaMemcpyDeviceToHost));
  examples::Checksum checksum;
  for (std::size_t i = 0; i < n; ++i) {
    if (from_child[i] != value(i) + 1) examples::fail("element %zu from the child is %d, expected %d", i, from_child[i], value(i) + 1);
    if (kernel_results.checked && doubled[i] != 2 * from_child[i]) {
      examples::fail("element %zu is %d after the kernel, expected %d", i, doubled[i], 2 * from_child[i]);
    }
  }
  checksum.add(from_child.data(), n * sizeof(int));
  kernel_results.add(checksum, doubled.data(), n * sizeof(int));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaFree(data));

  std::printf("ipc_memory_events: %zu ints shared with a child process (%s), results %s\n", n,
              examples::format_bytes(n * sizeof(int)).c_str(), kernel_results.checked ? "verified" : "not checked");
  std::printf("  child opened the memory and the event, wrote its half, recorded the event: %.3f ms\n", child_ms);
  kernel_results.print();
  checksum.print();
  return 0;
}
