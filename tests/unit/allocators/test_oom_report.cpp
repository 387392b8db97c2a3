// The out-of-memory report: its numbers add up and its text stays compact.
#include <algorithm>
#include <sstream>

#include "arena_test_support.h"

using namespace gpumem;
using namespace gpumem::test;

namespace {

std::size_t line_count(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Sums over the report's parts must equal its stats.
void check_report_adds_up(const OomReport& report) {
  std::size_t in_use = 0, requested = 0, free_bytes = 0, chunks = 0, in_use_chunks = 0;
  for (const OomReport::Bin& bin : report.bins) {
    CHECK(bin.total_chunks > 0);
    CHECK(bin.total_chunks == bin.chunks_in_use + bin.free_chunks);
    CHECK(bin.min_chunk_size == std::size_t{256} << bin.index);
    in_use += bin.bytes_in_use;
    requested += bin.bytes_requested;
    free_bytes += bin.free_bytes;
    chunks += bin.total_chunks;
    in_use_chunks += bin.chunks_in_use;
  }
  std::size_t by_size_bytes = 0, by_size_chunks = 0;
  for (const OomReport::InUseSize& entry : report.in_use_by_size) {
    by_size_bytes += entry.chunk_size * entry.count;
    by_size_chunks += entry.count;
  }
  CHECK(in_use == report.stats.bytes_in_use);
  CHECK(by_size_bytes == report.stats.bytes_in_use);
  CHECK(by_size_chunks == in_use_chunks);
  CHECK(requested == report.stats.bytes_requested);
  CHECK(free_bytes == report.free_bytes);
  CHECK(free_bytes + in_use == report.stats.bytes_reserved);
  CHECK(chunks == report.stats.chunks);
  CHECK(report.largest_free_chunk <= free_bytes);
  CHECK(report.occupancy.size() == 100);
  CHECK(report.occupancy.find_first_not_of("*x_") == std::string::npos);
}

}  // namespace

TEST_CASE("the OOM report rounds the request as the arena does", "[oom]") {
  FakeRegionSource source;
  ArenaOptions options = preallocated(4 * kMiB);
  options.block_alignment = 512;
  BfcArena arena(source, options);
  CHECK(arena.oom_report(2 * kMiB + 1).rounded == 2 * kMiB + 512);
  CHECK(arena.oom_report(512).rounded == 512);
}

TEST_CASE("the OOM report describes the arena and its numbers add up", "[oom]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(4 * kMiB));
  std::vector<std::uintptr_t> blocks;
  for (int index = 0; index < 12; ++index) blocks.push_back(must_allocate(arena, 300 * kKiB + 1));
  for (int index = 0; index < 12; index += 3) must_free(arena, blocks[static_cast<std::size_t>(index)]);
  must_free(arena, blocks[1], Fence{1, 0});
  std::uintptr_t ptr = 0;
  REQUIRE(arena.allocate(2 * kMiB + 1, ptr) == Status::fences_pending);

  const OomReport report = arena.oom_report(2 * kMiB + 1);
  CHECK(report.requested == 2 * kMiB + 1);
  CHECK(report.rounded == 2 * kMiB + 256);
  // Worked out by hand: the four freed blocks are 300 KiB + 256 each, the tail after the twelfth
  // block is the rest of the 4 MiB region, and the fenced block does not count as free to hand out.
  CHECK(report.largest_free_chunk == 4 * kMiB - 12 * (300 * kKiB + 256));
  CHECK(report.stats.bytes_fenced == 300 * kKiB + 256);
  CHECK(report.free_bytes == 4 * kMiB - 7 * (300 * kKiB + 256));
  REQUIRE(report.in_use_by_size.size() == 1);
  CHECK(report.in_use_by_size[0].chunk_size == 300 * kKiB + 256);
  CHECK(report.in_use_by_size[0].count == 7);
  check_report_adds_up(report);
  // The first block is free ('_'), the second fenced (shown as free); '*' dominates live blocks.
  CHECK(report.occupancy.front() == '_');
  CHECK(report.occupancy.find('*') != std::string::npos);

  const std::string text = report.render();
  INFO(text);
  CHECK(text.find("out of memory allocating 2.0 MiB (rounded to 2.0 MiB)") == 0);
  CHECK(text.find("fenced 300.") != std::string::npos);
  CHECK(text.find(report.occupancy) != std::string::npos);
  CHECK(line_count(text) < 40);
}

TEST_CASE("rounding waste shows as 'x' in the occupancy bar", "[oom]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(kMiB));
  must_allocate(arena, 300 * kKiB);  // split from the region: 724 KiB stay free
  must_allocate(arena, 500 * kKiB);  // 724 KiB < 2 * 500 KiB: served whole, 224 KiB wasted
  const OomReport report = arena.oom_report(kMiB);
  check_report_adds_up(report);
  CHECK(report.free_bytes == 0);
  // 800 KiB requested of 1 MiB: 78.1 cells of '*', then the waste.
  CHECK(report.occupancy == std::string(78, '*') + std::string(22, 'x'));
}

TEST_CASE("a long list of in-use sizes is summarised", "[oom]") {
  FakeRegionSource source;
  BfcArena arena(source, preallocated(64 * kMiB));
  for (std::size_t index = 1; index <= 60; ++index) must_allocate(arena, index * 1000);
  const OomReport report = arena.oom_report(128 * kMiB);
  CHECK(report.in_use_by_size.size() == 60);
  check_report_adds_up(report);
  const std::string text = report.render();
  INFO(text);
  CHECK(line_count(text) < 40);
  CHECK(text.find("chunks of 50 other sizes") != std::string::npos);
}

TEST_CASE("an OOM report of an empty arena", "[oom]") {
  FakeRegionSource source;
  BfcArena arena(source, growing(kMiB));
  const OomReport report = arena.oom_report(2 * kMiB);
  CHECK(report.bins.empty());
  CHECK(report.free_bytes == 0);
  CHECK(report.occupancy.empty());
  CHECK(report.render().find("out of memory allocating 2.0 MiB") == 0);
}
