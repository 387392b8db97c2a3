// Helpers shared by the example programs: failing loudly, deterministic data, a checksum of the
// bytes a program verified, argument parsing and timing. Standard C++ only, so every example builds
// unchanged with plain g++ against NVIDIA's runtime as well as against the simulated one.
#pragma once

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace examples {

// Prints "error: <message>" to stderr and ends the program with status 1.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fail(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("error: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::exit(1);
}

// splitmix64: tiny, fast and identical on every platform, so runs are reproducible.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound).
  std::uint64_t below(std::uint64_t bound) { return next() % bound; }

  // Roughly log-uniform in [low, high]: small sizes are as common as large ones, as in real churn.
  std::size_t log_uniform(std::size_t low, std::size_t high) {
    const int low_bits = 63 - __builtin_clzll(low);
    const int high_bits = 63 - __builtin_clzll(high);
    const int bits = low_bits + static_cast<int>(below(static_cast<std::uint64_t>(high_bits - low_bits + 1)));
    const std::size_t base = std::size_t{1} << bits;
    std::size_t size = base + static_cast<std::size_t>(below(base));
    if (size < low) size = low;
    if (size > high) size = high;
    return size;
  }

 private:
  std::uint64_t state_;
};

// The bytes of a data block are a function of its seed alone, so a reader can check them without
// keeping a copy.
inline void fill_pattern(void* data, std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  auto* bytes = static_cast<unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const std::uint64_t word = rng.next();
    std::memcpy(bytes + i, &word, 8);
  }
  if (i < size) {
    const std::uint64_t word = rng.next();
    std::memcpy(bytes + i, &word, size - i);
  }
}

// Returns the offset of the first byte that differs from fill_pattern(seed), or size if none does.
inline std::size_t find_pattern_mismatch(const void* data, std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; i += 8) {
    const std::uint64_t word = rng.next();
    const std::size_t length = size - i < 8 ? size - i : 8;
    if (std::memcmp(bytes + i, &word, length) != 0) {
      for (std::size_t j = 0; j < length; ++j) {
        if (bytes[i + j] != reinterpret_cast<const unsigned char*>(&word)[j]) return i + j;
      }
    }
  }
  return size;
}

// Fails the program unless data holds fill_pattern(seed); `what` names the block in the message.
inline void expect_pattern(const void* data, std::size_t size, std::uint64_t seed, const char* what) {
  const std::size_t offset = find_pattern_mismatch(data, size, seed);
  if (offset != size) {
    fail("%s: byte %zu of %zu differs from what was written (memory reused or corrupted)", what, offset,
         size);
  }
}

// FNV-1a over 64-bit words (then the tail bytes): a fingerprint of the verified data, printed as
// "checksum: <hex>" so runs with and without an allocator underneath can be compared.
class Checksum {
 public:
  void add(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      mix(word);
    }
    for (; i < size; ++i) mix(bytes[i]);
    mix(size);
  }
  void add_value(std::uint64_t value) { mix(value); }
  std::uint64_t value() const { return hash_; }
  void print() const { std::printf("checksum: %016" PRIx64 "\n", hash_); }

 private:
  void mix(std::uint64_t word) { hash_ = (hash_ ^ word) * 0x100000001b3ULL; }
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// Removes `flag` from the arguments wherever it is and says whether it was there, before
// parse_argument reads the rest.
inline bool take_flag(int& argc, char** argv, const char* flag) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) found = true;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  return found;
}

// The programs with kernels take `--no-kernel-check`, for platforms that run no device code (the
// simulator): what kernels computed is then not verified and is left out of the checksum, and its
// fingerprint is printed on a line of its own, "kernel results (not checked): <hex>".
struct KernelResults {
  bool checked = true;
  Checksum unchecked;

  static KernelResults from_arguments(int& argc, char** argv) {
    KernelResults results;
    results.checked = !take_flag(argc, argv, "--no-kernel-check");
    return results;
  }
  // Adds data a kernel wrote: to `verified` when results are checked, else to its own fingerprint.
  void add(Checksum& verified, const void* data, std::size_t size) {
    (checked ? verified : unchecked).add(data, size);
  }
  void print() const {
    if (!checked) std::printf("kernel results (not checked): %016" PRIx64 "\n", unchecked.value());
  }
};

// The optional single argument every example takes: a positive whole number (a scale factor or a
// size), `fallback` when absent. Anything else is a usage error (status 2).
inline unsigned long parse_argument(int argc, char** argv, unsigned long fallback, const char* meaning) {
  if (argc == 1) return fallback;
  char* end = nullptr;
  const unsigned long value = argc == 2 ? std::strtoul(argv[1], &end, 10) : 0;
  if (argc > 2 || end == argv[1] || *end != '\0' || value == 0 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s [%s]  (a positive whole number, default %lu)\n", argv[0], meaning,
                 fallback);
    std::exit(2);
  }
  return value;
}

// "1.5 MiB"-style rendering for the summaries.
inline std::string format_bytes(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

class Stopwatch {
 public:
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace examples
