// Shared by the memory scenario programs: command-line access and the host buffers of data checks.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace mem_scenarios {

// argv[1] names the scenario; later arguments are numbers with defaults.
struct Arguments {
  int argc;
  char** argv;
  std::string scenario() const { return argc > 1 ? argv[1] : ""; }
  long long number(int index, long long fallback) const {
    return argc > index ? std::strtoll(argv[index], nullptr, 0) : fallback;
  }
};

// Host data for a reuse check: `late` is what a slow operation writes into a freed block, `mine`
// what the block's next owner writes, `back` what is read back (intact when it equals `mine`).
struct ReuseBuffers {
  explicit ReuseBuffers(std::size_t bytes) : late(bytes, 0xAA), mine(bytes, 0x55), back(bytes, 0) {}
  bool intact() const { return back == mine; }
  std::vector<unsigned char> late;
  std::vector<unsigned char> mine;
  std::vector<unsigned char> back;
};

}  // namespace mem_scenarios
