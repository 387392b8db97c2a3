// The out-of-memory report: a snapshot of the arena (BfcArena::oom_report) and its compact text form
// (OomReport::render), modelled on XLA's dump but kept to about 40 lines.
#include <algorithm>
#include <array>
#include <iterator>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "bfc_arena.h"

namespace gpumem {
namespace {

using detail::Chunk;
using detail::ChunkHandle;
using detail::ChunkState;
using detail::kNoChunk;

constexpr std::size_t kOccupancyCells = 100;
constexpr std::size_t kSizesShown = 10;  // in-use sizes listed before summarising the rest

std::string human_bytes(std::size_t bytes) {
  static constexpr std::array<const char*, 6> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

// Accumulates, per cell of the occupancy bar, how many bytes are requested, waste and free. Cell k
// covers bytes [start(k), start(k + 1)) of the regions laid end to end; chunks arrive in address
// order, so a cursor walks the cells once.
class OccupancyBar {
 public:
  explicit OccupancyBar(std::size_t total) : total_(total) {}

  // Adds `bytes` of kind `kind` (0 requested, 1 waste, 2 free) at the current offset.
  void add(std::size_t kind, std::size_t bytes) {
    const std::size_t end = offset_ + bytes;
    while (offset_ < end && cell_ < kOccupancyCells) {
      const std::size_t cell_end = cell_start(cell_ + 1);
      if (offset_ >= cell_end) {
        ++cell_;
        continue;
      }
      const std::size_t piece = std::min(end, cell_end) - offset_;
      cells_[cell_][kind] += piece;
      offset_ += piece;
    }
    offset_ = end;
  }

  std::string render() const {
    if (total_ == 0) return {};
    std::string bar;
    for (const auto& cell : cells_) {
      const auto kind = std::max_element(cell.begin(), cell.end()) - cell.begin();
      bar += "*x_"[kind];
    }
    return bar;
  }

 private:
  // floor(total * cell / 100) without overflow.
  std::size_t cell_start(std::size_t cell) const noexcept {
    return total_ / kOccupancyCells * cell + total_ % kOccupancyCells * cell / kOccupancyCells;
  }

  std::size_t total_;
  std::size_t offset_ = 0;
  std::size_t cell_ = 0;
  std::array<std::array<std::size_t, 3>, kOccupancyCells> cells_{};
};

}  // namespace

OomReport BfcArena::oom_report(std::size_t requested) const {
  MutexLock lock(mutex_);
  OomReport report;
  report.requested = requested;
  const std::size_t alignment = options_valid_ ? options_.block_alignment : detail::kGranule;  // as allocate()
  report.rounded = requested > std::numeric_limits<std::size_t>::max() - alignment
                       ? requested
                       : (requested + alignment - 1) / alignment * alignment;
  report.stats = stats_locked();
  report.free_bytes = report.stats.bytes_reserved - report.stats.bytes_in_use;
  report.largest_free_chunk = report.stats.largest_free_block;

  std::array<OomReport::Bin, detail::kBinCount> bins{};
  std::map<std::size_t, std::size_t> in_use_sizes;
  OccupancyBar bar(report.stats.bytes_reserved);
  for (const RegionRecord& record : regions_) {
    for (ChunkHandle node = record.first; node != kNoChunk; node = chunks_[node].next) {
      const Chunk& chunk = chunks_[node];
      if (!lenders_.empty() && is_lender(chunk.base)) continue;  // lent: neither in use nor free here
      OomReport::Bin& bin = bins[static_cast<std::size_t>(detail::bin_index(chunk.size))];
      ++bin.total_chunks;
      if (chunks_.state(node) == ChunkState::in_use) {
        ++bin.chunks_in_use;
        bin.bytes_in_use += chunk.size;
        bin.bytes_requested += chunk.requested();
        ++in_use_sizes[chunk.size];
        bar.add(0, chunk.requested());
        bar.add(1, chunk.size - chunk.requested());
      } else {
        ++bin.free_chunks;
        bin.free_bytes += chunk.size;
        bar.add(2, chunk.size);
      }
    }
  }
  for (int index = 0; index < detail::kBinCount; ++index) {
    OomReport::Bin bin = bins[static_cast<std::size_t>(index)];
    if (bin.total_chunks == 0) continue;
    bin.index = index;
    bin.min_chunk_size = detail::bin_min_size(index);
    report.bins.push_back(bin);
  }
  for (const auto& [size, count] : in_use_sizes) report.in_use_by_size.push_back({size, count});
  report.occupancy = bar.render();
  return report;
}

std::string OomReport::render() const {
  std::string out;
  auto line = std::back_inserter(out);
  const ArenaStats& s = stats;
  std::size_t in_use_chunks = 0;
  for (const InUseSize& entry : in_use_by_size) in_use_chunks += entry.count;
  if (requested == 0) {  // a dump of the arena's state, not an answer to a request
    fmt::format_to(line, "arena: {} free in regions, largest free chunk {}\n", human_bytes(free_bytes),
                   human_bytes(largest_free_chunk));
  } else {
    fmt::format_to(line, "out of memory allocating {} (rounded to {}): {} free in regions, largest free chunk {}\n",
                   human_bytes(requested), human_bytes(rounded), human_bytes(free_bytes),
                   human_bytes(largest_free_chunk));
  }
  fmt::format_to(line, "limit {}, reserved {} in {} region(s), in use {} in {} chunk(s) ({} requested), fenced {}\n",
                 human_bytes(s.bytes_limit), human_bytes(s.bytes_reserved), s.regions,
                 human_bytes(s.bytes_in_use), in_use_chunks, human_bytes(s.bytes_requested),
                 human_bytes(s.bytes_fenced));
  fmt::format_to(line, "{:>3} {:>10} {:>7} {:>7} {:>11} {:>11} {:>7} {:>11}\n", "bin", "chunks >=", "chunks",
                 "in use", "bytes used", "requested", "free", "bytes free");
  for (const Bin& bin : bins) {
    fmt::format_to(line, "{:>3} {:>10} {:>7} {:>7} {:>11} {:>11} {:>7} {:>11}\n", bin.index,
                   human_bytes(bin.min_chunk_size), bin.total_chunks, bin.chunks_in_use,
                   human_bytes(bin.bytes_in_use), human_bytes(bin.bytes_requested), bin.free_chunks,
                   human_bytes(bin.free_bytes));
  }
  // In-use chunks: the sizes holding the most bytes, then one line for the rest.
  std::vector<InUseSize> by_bytes = in_use_by_size;
  std::sort(by_bytes.begin(), by_bytes.end(), [](const InUseSize& a, const InUseSize& b) {
    return a.chunk_size * a.count > b.chunk_size * b.count;
  });
  fmt::format_to(line, "in use by chunk size ({} sizes):\n", by_bytes.size());
  std::size_t rest_count = 0, rest_bytes = 0;
  for (std::size_t index = 0; index < by_bytes.size(); ++index) {
    const InUseSize& entry = by_bytes[index];
    if (index < kSizesShown) {
      fmt::format_to(line, "  {:>7} x {:>10} = {}\n", entry.count, human_bytes(entry.chunk_size),
                     human_bytes(entry.count * entry.chunk_size));
    } else {
      rest_count += entry.count;
      rest_bytes += entry.count * entry.chunk_size;
    }
  }
  if (by_bytes.size() > kSizesShown) {
    fmt::format_to(line, "  {:>7} chunks of {} other sizes = {}\n", rest_count, by_bytes.size() - kSizesShown,
                   human_bytes(rest_bytes));
  }
  fmt::format_to(line,
                 "stats: num_allocs {}, peak in use {}, largest alloc {}, peak reserved {}, "
                 "fragmentation {:.3f}, regions reserved {} / released {} / refused {}\n",
                 s.num_allocs, human_bytes(s.peak_bytes_in_use), human_bytes(s.largest_alloc_size),
                 human_bytes(s.peak_bytes_reserved), s.fragmentation, s.region_reservations,
                 s.region_releases, s.region_refusals);
  if (!occupancy.empty()) fmt::format_to(line, "[{}]  * requested  x rounding waste  _ free\n", occupancy);
  return out;
}

}  // namespace gpumem
