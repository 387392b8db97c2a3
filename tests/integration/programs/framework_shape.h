// What the framework-shaped test programs share (framework_{xla,tf,torch,cupy}.cpp,
// tests/integration/test_frameworks.py): each reads its framework's variables and manages device
// memory as that framework's allocator does, then runs the steps its arguments name, in order, and
// says what happened as key=value lines on stdout.
//
//   alloc:<MiB>x<n>     n buffers of MiB through the framework's allocator; a refusal ends the
//                       program (status 3, "result=oom", "refused_at=<MiB live>")
//   free:<n>            frees the n buffers allocated last
//   churn:<ms>          frees and allocates again the buffers it holds, one by one, for that long
//   churn:@<path>       the same until the file exists (at most 60 s): a training loop's steps
//   trace:<path>        replays an allocation trace (RMM's replay-log CSV, uncompressed: Action,
//                       Pointer and Size columns) through the framework's allocator, after one
//                       warm-up allocation; prints "trace_ops" and "trace_ns_per_op", the time of its
//                       allocations and frees alone (bench/frameworks.sh compares them)
//   report              what the framework holds from the driver now and at most
//                       ("framework_reserved", "framework_peak_reserved"), and what is live
//   info                cudaMemGetInfo's free and total, as the framework sees them
//   setenv:<NAME>=<VALUE>  sets a variable, as a Python program sets os.environ before it imports the
//                       framework (the framework reads its variables when its allocator is made)
//   wait:<path>         waits (at most 60 s) for the file to exist; touch:<path> makes it
//   sleep:<ms>          sleeps; say:<text> prints it
//
// The framework's allocator is made at the first allocation, as JAX and TensorFlow make theirs at the
// first operation (sizing themselves from cudaMemGetInfo then); it prints what it was configured with
// ("framework_allocator=...", "framework_limit=<bytes>": the most its own pool may hold, 0 for none).
// At the end every buffer is freed, the report printed, and "result=ok".
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bfc_arena.h"
#include "region_source.h"

namespace framework_shape {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A framework's device allocator: a pool over the driver, or the driver itself.
class FrameworkAllocator {
 public:
  virtual ~FrameworkAllocator() = default;
  // Serves `bytes`; false when the framework reports out-of-memory.
  virtual bool allocate(std::size_t bytes, std::uintptr_t& out) = 0;
  virtual void deallocate(std::uintptr_t ptr) = 0;
  // Bytes the framework holds from the driver: now, and at most so far.
  virtual std::size_t reserved() const = 0;
  virtual std::size_t peak_reserved() const = 0;
};

// The driver's calls a framework allocates with (cuMemAlloc/cuMemFree, or cudaMalloc/cudaFree).
struct DeviceCalls {
  bool (*malloc)(std::size_t bytes, std::uintptr_t& out);
  void (*free)(std::uintptr_t ptr);
  // free and total memory as cudaMemGetInfo (or cuMemGetInfo) reports them
  void (*mem_info)(std::size_t& free, std::size_t& total);
};

// Counts what a framework holds from the driver.
class DriverHoldings {
 public:
  explicit DriverHoldings(const DeviceCalls& calls) : calls_(calls) {}
  bool take(std::size_t bytes, std::uintptr_t& out) {
    if (!calls_.malloc(bytes, out)) return false;
    held_ += bytes;
    peak_ = std::max(peak_, held_);
    return true;
  }
  void give_back(std::uintptr_t ptr, std::size_t bytes) {
    calls_.free(ptr);
    held_ -= bytes;
  }
  std::size_t held() const { return held_; }
  std::size_t peak() const { return peak_; }

 private:
  DeviceCalls calls_;
  std::size_t held_ = 0;
  std::size_t peak_ = 0;
};

// Regions of a framework's pool, each one driver allocation. `on_refusal` runs once when the driver
// refuses (a framework that frees its other caches and retries, as PyTorch's does).
class DriverRegions final : public gpumem::RegionSource {
 public:
  explicit DriverRegions(DriverHoldings& holdings, std::function<void()> on_refusal = {})
      : holdings_(holdings), on_refusal_(std::move(on_refusal)) {}

 private:
  gpumem::Status do_reserve(std::size_t bytes, gpumem::Region& out) override {
    std::uintptr_t base = 0;
    if (!holdings_.take(bytes, base)) {
      if (!on_refusal_) return gpumem::Status::out_of_memory;
      on_refusal_();
      if (!holdings_.take(bytes, base)) return gpumem::Status::out_of_memory;
    }
    out = gpumem::Region{base, bytes};
    return gpumem::Status::ok;
  }
  bool do_release(const gpumem::Region& region) override {
    holdings_.give_back(region.base, region.size);
    return true;
  }

  DriverHoldings& holdings_;
  std::function<void()> on_refusal_;
};

// A BFC pool: the arena of this repository (after XLA's bfc_allocator), over driver regions.
class PoolAllocator : public FrameworkAllocator {
 public:
  PoolAllocator(const DeviceCalls& calls, gpumem::ArenaOptions options, std::function<void()> on_refusal = {})
      : holdings_(calls), regions_(holdings_, std::move(on_refusal)), arena_(regions_, options) {}
  bool allocate(std::size_t bytes, std::uintptr_t& out) override {
    return arena_.allocate(bytes, out) == gpumem::Status::ok;
  }
  void deallocate(std::uintptr_t ptr) override { arena_.deallocate(ptr); }
  std::size_t reserved() const override { return holdings_.held(); }
  std::size_t peak_reserved() const override { return holdings_.peak(); }
  std::size_t release_free() { return arena_.release_free_regions(); }
  bool owns(std::uintptr_t ptr) const { return arena_.owns(ptr); }

 private:
  DriverHoldings holdings_;
  DriverRegions regions_;
  gpumem::BfcArena arena_;
};

// No pool: each buffer its own driver allocation, freed when it dies (JAX's "platform", TensorFlow's
// "cuda_malloc", PyTorch without caching, CuPy without a pool).
class DriverAllocator final : public FrameworkAllocator {
 public:
  explicit DriverAllocator(const DeviceCalls& calls) : holdings_(calls) {}
  bool allocate(std::size_t bytes, std::uintptr_t& out) override {
    if (!holdings_.take(bytes, out)) return false;
    sizes_.emplace(out, bytes);
    return true;
  }
  void deallocate(std::uintptr_t ptr) override {
    const auto found = sizes_.find(ptr);
    if (found == sizes_.end()) return;
    holdings_.give_back(ptr, found->second);
    sizes_.erase(found);
  }
  std::size_t reserved() const override { return holdings_.held(); }
  std::size_t peak_reserved() const override { return holdings_.peak(); }

 private:
  DriverHoldings holdings_;
  std::unordered_map<std::uintptr_t, std::size_t> sizes_;  // a framework's table of its buffers
};

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

inline bool file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// The program: `make` builds the framework's allocator at the first allocation; `extra_step` may
// handle steps of the framework's own (true when it did).
class Program {
 public:
  Program(DeviceCalls calls, std::function<std::unique_ptr<FrameworkAllocator>()> make,
          std::function<bool(const std::string&)> extra_step = {})
      : calls_(calls), make_(std::move(make)), extra_step_(std::move(extra_step)) {}

  int run(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string step = argv[i];
      const std::string arg = step.substr(step.find(':') + 1);
      if (step.rfind("alloc:", 0) == 0) {
        const std::size_t mib = std::strtoull(arg.c_str(), nullptr, 10);
        const std::size_t count = std::strtoull(arg.c_str() + arg.find('x') + 1, nullptr, 10);
        for (std::size_t n = 0; n < count; ++n) allocate_or_end(mib * kMiB);
      } else if (step.rfind("free:", 0) == 0) {
        for (std::size_t n = std::strtoull(arg.c_str(), nullptr, 10); n > 0 && !buffers_.empty(); --n) free_last();
      } else if (step.rfind("churn:", 0) == 0) {
        churn(arg);
      } else if (step.rfind("trace:", 0) == 0) {
        if (!replay_trace(arg)) {
          std::fprintf(stderr, "%s: cannot read the trace \"%s\" (a CSV with Action, Pointer and Size columns)\n",
                       argv[0], arg.c_str());
          return 2;
        }
      } else if (step == "report") {
        report();
      } else if (step == "info") {
        std::size_t free = 0, total = 0;
        calls_.mem_info(free, total);
        std::printf("free=%zu\ntotal=%zu\n", free, total);
      } else if (step.rfind("wait:", 0) == 0) {
        const auto start = Clock::now();
        while (!file_exists(arg)) {
          if (ms_since(start) > 60000) {
            std::printf("result=timeout waiting for %s\n", arg.c_str());
            return 4;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      } else if (step.rfind("touch:", 0) == 0) {
        const int fd = open(arg.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
      } else if (step.rfind("sleep:", 0) == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::strtoull(arg.c_str(), nullptr, 10)));
      } else if (step.rfind("setenv:", 0) == 0) {
        const std::size_t equals = arg.find('=');
        if (equals == std::string::npos) {
          std::fprintf(stderr, "%s: setenv needs NAME=VALUE: \"%s\"\n", argv[0], step.c_str());
          return 2;
        }
        setenv(arg.substr(0, equals).c_str(), arg.substr(equals + 1).c_str(), 1);
      } else if (step.rfind("say:", 0) == 0) {
        std::printf("%s\n", arg.c_str());
      } else if (!(extra_step_ && extra_step_(step))) {
        std::fprintf(stderr, "%s: unknown step \"%s\"\n", argv[0], step.c_str());
        return 2;
      }
      std::fflush(stdout);
    }
    while (!buffers_.empty()) free_last();
    report();
    std::printf("result=ok\n");
    return 0;
  }

 private:
  struct Buffer {
    std::uintptr_t ptr;
    std::size_t bytes;
  };

  FrameworkAllocator& allocator() {
    if (!allocator_) allocator_ = make_();
    return *allocator_;
  }

  std::size_t live_bytes() const {
    std::size_t live = 0;
    for (const Buffer& buffer : buffers_) live += buffer.bytes;
    return live;
  }

  void report() {
    std::printf("framework_reserved=%zu\nframework_peak_reserved=%zu\nlive=%zu\npeak_live=%zu\n",
                allocator_ ? allocator_->reserved() : 0, allocator_ ? allocator_->peak_reserved() : 0, live_bytes(),
                peak_live_);
  }

  void allocate_or_end(std::size_t bytes) {
    std::uintptr_t ptr = 0;
    if (!allocator().allocate(bytes, ptr)) {
      std::printf("refused_bytes=%zu\nrefused_at=%zu\n", bytes, live_bytes() / kMiB);
      report();
      std::printf("result=oom\n");
      std::fflush(stdout);
      std::exit(3);
    }
    buffers_.push_back(Buffer{ptr, bytes});
    peak_live_ = std::max(peak_live_, live_bytes());
  }

  void free_last() {
    allocator().deallocate(buffers_.back().ptr);
    buffers_.pop_back();
  }

  // A training loop: each buffer freed and allocated again in turn, while the time lasts or until
  // the file exists (at most 60 s).
  void churn(const std::string& arg) {
    const auto start = Clock::now();
    const bool until_file = !arg.empty() && arg[0] == '@';
    const double duration_ms = until_file ? 60000.0 : std::strtod(arg.c_str(), nullptr);
    unsigned long rounds = 0;
    for (std::size_t k = 0; !buffers_.empty() && ms_since(start) < duration_ms; ++k, ++rounds) {
      if (until_file && file_exists(arg.substr(1))) break;
      const std::size_t at = k % buffers_.size();
      const Buffer buffer = buffers_[at];
      allocator().deallocate(buffer.ptr);
      buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(at));
      allocate_or_end(buffer.bytes);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::printf("churn_rounds=%lu\n", rounds);
  }

  struct TraceRow {
    bool allocate;
    std::uint64_t pointer;
    std::size_t bytes;
  };

  // The rows of a replay-log CSV, or false when it has no Action, Pointer and Size columns.
  static bool read_trace(const std::string& path, std::vector<TraceRow>& rows) {
    std::FILE* file = std::fopen(path.c_str(), "re");
    if (file == nullptr) return false;
    std::vector<std::string> lines;
    char buffer[512];
    std::string line;
    while (std::fgets(buffer, sizeof buffer, file) != nullptr) {
      line += buffer;
      if (line.back() != '\n') continue;
      line.pop_back();
      lines.push_back(std::move(line));
      line.clear();
    }
    std::fclose(file);
    if (lines.empty()) return false;
    const auto fields = [](const std::string& text) {
      std::vector<std::string> out(1);
      for (const char c : text) {
        if (c == ',') {
          out.emplace_back();
        } else {
          out.back().push_back(c);
        }
      }
      return out;
    };
    const std::vector<std::string> header = fields(lines[0]);
    const auto column = [&](const char* name) {
      return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    };
    const std::size_t action = column("Action"), pointer = column("Pointer"), size = column("Size");
    if (action == header.size() || pointer == header.size() || size == header.size()) return false;
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const std::vector<std::string> row = fields(lines[i]);
      if (row.size() < header.size()) continue;
      const bool allocate = row[action] == "allocate";
      if (!allocate && row[action] != "free" && row[action] != "deallocate") continue;  // a refusal
      rows.push_back(TraceRow{allocate, std::strtoull(row[pointer].c_str(), nullptr, 16),
                              std::strtoull(row[size].c_str(), nullptr, 10)});
    }
    return true;
  }

  bool replay_trace(const std::string& path) {
    std::vector<TraceRow> rows;
    if (!read_trace(path, rows)) return false;
    std::vector<std::pair<std::uint64_t, std::uintptr_t>> live;  // the trace's pointer, ours
    live.reserve(rows.size());
    allocate_or_end(256);  // the allocator made (a preallocation done) before the clock starts
    free_last();
    const auto start = Clock::now();
    for (const TraceRow& row : rows) {
      if (row.allocate) {
        std::uintptr_t ptr = 0;
        if (!allocator().allocate(std::max<std::size_t>(row.bytes, 1), ptr)) {
          std::printf("refused_bytes=%zu\nresult=oom\n", row.bytes);
          std::fflush(stdout);
          std::exit(3);
        }
        live.emplace_back(row.pointer, ptr);
        continue;
      }
      // Most frees are of recent allocations: search from the end.
      for (auto entry = live.rbegin(); entry != live.rend(); ++entry) {
        if (entry->first != row.pointer) continue;
        allocator().deallocate(entry->second);
        live.erase(std::next(entry).base());
        break;
      }
    }
    const double elapsed_ns = ms_since(start) * 1e6;
    for (const auto& entry : live) allocator().deallocate(entry.second);
    std::printf("trace_ops=%zu\ntrace_ns_per_op=%.1f\n", rows.size(), elapsed_ns / static_cast<double>(rows.size()));
    return true;
  }

  DeviceCalls calls_;
  std::function<std::unique_ptr<FrameworkAllocator>()> make_;
  std::function<bool(const std::string&)> extra_step_;
  std::unique_ptr<FrameworkAllocator> allocator_;
  std::vector<Buffer> buffers_;
  std::size_t peak_live_ = 0;
};

// A fraction as Python's float() reads one that JAX accepts ("0.5", ".75", "1"); nullopt otherwise.
inline bool parse_double(const char* text, double& out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  out = std::strtod(text, &end);
  return end != nullptr && *end == '\0';
}

}  // namespace framework_shape
