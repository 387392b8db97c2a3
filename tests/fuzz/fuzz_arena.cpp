// Arena operation sequences, checked against a reference model after every step.
//
// The input chooses the arena's options (preallocated or growing, limit and head, not always
// multiples of 256, garbage collection, first region size, split threshold, back-off), the source's
// behaviour (runs out at half the limit; refuses to take regions back now and then) and whether a
// fence oracle answers (throwing now and then), then a sequence of operations: allocate (a size,
// with or without a stream; or many blocks of one size at once), free one of the live blocks (with
// or without a fence), resolve fences, let the device pass fences (for the oracle), free what must
// be refused (a freed block again, an interior or foreign address), release wholly free regions.
//
// The model knows the regions (a tracking source over FakeRegionSource: non-dereferenceable
// addresses, never touched), the live blocks and the fenced ones; the free chunks are what is left
// of each region, since coalescing is eager. It checks, from the contract in bfc_arena.h:
// - an allocation follows the order of attempts: the best fit (the smallest free range that holds
//   the rounded request, lowest address among equals); on a stream, the best fit among the chunks
//   fenced on that stream; the oracle's answers (each stream's fences in order, up to the first
//   not resolved or that throws), then the best fit again; growth, served from the best fit among
//   the regions just reserved. The block is split per the split rule (chunk >= 2 x rounded, or the
//   rest >= max_internal_fragmentation), and the rest of a fenced chunk stays fenced;
// - a request that fits, or (from a source that never refuses) fits what the limit leaves
//   unreserved, is served; a refusal is fences_pending exactly while fences are pending (and the
//   request is within the limit), else out_of_memory;
// - frees of a live block succeed; a freed block, an interior address, a foreign address are refused
//   as double_free or not_owned per deallocate's rules, leaving the arena untouched;
// - resolve_fences_through frees every fence up to its id; release_free_regions gives back exactly
//   the wholly free regions the source accepts;
// - after every step: validate(); blocks never overlap and lie inside one region; find() and owns()
//   agree with the model; the stats (in use, requested, fenced, reserved, regions, largest free
//   block, chunks, available) equal the model's; the out-of-memory report adds up;
// - the destructor gives every region back.
// Any violation is __builtin_trap().
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "bfc_arena.h"
#include "fuzz_input.h"
#include "region_sources.h"

namespace {

using gpumem::fuzz::check;
using gpumem::Status;

constexpr std::size_t kGranule = 256;
std::size_t round_up(std::size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }
std::size_t round_down(std::size_t bytes) { return bytes / kGranule * kGranule; }

// FakeRegionSource, with the regions it holds for the arena on record. Refuses a region that would
// run past the end of the address space (the fake's bump pointer would wrap), and to take a region
// back every other time while `refuse_releases` is set.
class TrackingSource final : public gpumem::RegionSource {
 public:
  explicit TrackingSource(gpumem::RegionSourceLimits limits) : fake_(limits) {}

  std::map<std::uintptr_t, std::size_t> regions;  // base -> size
  bool refuse_releases = false;
  std::size_t released_bytes = 0;  // given back so far
  std::uint64_t releases_refused = 0;

  // The most the next region may have before it would run past the end of the address space.
  std::size_t room() const { return std::numeric_limits<std::uintptr_t>::max() - next_; }

 private:
  Status do_reserve(std::size_t bytes, gpumem::Region& out) override {
    check(bytes % kGranule == 0 && bytes > 0);
    if (bytes > room()) return Status::out_of_memory;
    const Status status = fake_.reserve(bytes, out);
    if (status == Status::ok) {
      check(out.base == next_ && out.size == bytes);
      check(regions.emplace(out.base, out.size).second);
      next_ += bytes;
    }
    return status;
  }
  bool do_release(const gpumem::Region& region) override {
    const auto it = regions.find(region.base);
    check(it != regions.end() && it->second == region.size);  // whole regions it handed out only
    if (refuse_releases && (release_calls_++ % 2) == 0) {
      ++releases_refused;
      return false;
    }
    regions.erase(it);
    released_bytes += region.size;
    return fake_.release(region);
  }

  gpumem::FakeRegionSource fake_;
  std::uintptr_t next_ = gpumem::FakeRegionSource::kBase;  // where the fake's next region starts
  std::uint64_t release_calls_ = 0;
};

// Reports a fence resolved once the device has passed it (device_through); with `throws`, throws
// instead of answering about every third fence, which the arena must take as not resolved.
class DeviceOracle final : public gpumem::FenceOracle {
 public:
  gpumem::FenceId device_through = 0;
  bool throws = false;

  bool resolves(const gpumem::Fence& fence) const { return !throws_for(fence) && fence.id <= device_through; }
  bool is_resolved(const gpumem::Fence& fence) override {
    if (throws_for(fence)) throw std::runtime_error("oracle");
    return fence.id <= device_through;
  }

 private:
  bool throws_for(const gpumem::Fence& fence) const { return throws && fence.id % 3 == 0; }
};

struct Block {
  std::size_t size = 0;       // the chunk's size
  std::size_t requested = 0;  // live blocks: bytes asked for
  bool ordered = false;       // live blocks: allocated with a stream
  gpumem::Fence fence;        // fenced blocks
};

struct Range {
  std::uintptr_t base = 0;
  std::size_t size = 0;
};

class Model {
 public:
  Model(const gpumem::ArenaOptions& options, TrackingSource& source, const DeviceOracle* oracle)
      : oracle(oracle), options_(options), source_(source) {}

  const DeviceOracle* const oracle;  // may be null

  std::map<std::uintptr_t, Block> live;
  std::map<std::uintptr_t, Block> fenced;
  std::vector<std::uintptr_t> freed;  // bases of blocks freed once, for frees that must be refused
  gpumem::FenceId next_fence = 1;
  gpumem::FenceId resolved = 0;

  // The free ranges of every region in address order: what neither live nor fenced blocks cover.
  // Checks on the way that blocks do not overlap and each lies inside one region.
  std::vector<Range> free_ranges() const {
    std::vector<Range> ranges;
    auto next_live = live.begin();
    auto next_fenced = fenced.begin();
    // The lowest block left of either kind, in address order (both maps are sorted).
    const auto next_block = [&]() -> std::optional<std::pair<std::uintptr_t, std::size_t>> {
      const bool take_live = next_live != live.end() &&
                             (next_fenced == fenced.end() || next_live->first <= next_fenced->first);
      if (take_live) return std::pair{next_live->first, (next_live++)->second.size};
      if (next_fenced != fenced.end()) return std::pair{next_fenced->first, (next_fenced++)->second.size};
      return std::nullopt;
    };
    auto block = next_block();
    for (const auto& [region_base, region_size] : source_.regions) {
      const std::uintptr_t region_end = region_base + region_size;
      check(!block || block->first >= region_base);  // nothing between regions
      std::uintptr_t cursor = region_base;
      for (; block && block->first < region_end; block = next_block()) {
        check(block->first >= cursor && block->second > 0 && block->second <= region_end - block->first);
        if (block->first > cursor) ranges.push_back({cursor, block->first - cursor});
        cursor = block->first + block->second;
      }
      if (cursor < region_end) ranges.push_back({cursor, region_end - cursor});
    }
    check(!block);
    return ranges;
  }

  // What asking the oracle resolves: each stream's fences in id order, up to the first it does not
  // report resolved. Returns how many.
  std::size_t poll_oracle() {
    std::map<std::uintptr_t, std::map<gpumem::FenceId, std::uintptr_t>> queues;  // stream -> id -> base
    for (const auto& [base, block] : fenced) queues[block.fence.stream][block.fence.id] = base;
    std::size_t resolved_now = 0;
    for (const auto& [stream, queue] : queues) {
      for (const auto& [id, base] : queue) {
        if (!oracle->resolves(fenced.at(base).fence)) break;
        fenced.erase(base);
        ++resolved_now;
      }
    }
    return resolved_now;
  }

  // The chunk size a request of `rounded` bytes gets from a free or fenced chunk of `size`.
  std::size_t carved_size(std::size_t size, std::size_t rounded) const {
    const std::size_t rest = size - rounded;
    return rest > 0 && (rest >= rounded || rest >= options_.max_internal_fragmentation) ? rounded : size;
  }

  bool in_some_region(std::uintptr_t address) const {
    auto it = source_.regions.upper_bound(address);
    if (it == source_.regions.begin()) return false;
    --it;
    return address - it->first < it->second;
  }

  std::size_t reserved() const {
    std::size_t total = 0;
    for (const auto& [base, size] : source_.regions) total += size;
    return total;
  }
  static std::size_t total(const std::map<std::uintptr_t, Block>& blocks) {
    std::size_t bytes = 0;
    for (const auto& [base, block] : blocks) bytes += block.size;
    return bytes;
  }

 private:
  const gpumem::ArenaOptions& options_;
  TrackingSource& source_;
};

// Best fit over `candidates` (base -> size): the smallest size >= rounded, lowest base among equals.
template <typename Candidates, typename SizeOf>
std::optional<std::uintptr_t> best_fit(const Candidates& candidates, std::size_t rounded, SizeOf size_of) {
  std::optional<std::uintptr_t> best;
  std::size_t best_size = 0;
  for (const auto& candidate : candidates) {
    const auto [base, size] = size_of(candidate);
    if (size < rounded) continue;
    if (!best || size < best_size || (size == best_size && base < *best)) {
      best = base;
      best_size = size;
    }
  }
  return best;
}

void check_state(const gpumem::BfcArena& arena, const Model& model, const TrackingSource& source) {
  check(arena.validate());
  const std::vector<Range> ranges = model.free_ranges();
  std::size_t in_use = 0, requested = 0, fenced = 0, largest_free = 0;
  for (const auto& [base, block] : model.live) {
    const auto info = arena.find(base);
    check(info.has_value() && info->base == base && info->in_use && info->size == block.size &&
          info->requested == block.requested && info->ordered == block.ordered);
    const auto region = source.regions.find(info->region.base);
    check(region != source.regions.end() && region->second == info->region.size);
    check(base - info->region.base < info->region.size);
    in_use += block.size;
    requested += block.requested;
  }
  for (const auto& [base, block] : model.fenced) {
    const auto info = arena.find(base);
    check(info.has_value() && info->base == base && !info->in_use && info->size == block.size &&
          info->requested == 0);
    check(block.fence.id > model.resolved);
    fenced += block.size;
  }
  for (const Range& range : ranges) {
    const auto info = arena.find(range.base);
    check(info.has_value() && info->base == range.base && info->size == range.size && !info->in_use);
    largest_free = std::max(largest_free, range.size);
  }
  if (!ranges.empty()) {  // any address inside a chunk finds it (a walk of the region: one per step)
    const Range& last = ranges.back();
    const auto info = arena.find(last.base + last.size - 1);
    check(info.has_value() && info->base == last.base && info->size == last.size);
  }
  for (const auto& [base, size] : source.regions) check(arena.owns(base) && arena.owns(base + size - 1));
  check(!arena.owns(gpumem::FakeRegionSource::kBase - 1));
  const std::size_t reserved = model.reserved();
  const gpumem::ArenaStats stats = arena.stats();
  check(stats.bytes_in_use == in_use && stats.bytes_requested == requested && stats.bytes_fenced == fenced);
  check(stats.bytes_reserved == reserved && stats.regions == source.regions.size());
  check(stats.bytes_reserved <= arena.options().limit && stats.bytes_limit == arena.options().limit);
  check(stats.region_reservations - stats.region_releases == stats.regions);
  check(stats.largest_free_block == largest_free);
  check(stats.chunks == model.live.size() + model.fenced.size() + ranges.size());
  check(stats.peak_bytes_in_use >= stats.bytes_in_use && stats.peak_bytes_reserved >= stats.bytes_reserved);
  check(stats.fragmentation >= 0.0 && stats.fragmentation <= 1.0);
  check(arena.has_pending_fences() == !model.fenced.empty());
  check(arena.available() == (reserved - in_use) + (arena.options().limit - reserved));
}

// The out-of-memory report of a refused request adds up to the arena's state.
void check_oom_report(const gpumem::BfcArena& arena, const Model& model, std::size_t bytes) {
  const gpumem::OomReport report = arena.oom_report(bytes);
  const gpumem::ArenaStats& stats = report.stats;
  check(report.requested == bytes && report.rounded >= bytes);
  check(report.free_bytes == stats.bytes_reserved - stats.bytes_in_use);
  std::size_t chunks = 0, in_use = 0, free = 0, live_chunks = 0;
  for (const auto& bin : report.bins) {
    chunks += bin.total_chunks;
    in_use += bin.bytes_in_use;
    free += bin.free_bytes;
    check(bin.total_chunks == bin.chunks_in_use + bin.free_chunks && bin.total_chunks > 0);
  }
  for (const auto& entry : report.in_use_by_size) live_chunks += entry.count;
  check(chunks == stats.chunks && in_use == stats.bytes_in_use && free == report.free_bytes);
  check(live_chunks == model.live.size());
  check(report.occupancy.size() == (stats.bytes_reserved == 0 ? 0 : 100));
  const std::string text = report.render();
  check(!text.empty() && text.back() == '\n');
}

// One allocation, its outcome predicted from bfc_arena.h's order of attempts: the best free fit;
// on a stream, the best fit among the chunks fenced on it; what the oracle resolves, then the best
// free fit again; growth (the best fit among the new regions, certain from a source that never
// refuses while the limit leaves room); else a refusal. Before growth, fences_pending where
// ArenaOptions::fences_before_growth_below_use asks for it and `fenced_memory` allows it.
void allocate(gpumem::BfcArena& arena, Model& model, TrackingSource& source, bool limited_source, std::size_t bytes,
              std::uintptr_t stream, gpumem::FencedMemory fenced_memory = gpumem::FencedMemory::synchronise_first) {
  const gpumem::ArenaOptions& options = arena.options();
  // Refused before anything: more than the limit, or than a chunk record can count (chunk_store.h).
  const bool too_large = bytes > options.limit || bytes > gpumem::detail::Chunk::kMaxRequested;
  const std::size_t rounded = too_large ? 0 : round_up(bytes);
  const std::map<std::uintptr_t, std::size_t> regions_before = source.regions;
  const std::size_t unreserved = round_down(options.limit - model.reserved());
  std::optional<std::uintptr_t> expected;
  std::size_t chunk = 0;  // the size of the chunk the block is carved from
  bool from_fenced = false;
  const auto free_fit = [&] {
    const std::vector<Range> ranges = model.free_ranges();
    expected = best_fit(ranges, rounded, [](const Range& r) { return std::pair{r.base, r.size}; });
    for (const Range& range : ranges) {
      if (expected && range.base == *expected) chunk = range.size;
    }
  };
  if (!too_large) {
    free_fit();
    if (!expected && stream != 0) {
      expected = best_fit(model.fenced, rounded, [&](const auto& entry) {
        return std::pair{entry.first, entry.second.fence.stream == stream ? entry.second.size : 0};
      });
      if (expected) {
        chunk = model.fenced.at(*expected).size;
        from_fenced = true;
      }
    }
    if (!expected && model.oracle != nullptr && !model.fenced.empty() && model.poll_oracle() > 0) free_fit();
  }
  // Growth is certain when the source refuses no size the arena may ask for (at most what the limit
  // leaves): no capacity set, and address space left for all of it.
  const bool growth_certain =
      !too_large && !limited_source && rounded <= unreserved && unreserved <= source.room();
  const double below_use = options.fences_before_growth_below_use;
  const bool fences_first = !too_large && !expected && below_use > 0.0 &&
                            fenced_memory == gpumem::FencedMemory::synchronise_first &&
                            Model::total(model.fenced) >= rounded &&
                            static_cast<double>(Model::total(model.live)) < below_use * static_cast<double>(model.reserved());

  std::uintptr_t out = 0;
  const Status status = arena.allocate(bytes, out, stream, fenced_memory);
  if (fences_first) {
    check(status == Status::fences_pending && source.regions == regions_before);
    return;
  }
  if (status != Status::ok) {
    check(!expected && !growth_certain);
    check(status == (model.fenced.empty() || too_large ? Status::out_of_memory : Status::fences_pending));
    if (model.live.size() % 8 == 0) check_oom_report(arena, model, bytes);
    return;
  }
  check(out != 0 && out % kGranule == 0 && !too_large);
  if (expected) {
    check(out == *expected);
  } else {  // served by growth: the best fit among the regions just reserved (wholly free)
    std::map<std::uintptr_t, std::size_t> fresh;
    for (const auto& [base, size] : source.regions) {
      if (regions_before.count(base) == 0) fresh.emplace(base, size);
    }
    const auto grown_fit = best_fit(fresh, rounded, [](const auto& entry) { return entry; });
    check(grown_fit.has_value() && out == *grown_fit);
    chunk = fresh.at(out);
  }
  const std::size_t size = model.carved_size(chunk, rounded);
  if (from_fenced) {
    const gpumem::Fence fence = model.fenced.at(out).fence;
    model.fenced.erase(out);
    if (size < chunk) model.fenced[out + size] = Block{chunk - size, 0, false, fence};  // the rest stays fenced
  }
  const auto info = arena.find(out);
  check(info.has_value() && info->base == out && info->in_use && info->size == size);
  check(model.live.count(out) == 0);
  model.live[out] = Block{size, bytes, stream != 0, {}};
  std::erase(model.freed, out);
}

std::size_t request_size(gpumem::fuzz::Input& in, std::size_t limit) {
  switch (in.below(5)) {
    case 0: return kGranule * (1 + in.below(16));  // a few sizes, often repeated: ties
    case 1: return kGranule << in.below(24);        // powers of two up to 4 GiB
    case 2: return 1 + in.below(std::size_t{1} << 20);
    case 3: {  // at or near the limit, or a half, quarter, eighth of it; or just past it
      const std::size_t near = (limit >> in.below(4)) + in.below(2);
      const std::size_t below = in.below(1024);
      return near > below ? near - below : 1;
    }
    default: return 1 + (std::size_t{in.take<std::uint16_t>()} << in.below(16));
  }
}

// Frees that must be refused: a freed block again, an address inside a live block, one outside.
void bad_free(gpumem::BfcArena& arena, const Model& model, gpumem::fuzz::Input& in) {
  std::uintptr_t target = 0;
  switch (in.below(3)) {
    case 0:
      if (model.freed.empty()) return;
      target = model.freed[in.below(model.freed.size())];
      break;
    case 1: {
      if (model.live.empty()) return;
      auto it = model.live.begin();
      std::advance(it, static_cast<long>(in.below(model.live.size())));
      target = it->first + 1 + in.below(it->second.size - 1 + 1);  // inside, or just past its end
      break;
    }
    default:
      target = gpumem::FakeRegionSource::kBase - kGranule * (1 + in.below(4));
      break;
  }
  if (model.live.count(target) != 0) return;  // a live block: not a bad free
  bool inside_live = false;
  auto after = model.live.upper_bound(target);
  if (after != model.live.begin()) {
    const auto block = std::prev(after);
    inside_live = target - block->first < block->second.size;
  }
  // deallocate's rules: an aligned address in free or fenced memory is a double free, anything else
  // (interior pointers of live blocks included) not owned.
  const Status expected = model.in_some_region(target) && target % kGranule == 0 && !inside_live
                              ? Status::double_free
                              : Status::not_owned;
  check(arena.deallocate(target) == expected);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gpumem::fuzz::Input in(data, size);
  gpumem::ArenaOptions options;
  const std::uint8_t flags = in.take<std::uint8_t>();
  const std::uint8_t more_flags = in.take<std::uint8_t>();
  options.preallocate = (flags & 1) != 0;
  options.garbage_collection = (flags & 2) != 0;
  // 256 bytes to 16 GiB, so that refusals and growth both happen within a short input; now and then
  // not a multiple of 256.
  const std::size_t unaligned = (flags & 128) != 0 ? in.below(kGranule) : 0;
  options.limit = ((std::size_t{in.take<std::uint16_t>()} + 1) << (8 + in.below(11))) + unaligned;
  if ((flags & 4) != 0) options.preallocation_head_bytes = (std::size_t{in.below(64)} << 12) + unaligned;
  if ((flags & 32) != 0) {
    options.min_growth_bytes = kGranule << in.below(16);
    options.max_internal_fragmentation = kGranule << in.below(20);
  }
  if ((flags & 64) != 0) options.backoff_factor = 0.5;
  // Sizes where doubling and adding overflow: a limit of most of the address space, regions and
  // requests above 2^63; no splitting for the rest's size alone.
  if ((more_flags & 4) != 0) options.limit = std::numeric_limits<std::size_t>::max() >> in.below(8);
  if ((more_flags & 8) != 0) options.max_internal_fragmentation = std::numeric_limits<std::size_t>::max();
  // Synchronise rather than grow while live blocks fill less than a quarter to all of the arena.
  if ((more_flags & 16) != 0) options.fences_before_growth_below_use = static_cast<double>(1 + in.below(4)) / 4;
  const bool limited_source = (flags & 8) != 0;
  gpumem::RegionSourceLimits limits;
  if (limited_source) limits.capacity_bytes = options.limit / 2 + kGranule;  // the driver runs out first
  TrackingSource source(limits);
  source.refuse_releases = (flags & 16) != 0;
  DeviceOracle oracle;
  oracle.throws = (more_flags & 2) != 0;
  DeviceOracle* const oracle_used = (more_flags & 1) != 0 ? &oracle : nullptr;
  {
    gpumem::BfcArena arena(source, options, oracle_used);
    Model model(options, source, oracle_used);
    for (int step = 0; step < 2000 && !in.empty(); ++step) {
      switch (in.below(10)) {
        case 0:
        case 1:
        case 2: {
          const std::size_t bytes = request_size(in, options.limit);
          const std::uintptr_t stream = in.below(3);  // 0: synchronous
          // A caller that cannot synchronise now, where the option would have it synchronise.
          const bool grow_instead = options.fences_before_growth_below_use > 0.0 && in.below(2) == 0;
          allocate(arena, model, source, limited_source, bytes, stream,
                   grow_instead ? gpumem::FencedMemory::grow_instead : gpumem::FencedMemory::synchronise_first);
          break;
        }
        case 3: {  // many blocks of one size at once: hundreds of chunks, so the record table grows
          const std::size_t count = 1 + in.below(64);
          const std::size_t bytes = kGranule * (1 + in.below(4)) - in.below(2);
          const std::uintptr_t stream = in.below(3);
          for (std::size_t i = 0; i < count; ++i) allocate(arena, model, source, limited_source, bytes, stream);
          break;
        }
        case 4:
        case 5: {  // free one live block, fenced or not
          if (model.live.empty()) break;
          auto it = model.live.begin();
          std::advance(it, static_cast<long>(in.below(model.live.size())));
          Block block = it->second;
          if (in.below(2) == 1) {
            block.fence = gpumem::Fence{model.next_fence++, in.below(3)};
            model.fenced[it->first] = block;
          }
          check(arena.deallocate(it->first, block.fence) == Status::ok);
          model.freed.push_back(it->first);
          model.live.erase(it);
          break;
        }
        case 6:  // resolve fences through some id, or let the device pass some (for the oracle)
          if (in.below(2) == 0) {
            model.resolved = std::min<gpumem::FenceId>(model.next_fence - 1, model.resolved + in.below(5));
            arena.resolve_fences_through(model.resolved);
            std::erase_if(model.fenced, [&](const auto& entry) { return entry.second.fence.id <= model.resolved; });
          } else {
            oracle.device_through =
                std::min<gpumem::FenceId>(model.next_fence - 1, oracle.device_through + in.below(5));
          }
          break;
        case 7:
          bad_free(arena, model, in);
          break;
        default: {  // give back wholly free regions: all of them, but those the source keeps
          const std::size_t released_before = source.released_bytes;
          const std::uint64_t refused_before = source.releases_refused;
          const std::size_t released = arena.release_free_regions();
          check(released == source.released_bytes - released_before);
          if (source.releases_refused == refused_before) {
            for (const auto& [base, region_size] : source.regions) {
              const auto it = model.live.lower_bound(base);
              const auto fenced = model.fenced.lower_bound(base);
              check((it != model.live.end() && it->first < base + region_size) ||
                    (fenced != model.fenced.end() && fenced->first < base + region_size));
            }
          }
          break;
        }
      }
      check_state(arena, model, source);
    }
    for (const auto& [base, block] : model.live) check(arena.deallocate(base) == Status::ok);
    check(arena.stats().bytes_in_use == 0);
    check(arena.validate());
    source.refuse_releases = false;
  }
  check(source.regions.empty());  // the destructor gave every region back
  return 0;
}
