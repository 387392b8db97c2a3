// torch.multiprocessing's shape of CUDA IPC: the producer's caching allocator holds a segment (one
// cudaMalloc block), a tensor lives at an offset inside it; the producer exports the segment's base
// with cudaIpcGetMemHandle and sends the offset beside the handle; the consumer (a fresh process)
// opens the handle and reads the tensor at base + offset. The tensor's own block is exported too (a
// block gpumem serves from inside a region). The consumer writes its reply through a third handle,
// of the allocation start the driver gives for the reply's address (cuMemGetAddressRange), with the
// offset from it, as Numba and vLLM share memory they did not allocate. Prints `key=value` lines;
// exits 0 when every step behaved as documented, 3 on an unexpected CUDA error, 4 on wrong data.
//
//   producer          the whole exchange, then a handle of a freed block opened by a fresh process
//   consumer HANDLE OFFSET BLOCK_HANDLE RANGE_HANDLE RANGE_OFFSET   (started by the producer)
//   open HANDLE [N]   opens a handle (N times) and prints open=<error name> of the first (a handle of a
//                     process that exited), and with N, opens_refused=<count>
//   export-and-exit   allocates, exports, prints handle=<hex>, exits without freeing
//   export-and-wait   the same, but exits (still without freeing) only once its stdin closes
//   export-and-reset  exports, resets the device (the context and its memory go), then a fresh
//                     process opens the handle
//   peer-read HANDLE  opens a segment handle on device 0, queues on a stream of device 1 (peer access
//                     enabled) a wait for a host function, then a copy of the tensor out of the
//                     segment; closes the handle while that copy waits, then lets it run (from another
//                     thread, 200 ms later) and checks what it copied: a close waits for queued work, as
//                     the driver's does, so the copy reads the tensor, not unmapped memory
//   peer-read-capturing HANDLE   the same, the close made while another stream captures a graph;
//                     then the handle opened and closed again outside the capture
//   hold HANDLE       opens a segment handle, checks the tensor, waits for its stdin to close (the
//                     exporter may exit meanwhile), checks the tensor again, closes
// IPC_SEGMENT_BYTES (bytes, at least the 4 MiB default) sets the size of the segment the producer exports.
// IPC_FRAGMENT_BLOCKS=N: before the segment, N blocks of 8 MiB, each set to its own byte, with every
// other one from the fourth on freed; the producer checks at the end that the kept ones still hold
// their bytes (kept=ok). Over a preallocated VMM arena they nearly fill, the segment then needs idle
// granules of pieces that also hold live blocks, mapped a second time (lent).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ipc_support.h"
#include "runtime_check.h"

using namespace ipc_test;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kWorkspaceBytes = 256 * kKiB;  // allocated first, so the segment is not at a region's start
constexpr std::size_t kSegmentBytes = 4 * kMiB;  // IPC_SEGMENT_BYTES (bytes) makes it larger
constexpr std::size_t kTensorOffset = kMiB + 768;
constexpr std::size_t kTensorBytes = 64 * kKiB + 3;
constexpr std::size_t kReplyOffset = 2 * kMiB + 4;
constexpr std::size_t kReplyBytes = 4096;
constexpr std::size_t kBlockBytes = 1000;
constexpr std::size_t kFragmentBytes = 8 * kMiB;

// IPC_FRAGMENT_BLOCKS's blocks that stay allocated, and the byte each holds.
std::vector<std::pair<void*, unsigned char>> kept_fragments;

bool same_bytes(const void* device, const std::vector<std::uint8_t>& expected) {
  std::vector<std::uint8_t> read(expected.size());
  CHECK_CUDA(cudaMemcpy(read.data(), device, read.size(), cudaMemcpyDeviceToHost));
  return read == expected;
}

void* offset(void* base, std::size_t bytes) { return static_cast<char*>(base) + bytes; }

int fail(const char* what) {
  std::printf("%s=wrong\n", what);
  return 4;
}

int consumer(const std::string& segment_hex, const std::string& tensor_offset, const std::string& block_hex,
             const std::string& range_hex, const std::string& reply_offset) {
  cudaIpcMemHandle_t segment_handle{}, block_handle{}, range_handle{};
  if (!handle_from_hex(segment_hex, segment_handle, "consumer") ||
      !handle_from_hex(block_hex, block_handle, "consumer") || !handle_from_hex(range_hex, range_handle, "consumer")) {
    return 2;
  }
  CHECK_CUDA(cudaSetDevice(0));
  void* segment = nullptr;
  CHECK_CUDA(cudaIpcOpenMemHandle(&segment, segment_handle, cudaIpcMemLazyEnablePeerAccess));
  void* tensor = offset(segment, std::strtoull(tensor_offset.c_str(), nullptr, 10));
  if (!same_bytes(tensor, pattern(kTensorBytes, 11))) return fail("tensor");
  std::printf("tensor=ok\n");
  void* again = nullptr;  // opened twice by one context: the same pointer, counted
  CHECK_CUDA(cudaIpcOpenMemHandle(&again, segment_handle, cudaIpcMemLazyEnablePeerAccess));
  std::printf("same_pointer=%d\n", again == segment ? 1 : 0);
  CHECK_CUDA(cudaIpcCloseMemHandle(again));
  void* block = nullptr;
  CHECK_CUDA(cudaIpcOpenMemHandle(&block, block_handle, cudaIpcMemLazyEnablePeerAccess));
  if (!same_bytes(block, pattern(kBlockBytes, 23))) return fail("block");
  std::printf("block=ok\n");
  // Closing the block must leave the segment mapped (both may lie in one region).
  CHECK_CUDA(cudaIpcCloseMemHandle(block));
  // The segment's own handle, or its region's, which the program opens itself: closing it first
  // must leave the segment (a block of that region opened from a token) mapped.
  void* range = nullptr;
  CHECK_CUDA(cudaIpcOpenMemHandle(&range, range_handle, cudaIpcMemLazyEnablePeerAccess));
  const auto reply = pattern(kReplyBytes, 77);
  CHECK_CUDA(cudaMemcpy(offset(range, std::strtoull(reply_offset.c_str(), nullptr, 10)), reply.data(), reply.size(),
                        cudaMemcpyHostToDevice));
  // Seen through the segment too: past its first 2 MiB (in a VMM arena, another mapping).
  if (!same_bytes(offset(segment, kReplyOffset), reply)) return fail("reply_in_segment");
  CHECK_CUDA(cudaIpcCloseMemHandle(range));
  if (!same_bytes(tensor, pattern(kTensorBytes, 11))) return fail("tensor_after_close");
  CHECK_CUDA(cudaIpcCloseMemHandle(segment));
  return 0;
}

// Prints open=<error name> of the first open, and opens_refused=<count> of `times` opens.
int open_handle(const std::string& hex, int times) {
  cudaIpcMemHandle_t handle{};
  if (!handle_from_hex(hex, handle, "open")) return 2;
  CHECK_CUDA(cudaSetDevice(0));
  int refused = 0;
  for (int i = 0; i < times; ++i) {
    void* ptr = nullptr;
    const cudaError_t opened = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
    if (i == 0) std::printf("open=%s\n", cudaGetErrorName(opened));
    if (opened == cudaSuccess) {
      CHECK_CUDA(cudaIpcCloseMemHandle(ptr));
    } else {
      ++refused;
    }
  }
  if (times > 1) std::printf("opens_refused=%d\n", refused);
  return 0;
}

// IPC_FRAGMENT_BLOCKS's blocks: allocated, set, every other one from the fourth on freed.
void fragment() {
  const char* count = std::getenv("IPC_FRAGMENT_BLOCKS");
  if (count == nullptr) return;
  for (unsigned long index = 0, blocks = std::strtoul(count, nullptr, 10); index < blocks; ++index) {
    void* block = nullptr;
    CHECK_CUDA(cudaMalloc(&block, kFragmentBytes));
    const auto byte = static_cast<unsigned char>(index + 1);
    CHECK_CUDA(cudaMemset(block, byte, kFragmentBytes));
    if (index >= 3 && index % 2 == 1) {
      CHECK_CUDA(cudaFree(block));
    } else {
      kept_fragments.emplace_back(block, byte);
    }
  }
}

// Whether IPC_FRAGMENT_BLOCKS's kept blocks still hold their bytes (freed afterwards).
bool fragments_kept() {
  bool kept = true;
  for (const auto& [block, byte] : kept_fragments) {
    kept = kept && same_bytes(block, std::vector<std::uint8_t>(kFragmentBytes, byte));
    CHECK_CUDA(cudaFree(block));
  }
  return kept;
}

// The segment after a workspace, filled with the tensor's pattern, and its handle.
void* make_segment(cudaIpcMemHandle_t* handle, cudaError_t* exported) {
  void *workspace = nullptr, *segment = nullptr;
  fragment();
  CHECK_CUDA(cudaMalloc(&workspace, kWorkspaceBytes));
  const char* bytes = std::getenv("IPC_SEGMENT_BYTES");
  const std::size_t segment_bytes = bytes != nullptr ? std::max<std::size_t>(std::strtoull(bytes, nullptr, 10), kSegmentBytes)
                                                     : kSegmentBytes;
  CHECK_CUDA(cudaMalloc(&segment, segment_bytes));
  const auto tensor = pattern(kTensorBytes, 11);
  CHECK_CUDA(cudaMemcpy(offset(segment, kTensorOffset), tensor.data(), tensor.size(), cudaMemcpyHostToDevice));
  *exported = cudaIpcGetMemHandle(handle, segment);
  return segment;
}

int producer() {
  CHECK_CUDA(cudaSetDevice(0));
  cudaIpcMemHandle_t segment_handle{}, block_handle{};
  cudaError_t exported = cudaSuccess;
  void* segment = make_segment(&segment_handle, &exported);
  std::printf("export=%s\n", cudaGetErrorName(exported));
  if (exported != cudaSuccess) return 0;  // the caller decides whether that was expected
  void* block = nullptr;
  CHECK_CUDA(cudaMalloc(&block, kBlockBytes));
  const auto block_data = pattern(kBlockBytes, 23);
  CHECK_CUDA(cudaMemcpy(block, block_data.data(), block_data.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaIpcGetMemHandle(&block_handle, block));
  // The allocation holding the reply's address, as the driver answers it, and the reply's offset in it.
  const auto address_range = driver_entry<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange");
  const auto reply_address = reinterpret_cast<CUdeviceptr>(offset(segment, kReplyOffset));
  CUdeviceptr range_start = 0;
  if (address_range(&range_start, nullptr, reply_address) != CUDA_SUCCESS) return fail("address_range");
  cudaIpcMemHandle_t range_handle{};
  CHECK_CUDA(cudaIpcGetMemHandle(&range_handle, reinterpret_cast<void*>(range_start)));
  // A process cannot open its own handle.
  void* own = nullptr;
  std::printf("own_open=%s\n", cudaGetErrorName(cudaIpcOpenMemHandle(&own, segment_handle, cudaIpcMemLazyEnablePeerAccess)));
  CHECK_CUDA(cudaDeviceSynchronize());  // the data has landed before another process reads it
  std::fflush(stdout);

  const int consumed = wait_exit(spawn_self({"consumer", to_hex(&segment_handle, sizeof segment_handle),
                                             std::to_string(kTensorOffset), to_hex(&block_handle, sizeof block_handle),
                                             to_hex(&range_handle, sizeof range_handle),
                                             std::to_string(reply_address - range_start)}));
  std::printf("consumer_exit=%d\n", consumed);
  if (!same_bytes(offset(segment, kReplyOffset), pattern(kReplyBytes, 77))) return fail("reply");
  std::printf("reply=ok\n");
  // A freed block's handle no longer opens, in any process.
  CHECK_CUDA(cudaFree(block));
  std::fflush(stdout);
  const int stale = wait_exit(spawn_self({"open", to_hex(&block_handle, sizeof block_handle)}));
  std::printf("stale_exit=%d\n", stale);
  CHECK_CUDA(cudaFree(segment));
  if (!kept_fragments.empty()) {
    if (!fragments_kept()) return fail("kept");
    std::printf("kept=ok\n");
  }
  return 0;
}

void wait_for_stdin_to_close() {
  char ignored[64];
  while (read(0, ignored, sizeof ignored) > 0) {
  }
}

enum class AfterExport : std::uint8_t { exit, wait_for_stdin, reset_then_open };

int export_segment(AfterExport after) {
  CHECK_CUDA(cudaSetDevice(0));
  cudaIpcMemHandle_t handle{};
  cudaError_t exported = cudaSuccess;
  make_segment(&handle, &exported);
  CHECK_CUDA(exported);
  if (after == AfterExport::reset_then_open) {  // the context and its memory go first
    CHECK_CUDA(cudaDeviceReset());
    std::printf("open_exit=%d\n", wait_exit(spawn_self({"open", to_hex(&handle, sizeof handle)})));
    return 0;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("handle=%s\n", to_hex(&handle, sizeof handle).c_str());
  std::fflush(stdout);
  if (after == AfterExport::wait_for_stdin) wait_for_stdin_to_close();
  return 0;
}

int hold(const std::string& hex) {
  cudaIpcMemHandle_t handle{};
  if (!handle_from_hex(hex, handle, "hold")) return 2;
  CHECK_CUDA(cudaSetDevice(0));
  void* segment = nullptr;
  CHECK_CUDA(cudaIpcOpenMemHandle(&segment, handle, cudaIpcMemLazyEnablePeerAccess));
  if (!same_bytes(offset(segment, kTensorOffset), pattern(kTensorBytes, 11))) return fail("opened");
  std::printf("opened=ok\n");
  std::fflush(stdout);
  wait_for_stdin_to_close();
  if (!same_bytes(offset(segment, kTensorOffset), pattern(kTensorBytes, 11))) return fail("held");
  std::printf("held=ok\n");
  CHECK_CUDA(cudaIpcCloseMemHandle(segment));
  return 0;
}

std::atomic<bool> g_copy_may_run{false};

void CUDART_CB wait_until_released(void*) {
  while (!g_copy_may_run.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

int peer_read(const std::string& hex, bool capturing) {
  cudaIpcMemHandle_t handle{};
  if (!handle_from_hex(hex, handle, "peer-read")) return 2;
  CHECK_CUDA(cudaSetDevice(0));
  void* segment = nullptr;
  CHECK_CUDA(cudaIpcOpenMemHandle(&segment, handle, cudaIpcMemLazyEnablePeerAccess));
  CHECK_CUDA(cudaSetDevice(1));
  CHECK_CUDA(cudaDeviceEnablePeerAccess(0, 0));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::uint8_t> copied(kTensorBytes);
  CHECK_CUDA(cudaLaunchHostFunc(stream, wait_until_released, nullptr));
  CHECK_CUDA(cudaMemcpyAsync(copied.data(), offset(segment, kTensorOffset), kTensorBytes, cudaMemcpyDefault, stream));
  std::thread release([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g_copy_may_run.store(true);
  });
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t captured = nullptr;
  if (capturing) {  // the close comes while a graph is captured (relaxed: other threads may call on)
    CHECK_CUDA(cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamBeginCapture(captured, cudaStreamCaptureModeRelaxed));
  }
  CHECK_CUDA(cudaIpcCloseMemHandle(segment));
  if (capturing) {
    cudaGraph_t graph = nullptr;
    CHECK_CUDA(cudaStreamEndCapture(captured, &graph));
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_CUDA(cudaStreamDestroy(captured));
  }
  release.join();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  if (copied != pattern(kTensorBytes, 11)) return fail("peer_read");
  if (capturing) {
    // A later close, outside any capture, frees what the captured one left (and this one's).
    void* again = nullptr;
    CHECK_CUDA(cudaIpcOpenMemHandle(&again, handle, cudaIpcMemLazyEnablePeerAccess));
    if (!same_bytes(offset(again, kTensorOffset), pattern(kTensorBytes, 11))) return fail("peer_read_again");
    CHECK_CUDA(cudaIpcCloseMemHandle(again));
  }
  std::printf("peer_read=ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "producer" && argc == 2) return producer();
  if (role == "consumer" && argc == 7) return consumer(argv[2], argv[3], argv[4], argv[5], argv[6]);
  if (role == "open" && (argc == 3 || argc == 4)) return open_handle(argv[2], argc == 4 ? std::atoi(argv[3]) : 1);
  if (role == "export-and-exit" && argc == 2) return export_segment(AfterExport::exit);
  if (role == "export-and-wait" && argc == 2) return export_segment(AfterExport::wait_for_stdin);
  if (role == "export-and-reset" && argc == 2) return export_segment(AfterExport::reset_then_open);
  if (role == "hold" && argc == 3) return hold(argv[2]);
  if (role == "peer-read" && argc == 3) return peer_read(argv[2], false);
  if (role == "peer-read-capturing" && argc == 3) return peer_read(argv[2], true);
  std::fprintf(stderr,
               "usage: %s producer | consumer HANDLE OFFSET BLOCK_HANDLE RANGE_HANDLE RANGE_OFFSET | open HANDLE [N] | "
               "export-and-exit | export-and-wait | export-and-reset | hold HANDLE | peer-read[-capturing] HANDLE\n",
               argv[0]);
  return 2;
}
