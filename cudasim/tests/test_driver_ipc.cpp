// The simulated driver's legacy IPC: cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle
// between real processes (forked children start with a fresh driver, as separate programs do).
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <string>
#include <thread>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace driver_test;

namespace {

constexpr std::size_t kBytes = 3 * kMiB + 100;  // over a large page, not a multiple of one

std::vector<std::uint8_t> pattern(std::size_t bytes, std::uint8_t seed) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i * 31 + seed);
  return data;
}

// A pipe the two sides of a test pass handles and go-aheads through.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { REQUIRE(pipe(fds) == 0); }
  ~Pipe() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
  bool send(const void* data, std::size_t bytes) { return write(fds[1], data, bytes) == static_cast<ssize_t>(bytes); }
  bool receive(void* data, std::size_t bytes) { return read(fds[0], data, bytes) == static_cast<ssize_t>(bytes); }
};

}  // namespace

TEST_CASE("another process maps the same bytes, both ways", "[driver][ipc]") {
  primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, kBytes) == CUDA_SUCCESS);
  const auto written = pattern(kBytes, 7);
  REQUIRE(cuMemcpyHtoD(ptr, written.data(), kBytes) == CUDA_SUCCESS);
  CUipcMemHandle handle{};
  REQUIRE(cuIpcGetMemHandle(&handle, ptr) == CUDA_SUCCESS);
  CUipcMemHandle again{};
  REQUIRE(cuIpcGetMemHandle(&again, ptr + 4096) == CUDA_SUCCESS);  // inside: the whole allocation
  CHECK(std::memcmp(handle.reserved, again.reserved, sizeof handle.reserved) == 0);

  const int rc = in_child([&] {
    CHILD_CHECK(start_primary_context());
    size_t free_before = 0, free_after = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
    CUdeviceptr opened = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    CHILD_CHECK(opened != 0);
    CHILD_CHECK(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
    CHILD_CHECK(free_after == free_before);  // the exporter's memory: nothing charged here
    std::vector<std::uint8_t> read(kBytes);
    CHILD_CHECK(cuMemcpyDtoH(read.data(), opened, kBytes) == CUDA_SUCCESS);
    CHILD_CHECK(read == pattern(kBytes, 7));
    CUdeviceptr base = 0;
    size_t size = 0;
    CHILD_CHECK(cuMemGetAddressRange(&base, &size, opened + 10) == CUDA_SUCCESS);
    CHILD_CHECK(base == opened && size == kBytes);
    // Opened again by the same context: the same pointer, one more reference.
    CUdeviceptr twice = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&twice, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    CHILD_CHECK(twice == opened);
    CHILD_CHECK(cuMemFree(opened) == CUDA_ERROR_INVALID_VALUE);  // closed, never freed
    CHILD_CHECK(cuIpcGetMemHandle(&again, opened) == CUDA_ERROR_INVALID_VALUE);  // not this process's
    const auto reply = pattern(kBytes, 99);
    CHILD_CHECK(cuMemcpyHtoD(opened, reply.data(), kBytes) == CUDA_SUCCESS);
    CHILD_CHECK(cuIpcCloseMemHandle(opened) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemcpyDtoH(read.data(), opened, 16) == CUDA_SUCCESS);  // one reference left
    CHILD_CHECK(cuIpcCloseMemHandle(opened) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemcpyDtoH(read.data(), opened, 16) == CUDA_ERROR_INVALID_VALUE);  // unmapped
    CHILD_CHECK(cuIpcCloseMemHandle(opened) == CUDA_ERROR_INVALID_VALUE);
    return 0;
  });
  CHECK(rc == 0);
  std::vector<std::uint8_t> read(kBytes);
  REQUIRE(cuMemcpyDtoH(read.data(), ptr, kBytes) == CUDA_SUCCESS);
  CHECK(read == pattern(kBytes, 99));  // the child's writes, seen by the exporter
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("IPC misuse returns the documented codes", "[driver][ipc]") {
  primary_context();
  CUdeviceptr ptr = 0, pool_ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
  CUipcMemHandle handle{};
  REQUIRE(cuIpcGetMemHandle(&handle, ptr) == CUDA_SUCCESS);
  CHECK(cuIpcGetMemHandle(nullptr, ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuIpcGetMemHandle(&handle, 0x1234) == CUDA_ERROR_INVALID_VALUE);
  // Stream-ordered pool memory has no legacy handle (cuMemPoolExportPointer exports it).
  REQUIRE(cuMemAllocAsync(&pool_ptr, 4096, nullptr) == CUDA_SUCCESS);
  CUipcMemHandle pool_handle{};
  CHECK(cuIpcGetMemHandle(&pool_handle, pool_ptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemFreeAsync(pool_ptr, nullptr) == CUDA_SUCCESS);
  // The exporting process cannot open its own handle.
  CUdeviceptr opened = 0;
  CHECK(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuIpcCloseMemHandle(ptr) == CUDA_ERROR_INVALID_VALUE);  // not opened by IPC

  const int rc = in_child([&] {
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUdeviceptr got = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&got, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(start_primary_context());
    CHILD_CHECK(cuIpcOpenMemHandle(nullptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuIpcOpenMemHandle(&got, handle, 0) == CUDA_ERROR_INVALID_VALUE);  // flags must be LAZY
    CUipcMemHandle garbage{};
    std::memset(garbage.reserved, 0x5a, sizeof garbage.reserved);
    CHILD_CHECK(cuIpcOpenMemHandle(&got, garbage, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_VALUE);
    // A handle whose bytes were altered names no allocation of the exporter.
    CUipcMemHandle altered = handle;
    altered.reserved[20] ^= 1;
    CHILD_CHECK(cuIpcOpenMemHandle(&got, altered, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuIpcCloseMemHandle(0x1234) == CUDA_ERROR_INVALID_VALUE);
    return 0;
  });
  CHECK(rc == 0);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("a handle of freed memory no longer opens, even once the address is reused", "[driver][ipc]") {
  primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 64 * kMiB) == CUDA_SUCCESS);
  CUipcMemHandle handle{};
  REQUIRE(cuIpcGetMemHandle(&handle, ptr) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(ptr) == CUDA_SUCCESS);
  std::vector<CUdeviceptr> later(8);
  for (CUdeviceptr& p : later) REQUIRE(cuMemAlloc(&p, 64 * kMiB) == CUDA_SUCCESS);
  const int rc = in_child([&] {
    CHILD_CHECK(start_primary_context());
    CUdeviceptr got = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&got, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_VALUE);
    return 0;
  });
  CHECK(rc == 0);
  for (CUdeviceptr p : later) CHECK(cuMemFree(p) == CUDA_SUCCESS);
}

TEST_CASE("after the exporter exits its handles fail, and open mappings keep their bytes", "[driver][ipc]") {
  primary_context();
  Pipe handles, go;
  // Exporter: allocates, writes, sends its handle, waits for the go-ahead, exits without freeing.
  const pid_t exporter = fork();
  if (exporter == 0) {
    if (!start_primary_context()) _exit(1);
    CUdeviceptr ptr = 0;
    const auto data = pattern(kBytes, 42);
    CUipcMemHandle handle{};
    if (cuMemAlloc(&ptr, kBytes) != CUDA_SUCCESS || cuMemcpyHtoD(ptr, data.data(), kBytes) != CUDA_SUCCESS ||
        cuIpcGetMemHandle(&handle, ptr) != CUDA_SUCCESS || !handles.send(&handle, sizeof handle)) {
      _exit(2);
    }
    char byte = 0;
    _exit(go.receive(&byte, 1) ? 0 : 3);
  }
  REQUIRE(exporter > 0);
  CUipcMemHandle handle{};
  REQUIRE(handles.receive(&handle, sizeof handle));
  CUdeviceptr opened = 0;
  REQUIRE(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
  REQUIRE(go.send("x", 1));
  int status = 0;
  REQUIRE(waitpid(exporter, &status, 0) == exporter);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // Still mapped here: the bytes stay until this process closes them.
  std::vector<std::uint8_t> read(kBytes);
  CHECK(cuMemcpyDtoH(read.data(), opened, kBytes) == CUDA_SUCCESS);
  CHECK(read == pattern(kBytes, 42));
  CHECK(cuIpcCloseMemHandle(opened) == CUDA_SUCCESS);
  // Opening after the exporter died fails.
  CUdeviceptr late = 0;
  CHECK(cuIpcOpenMemHandle(&late, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("an imported mapping goes with the context that opened it", "[driver][ipc]") {
  primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, 4096) == CUDA_SUCCESS);
  CUipcMemHandle handle{};
  REQUIRE(cuIpcGetMemHandle(&handle, ptr) == CUDA_SUCCESS);
  const int rc = in_child([&] {
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    CHILD_CHECK(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
    CUdeviceptr opened = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxDestroy(ctx) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuIpcCloseMemHandle(opened) == CUDA_ERROR_INVALID_VALUE);  // went with its context
    CUdeviceptr reopened = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&reopened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    CHILD_CHECK(cuIpcCloseMemHandle(reopened) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("closing an IPC mapping waits for work any device queued on it", "[driver][ipc]") {
  primary_context();
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAlloc(&ptr, kBytes) == CUDA_SUCCESS);
  const auto written = pattern(kBytes, 3);
  REQUIRE(cuMemcpyHtoD(ptr, written.data(), kBytes) == CUDA_SUCCESS);
  CUipcMemHandle handle{};
  REQUIRE(cuIpcGetMemHandle(&handle, ptr) == CUDA_SUCCESS);
  const int rc = in_child([&] {
    CHILD_CHECK(start_primary_context());
    CUdeviceptr opened = 0;
    CHILD_CHECK(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    // Device 1's context copies out of the mapping, held back until after the close is asked.
    CUcontext device0 = nullptr, device1 = nullptr;
    CHILD_CHECK(cuCtxGetCurrent(&device0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxRetain(&device1, 1) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSetCurrent(device1) == CUDA_SUCCESS);
    CUstream stream = nullptr;
    CHILD_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CUdeviceptr copy = 0;
    CHILD_CHECK(cuMemAlloc(&copy, kBytes) == CUDA_SUCCESS);
    Gate gate;
    CHILD_CHECK(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemcpyDtoDAsync(copy, opened, kBytes, stream) == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxSetCurrent(device0) == CUDA_SUCCESS);
    std::thread opener([&gate] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.open();
    });
    CHILD_CHECK(cuIpcCloseMemHandle(opened) == CUDA_SUCCESS);  // waits for the copy: no fault
    opener.join();
    CHILD_CHECK(gate.ran());
    CHILD_CHECK(cuCtxSetCurrent(device1) == CUDA_SUCCESS);
    std::vector<std::uint8_t> read(kBytes);
    CHILD_CHECK(cuMemcpyDtoH(read.data(), copy, kBytes) == CUDA_SUCCESS);
    CHILD_CHECK(read == pattern(kBytes, 3));
    return 0;
  });
  CHECK(rc == 0);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
}

TEST_CASE("an interprocess event is shared: queried, waited for and recorded by either process",
          "[driver][ipc][events]") {
  primary_context();
  CUevent event = nullptr;
  REQUIRE(cuEventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(event, stream) == CUDA_SUCCESS);
  CUipcEventHandle handle{};
  REQUIRE(cuIpcGetEventHandle(&handle, event) == CUDA_SUCCESS);
  Pipe to_child, to_parent;
  const pid_t pid = fork();
  if (pid == 0) {
    auto child = [&]() -> int {
      CHILD_CHECK(start_primary_context());
      CUevent opened = nullptr;
      CHILD_CHECK(cuIpcOpenEventHandle(&opened, handle) == CUDA_SUCCESS);
      CHILD_CHECK(cuEventQuery(opened) == CUDA_ERROR_NOT_READY);  // the parent's stream is held
      // A stream of the child waits for the parent's record before its own work.
      CUstream waiting = nullptr;
      CHILD_CHECK(cuStreamCreate(&waiting, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
      CHILD_CHECK(cuStreamWaitEvent(waiting, opened, 0) == CUDA_SUCCESS);
      std::string log;
      Step after{&log, 'w'};
      CHILD_CHECK(cuLaunchHostFunc(waiting, Step::run, &after) == CUDA_SUCCESS);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      CHILD_CHECK(log.empty() && cuStreamQuery(waiting) == CUDA_ERROR_NOT_READY);
      char go = 'g';
      CHILD_CHECK(to_parent.send(&go, 1));  // the parent opens its gate now
      CHILD_CHECK(cuEventSynchronize(opened) == CUDA_SUCCESS);
      CHILD_CHECK(cuEventQuery(opened) == CUDA_SUCCESS);
      CHILD_CHECK(cuStreamSynchronize(waiting) == CUDA_SUCCESS);
      CHILD_CHECK(log == "w");
      // The child records the event behind its own gate: the parent sees it pending, then done.
      Gate mine;
      CHILD_CHECK(cuLaunchHostFunc(waiting, Gate::wait, &mine) == CUDA_SUCCESS);
      CHILD_CHECK(cuEventRecord(opened, waiting) == CUDA_SUCCESS);
      CHILD_CHECK(to_parent.send(&go, 1));
      CHILD_CHECK(to_child.receive(&go, 1));
      mine.open();
      CHILD_CHECK(cuStreamSynchronize(waiting) == CUDA_SUCCESS);
      CHILD_CHECK(to_parent.send(&go, 1));
      // Misuse: an opened event is not this process's to export; timing is disabled.
      CUipcEventHandle again{};
      CHILD_CHECK(cuIpcGetEventHandle(&again, opened) == CUDA_ERROR_INVALID_VALUE);
      float ms = 0;
      CHILD_CHECK(cuEventElapsedTime(&ms, opened, opened) == CUDA_ERROR_INVALID_HANDLE);
      CHILD_CHECK(cuEventDestroy(opened) == CUDA_SUCCESS);
      return 0;
    };
    _exit(child());
  }
  char go = 0;
  REQUIRE(to_parent.receive(&go, 1));
  gate.open();
  REQUIRE(to_parent.receive(&go, 1));  // the child recorded it behind its gate
  CHECK(cuEventQuery(event) == CUDA_ERROR_NOT_READY);
  REQUIRE(to_child.send(&go, 1));
  REQUIRE(to_parent.receive(&go, 1));
  CHECK(cuEventQuery(event) == CUDA_SUCCESS);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));

  // Misuse.
  CUevent plain = nullptr, opened = nullptr;
  REQUIRE(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  CUipcEventHandle other{};
  CHECK(cuIpcGetEventHandle(&other, plain) == CUDA_ERROR_INVALID_VALUE);  // not interprocess
  CHECK(cuIpcGetEventHandle(nullptr, event) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuIpcOpenEventHandle(&opened, handle) == CUDA_ERROR_INVALID_CONTEXT);  // this process's own
  CUipcEventHandle forged{};
  std::memset(forged.reserved, 0x5a, sizeof forged.reserved);
  CHECK(cuIpcOpenEventHandle(&opened, forged) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuIpcOpenEventHandle(nullptr, handle) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuEventDestroy(plain) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuEventDestroy(event) == CUDA_SUCCESS);
  // Once destroyed, its handle no longer opens.
  const int after = in_child([&] {
    CHILD_CHECK(start_primary_context());
    CUevent late = nullptr;
    CHILD_CHECK(cuIpcOpenEventHandle(&late, handle) == CUDA_ERROR_INVALID_VALUE);
    return 0;
  });
  CHECK(after == 0);
}
