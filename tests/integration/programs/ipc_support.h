// Shared by the IPC test programs (ipc_*.cpp): starting this same program again in another role (as
// torch.multiprocessing's spawn and vLLM's workers start fresh processes; the environment, and so
// LD_PRELOAD, is inherited), passing handles through pipes and as hex text, and test patterns.
#pragma once

#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime_check.h"

extern char** environ;

namespace ipc_test {

// Byte i of a pattern: differs per seed and per position.
inline std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + i / 251) & 0xff);
  return data;
}

inline std::string to_hex(const void* data, std::size_t bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto byte = static_cast<const unsigned char*>(data)[i];
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

// False unless `text` is exactly 2 * bytes hex digits.
inline bool from_hex(const std::string& text, void* data, std::size_t bytes) {
  if (text.size() != 2 * bytes) return false;
  for (std::size_t i = 0; i < bytes; ++i) {
    unsigned value = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &value) != 1) return false;
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(value);
  }
  return true;
}

// from_hex for a handle argument; on failure says what `role` expected, on stderr.
template <typename Handle>
bool handle_from_hex(const std::string& text, Handle& handle, const char* role) {
  if (from_hex(text, &handle, sizeof handle)) return true;
  std::fprintf(stderr, "%s: expected a handle of %zu hex digits, got \"%s\"\n", role, 2 * sizeof handle, text.c_str());
  return false;
}

// A driver entry point found as NCCL finds them (cudaGetDriverEntryPointByVersion); exits 3 without it.
template <typename Function>
Function driver_entry(const char* name) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  CHECK_CUDA(cudaGetDriverEntryPointByVersion(name, &entry, 13000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || entry == nullptr) {
    std::fprintf(stderr, "the driver has no %s\n", name);
    std::exit(3);
  }
  return reinterpret_cast<Function>(entry);
}

// Starts this program with `args` (argv[1..]); -1 on failure.
inline pid_t spawn_self(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/proc/self/exe"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : all) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  return posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) == 0 ? pid : -1;
}

// The exit status of `pid`, or -1 when it did not exit normally.
inline int wait_exit(pid_t pid) {
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

inline bool write_all(int fd, const void* data, std::size_t bytes) {
  const auto* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t done = write(fd, at, bytes);
    if (done <= 0) return false;
    at += done;
    bytes -= static_cast<std::size_t>(done);
  }
  return true;
}

inline bool read_all(int fd, void* data, std::size_t bytes) {
  auto* at = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t done = read(fd, at, bytes);
    if (done <= 0) return false;
    at += done;
    bytes -= static_cast<std::size_t>(done);
  }
  return true;
}

}  // namespace ipc_test
