// Large blocks shared with legacy IPC, driven one command at a time so that a test can count each
// process's open descriptors between steps (test_ipc.py, DescriptorBound). Reads one command per line
// on stdin and answers with one `key=value` line on stdout; exits 0 at `quit` or end of input, 2 on a
// command it does not know, 3 on an unexpected CUDA error.
//
//   exporter   alloc BYTES [nomark]  allocates a block and marks it (16 bytes every 2 MiB and at its
//                                end, each a pattern of the block's number and the mark's; not with
//                                nomark, which queues no work on any stream): block=<number>
//              export NUMBER     cudaIpcGetMemHandle: handle=<hex>, or export=<error name>
//              free NUMBER       cudaFree: free=<error name>
//              churn N           N rounds of cudaMalloc and cudaFree of 1 to 8 MiB, the last round's
//                                blocks kept until the end, which grows the arena:
//                                churn_ms=<milliseconds>
//              fork-export BYTES a forked child (through the driver API, on a context of its own)
//                                allocates and marks block 1000 of BYTES and exports it:
//                                child=<pid> and child_handle=<hex> on two lines (or child=<pid> and
//                                child_export=<error>); it waits for fork-end
//              fork-end          lets the child go: child_exit=<status>
//              pthread-exit      says bye=1, then ends the main thread with pthread_exit: the process
//                                ends once no other thread is left
//   importer   open HEX NUMBER BYTES   cudaIpcOpenMemHandle: open=<error name>, then (opened) the marks
//                                      of block NUMBER of BYTES checked: data=ok or data=wrong
//              close             cudaIpcCloseMemHandle of what is open: close=<error name>
//   both       init              a context on device 0: init=ok
//              quit
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "ipc_support.h"
#include "runtime_check.h"

using namespace ipc_test;

namespace {

constexpr std::size_t kMiB = 1024 * 1024;
constexpr std::size_t kMarkEvery = 2 * kMiB;
constexpr std::size_t kMarkBytes = 16;

// Where block `bytes` is marked: every kMarkEvery bytes from its start, and its last kMarkBytes.
std::vector<std::size_t> mark_offsets(std::size_t bytes) {
  std::vector<std::size_t> offsets;
  for (std::size_t at = 0; at + kMarkBytes <= bytes; at += kMarkEvery) offsets.push_back(at);
  if (bytes >= kMarkBytes) offsets.push_back(bytes - kMarkBytes);
  return offsets;
}

std::vector<std::uint8_t> mark(unsigned block, std::size_t index) {
  return pattern(kMarkBytes, block * 7919u + static_cast<unsigned>(index));
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

constexpr int kNextCommand = -1;    // a handler's answer: read the next command
constexpr int kUnknownCommand = -2;

// Reads one command a line until `quit` or the end of input: `init` here, the others through
// `handle(command, words)`, which answers kNextCommand, kUnknownCommand or the status to exit with.
template <typename Handler>
int serve_commands(const char* role, Handler&& handle) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command;
    words >> command;
    if (command == "quit") return 0;
    if (command == "init") {
      CHECK_CUDA(cudaSetDevice(0));
      CHECK_CUDA(cudaFree(nullptr));
      say("init=ok");
      continue;
    }
    const int status = handle(command, words);
    if (status == kUnknownCommand) {
      std::fprintf(stderr, "%s: unknown command \"%s\"\n", role, line.c_str());
      return 2;
    }
    if (status != kNextCommand) return status;
  }
  return 0;
}

// The forked child of fork-export: a context of its own through the driver API (the runtime's state is
// the parent's), block 1000 marked and exported; waits until `release` closes.
[[noreturn]] void export_from_child(std::size_t bytes, int release, int report) {
  const auto check = [](CUresult result, const char* what) {
    if (result == CUDA_SUCCESS) return;
    std::fprintf(stderr, "child: %s -> %d\n", what, static_cast<int>(result));
    _exit(3);
  };
  CUdevice device = 0;
  CUcontext context = nullptr;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUdeviceptr block = 0;
  check(cuMemAlloc(&block, bytes), "cuMemAlloc");
  const auto offsets = mark_offsets(bytes);
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    const auto data = mark(1000, i);
    check(cuMemcpyHtoD(block + offsets[i], data.data(), data.size()), "cuMemcpyHtoD");
  }
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  CUipcMemHandle handle{};
  const CUresult exported = cuIpcGetMemHandle(&handle, block);
  const std::string line = exported == CUDA_SUCCESS
      ? "child=" + std::to_string(getpid()) + "\nchild_handle=" + to_hex(&handle, sizeof handle) + "\n"
      : "child=" + std::to_string(getpid()) + "\nchild_export=" + std::to_string(static_cast<int>(exported)) + "\n";
  write_all(report, line.data(), line.size());
  char ignored = 0;
  while (read(release, &ignored, 1) > 0) {
  }
  _exit(0);
}

int exporter() {
  std::vector<void*> blocks;
  pid_t child = -1;
  int release_child = -1;
  return serve_commands("exporter", [&](const std::string& command, std::istringstream& words) {
    if (command == "alloc") {
      std::size_t bytes = 0;
      std::string unmarked;
      words >> bytes >> unmarked;
      void* block = nullptr;
      CHECK_CUDA(cudaMalloc(&block, bytes));
      const auto offsets = unmarked == "nomark" ? std::vector<std::size_t>{} : mark_offsets(bytes);
      for (std::size_t i = 0; i < offsets.size(); ++i) {
        const auto data = mark(static_cast<unsigned>(blocks.size()), i);
        CHECK_CUDA(cudaMemcpy(static_cast<char*>(block) + offsets[i], data.data(), data.size(), cudaMemcpyHostToDevice));
      }
      CHECK_CUDA(cudaDeviceSynchronize());
      blocks.push_back(block);
      say("block=" + std::to_string(blocks.size() - 1));
    } else if (command == "export") {
      std::size_t number = 0;
      words >> number;
      cudaIpcMemHandle_t handle{};
      const cudaError_t exported = number < blocks.size() ? cudaIpcGetMemHandle(&handle, blocks[number])
                                                          : cudaErrorInvalidValue;
      say(exported == cudaSuccess ? "handle=" + to_hex(&handle, sizeof handle)
                                  : std::string("export=") + cudaGetErrorName(exported));
    } else if (command == "free") {
      std::size_t number = 0;
      words >> number;
      const cudaError_t freed = number < blocks.size() ? cudaFree(blocks[number]) : cudaErrorInvalidValue;
      say(std::string("free=") + cudaGetErrorName(freed));
    } else if (command == "churn") {
      int rounds = 0;
      words >> rounds;
      const auto start = std::chrono::steady_clock::now();
      std::vector<void*> kept;
      for (int round = 0; round < rounds; ++round) {
        void* block = nullptr;
        CHECK_CUDA(cudaMalloc(&block, (1 + round % 8) * kMiB));
        if (round + 8 >= rounds) {
          kept.push_back(block);
        } else {
          CHECK_CUDA(cudaFree(block));
        }
      }
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      for (void* block : kept) CHECK_CUDA(cudaFree(block));
      say("churn_ms=" + std::to_string(took.count()));
    } else if (command == "fork-export") {
      std::size_t bytes = 0;
      words >> bytes;
      int release[2], report[2];
      if (pipe2(release, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) return 3;
      std::fflush(stdout);
      child = fork();
      if (child < 0) return 3;
      if (child == 0) {
        close(release[1]);
        close(report[0]);
        export_from_child(bytes, release[0], report[1]);
      }
      close(release[0]);
      close(report[1]);
      release_child = release[1];
      std::string reported;
      char byte = 0;
      int lines = 0;
      while (lines < 2 && read(report[0], &byte, 1) == 1) {
        if (byte == '\n') ++lines;
        reported += byte;
      }
      close(report[0]);
      if (lines < 2) reported = "child=" + std::to_string(child) + "\nchild_export=none\n";
      std::fputs(reported.c_str(), stdout);
      std::fflush(stdout);
    } else if (command == "fork-end") {
      if (release_child >= 0) close(release_child);
      release_child = -1;
      say("child_exit=" + std::to_string(wait_exit(child)));
    } else if (command == "pthread-exit") {
      say("bye=1");
      pthread_exit(nullptr);
    } else {
      return kUnknownCommand;
    }
    return kNextCommand;
  });
}

int importer() {
  void* opened = nullptr;
  return serve_commands("importer", [&](const std::string& command, std::istringstream& words) {
    if (command == "open") {
      std::string hex;
      unsigned number = 0;
      std::size_t bytes = 0;
      words >> hex >> number >> bytes;
      cudaIpcMemHandle_t handle{};
      if (!handle_from_hex(hex, handle, "importer")) return 2;
      const cudaError_t result = cudaIpcOpenMemHandle(&opened, handle, cudaIpcMemLazyEnablePeerAccess);
      say(std::string("open=") + cudaGetErrorName(result));
      if (result != cudaSuccess) {
        opened = nullptr;
        return kNextCommand;
      }
      const auto offsets = mark_offsets(bytes);
      bool right = true;
      for (std::size_t i = 0; i < offsets.size() && right; ++i) {
        std::vector<std::uint8_t> read(kMarkBytes);
        CHECK_CUDA(cudaMemcpy(read.data(), static_cast<char*>(opened) + offsets[i], read.size(), cudaMemcpyDeviceToHost));
        right = read == mark(number, i);
      }
      say(right ? "data=ok" : "data=wrong");
    } else if (command == "close") {
      const cudaError_t result = opened != nullptr ? cudaIpcCloseMemHandle(opened) : cudaErrorInvalidValue;
      opened = nullptr;
      say(std::string("close=") + cudaGetErrorName(result));
    } else {
      return kUnknownCommand;
    }
    return kNextCommand;
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc == 2 ? argv[1] : "";
  if (role == "exporter") return exporter();
  if (role == "importer") return importer();
  std::fprintf(stderr, "usage: %s exporter | importer (commands on stdin: see the source)\n", argv[0]);
  return 2;
}
