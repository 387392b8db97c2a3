// Reading a fuzzer's input as a stream of choices: every read takes bytes from the front, and an
// exhausted input reads as zeros, so every input is a valid (if short) program.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace gpumem::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const { return used_ >= size_; }

  template <typename T>
  T take() {
    T value{};
    const std::size_t n = std::min(sizeof(T), size_ - std::min(used_, size_));
    if (n > 0) std::memcpy(&value, data_ + used_, n);
    used_ += sizeof(T);
    return value;
  }

  // A value in [0, bound) (0 when bound is 0).
  std::size_t below(std::size_t bound) { return bound == 0 ? 0 : take<std::uint32_t>() % bound; }

  // Up to `most` bytes as a string (its length read first).
  std::string text(std::size_t most) {
    const std::size_t length = std::min(below(most + 1), size_ - std::min(used_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + std::min(used_, size_)), length);
    used_ += length;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t used_ = 0;
};

// Ends the run as a crash, which libFuzzer reports with the input that caused it; says first which
// check failed (the trap's stack trace names no line).
[[noreturn]] inline void fail(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  std::fprintf(stderr, "%s:%d: check failed\n", file, line);
  __builtin_trap();
}
inline void check(bool condition, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (!condition) fail(file, line);
}

}  // namespace gpumem::fuzz
