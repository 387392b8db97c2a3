// The arena against a reference model under long random operation sequences, and under several
// threads at once.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "arena_test_support.h"

using namespace gpumem;
using namespace gpumem::test;

namespace {

// What the model knows of a live block.
struct LiveBlock {
  std::size_t requested = 0;
  std::size_t size = 0;  // chunk size the arena reported at allocation
};

// A freed block whose fence the model has not seen resolved: the device may still use it.
struct FencedBlock {
  std::size_t size = 0;
  FenceId id = 0;
  std::uintptr_t stream = 0;
};

// The reference model: live and fenced blocks by address plus the counters the arena must agree with.
struct Model {
  std::map<std::uintptr_t, LiveBlock> live;
  std::map<std::uintptr_t, FencedBlock> fenced;
  std::uint64_t num_allocs = 0;
  std::size_t bytes_in_use = 0;
  std::size_t bytes_requested = 0;
  std::size_t peak_bytes_in_use = 0;
  std::size_t largest_alloc_size = 0;

  std::size_t bytes_fenced() const {
    std::size_t sum = 0;
    for (const auto& [base, block] : fenced) sum += block.size;
    return sum;
  }
  void resolve_through(FenceId id) {
    std::erase_if(fenced, [id](const auto& entry) { return entry.second.id <= id; });
  }
};

// A region source that remembers the regions it has handed out, so blocks can be checked against
// what the source really gave rather than against the arena's own view.
class RecordingSource final : public RegionSource {
 public:
  explicit RecordingSource(RegionSourceLimits limits) : inner_(limits) {}
  const RegionSourceLog& log() const noexcept { return inner_.log(); }
  bool holds(std::uintptr_t base, std::size_t size) const {
    const auto next = regions_.upper_bound(base);
    if (next == regions_.begin()) return false;
    const auto region = std::prev(next);
    return base + size <= region->first + region->second;
  }
  const std::map<std::uintptr_t, std::size_t>& regions() const noexcept { return regions_; }

 private:
  Status do_reserve(std::size_t bytes, Region& out) override {
    const Status status = inner_.reserve(bytes, out);
    if (status == Status::ok) regions_.emplace(out.base, out.size);
    return status;
  }
  bool do_release(const Region& region) override {
    regions_.erase(region.base);
    return inner_.release(region);
  }

  FakeRegionSource inner_;
  std::map<std::uintptr_t, std::size_t> regions_;
};

struct Scenario {
  const char* name;
  ArenaOptions options;
  RegionSourceLimits source_limits;
  bool oracle = false;  // fences also resolved by a FenceOracle the arena polls
  std::size_t target_live = 80;  // live blocks the walk hovers around
};

// True if [base, base + size) overlaps a block in `blocks` (a map of disjoint blocks by address).
template <typename Blocks>
bool overlaps(const Blocks& blocks, std::uintptr_t base, std::size_t size) {
  const auto next = blocks.lower_bound(base);
  if (next != blocks.end() && next->first < base + size) return true;
  if (next == blocks.begin()) return false;
  const auto prev = std::prev(next);
  return prev->first + prev->second.size > base;
}

// Checks a newly allocated block against the model and the arena, then records it.
void record_allocation(const BfcArena& arena, const RecordingSource& source, Model& model, std::uintptr_t ptr,
                       std::size_t bytes, std::uintptr_t stream, FenceId resolved_by_oracle) {
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  REQUIRE(ptr % 256 == 0);
  const auto info = arena.find(ptr);
  REQUIRE(info);
  REQUIRE(info->base == ptr);
  REQUIRE(info->in_use);
  REQUIRE(info->requested == bytes);
  REQUIRE(info->size >= rounded);
  if (info->size > rounded) {  // served whole: the split rule must not have applied
    REQUIRE(info->size < 2 * rounded);
    REQUIRE(info->size - rounded < arena.options().max_internal_fragmentation);
  }
  REQUIRE(source.holds(ptr, info->size));  // inside a region the source really handed out
  REQUIRE_FALSE(overlaps(model.live, ptr, info->size));
  // Fenced memory the device may still use is handed out only on the stream that freed it.
  for (auto it = model.fenced.begin(); it != model.fenced.end();) {
    const auto [base, block] = *it;
    if (base >= ptr + info->size || base + block.size <= ptr) {
      ++it;
      continue;
    }
    const bool resolved = block.id <= resolved_by_oracle;
    if (!resolved) {
      REQUIRE(stream != 0);
      REQUIRE(block.stream == stream);
      REQUIRE(base == ptr);  // a fenced chunk is reused from its start, never merged
    }
    it = model.fenced.erase(it);
    // The unused rest of a fenced chunk reused on its stream keeps the fence (the arena may also
    // have resolved it already through the oracle: the model then over-counts, never under-counts).
    if (base == ptr && stream != 0 && block.stream == stream && info->size < block.size) {
      model.fenced.emplace(ptr + info->size, FencedBlock{block.size - info->size, block.id, block.stream});
    }
  }
  model.live.emplace(ptr, LiveBlock{bytes, info->size});
  ++model.num_allocs;
  model.bytes_in_use += info->size;
  model.bytes_requested += bytes;
  model.peak_bytes_in_use = std::max(model.peak_bytes_in_use, model.bytes_in_use);
  model.largest_alloc_size = std::max(model.largest_alloc_size, info->size);
}

// The largest stretch of the source's regions covered by neither a live nor a fenced block: free
// chunks coalesce eagerly and never across a region boundary, so this is the largest free chunk.
std::size_t largest_gap(const RecordingSource& source, const Model& model) {
  std::size_t largest = 0;
  auto live = model.live.begin();
  auto fenced = model.fenced.begin();
  for (const auto& [region_base, region_size] : source.regions()) {
    const std::uintptr_t end = region_base + region_size;
    std::uintptr_t cursor = region_base;
    for (;;) {
      // The next occupied block in address order, from either map.
      const bool live_left = live != model.live.end() && live->first < end;
      const bool fenced_left = fenced != model.fenced.end() && fenced->first < end;
      if (!live_left && !fenced_left) break;
      std::uintptr_t base = 0;
      std::size_t size = 0;
      if (live_left && (!fenced_left || live->first < fenced->first)) {
        base = live->first;
        size = live->second.size;
        ++live;
      } else {
        base = fenced->first;
        size = fenced->second.size;
        ++fenced;
      }
      largest = std::max(largest, base - cursor);
      cursor = base + size;
    }
    largest = std::max(largest, end - cursor);
  }
  return largest;
}

void check_against_model(const BfcArena& arena, const RecordingSource& source, const Model& model, bool oracle) {
  REQUIRE(arena.validate());
  const ArenaStats stats = arena.stats();
  REQUIRE(stats.num_allocs == model.num_allocs);
  REQUIRE(stats.bytes_in_use == model.bytes_in_use);
  REQUIRE(stats.bytes_requested == model.bytes_requested);
  REQUIRE(stats.peak_bytes_in_use == model.peak_bytes_in_use);
  REQUIRE(stats.largest_alloc_size == model.largest_alloc_size);
  // Without an oracle only the model's own resolutions resolve fences, so it knows them exactly;
  // with one, the arena may have resolved more than the model has erased.
  // The same holds for the largest free chunk, which such over-counted fences can only shrink.
  if (oracle) {
    REQUIRE(stats.bytes_fenced <= model.bytes_fenced());
    REQUIRE(stats.largest_free_block >= largest_gap(source, model));
  } else {
    REQUIRE(stats.bytes_fenced == model.bytes_fenced());
    REQUIRE(stats.largest_free_block == largest_gap(source, model));
  }
  REQUIRE(stats.bytes_reserved == source.log().live_bytes);
  REQUIRE(stats.regions == source.log().live_regions);
  REQUIRE(stats.region_reservations == source.log().reservations);
  REQUIRE(stats.region_releases == source.log().releases);
  REQUIRE(stats.bytes_reserved <= stats.bytes_limit);
  REQUIRE(stats.bytes_in_use + stats.bytes_fenced + stats.largest_free_block <= stats.bytes_reserved);
  REQUIRE(stats.fragmentation >= 0.0);
  REQUIRE(stats.fragmentation <= 1.0);
}

// Random sizes: mostly small, sometimes up to 1 MiB, rarely up to 8 MiB.
std::size_t random_size(std::mt19937_64& rng) {
  const auto pick = rng() % 100;
  if (pick < 70) return 1 + rng() % (16 * kKiB);
  if (pick < 97) return 1 + rng() % kMiB;
  return 1 + rng() % (8 * kMiB);
}

// Returns the most chunk records the arena held at once.
std::size_t run_model(const Scenario& scenario, std::uint64_t seed, int operations) {
  RecordingSource source(scenario.source_limits);
  ThresholdOracle oracle;
  BfcArena arena(source, scenario.options, scenario.oracle ? &oracle : nullptr);
  Model model;
  std::mt19937_64 rng(seed);
  std::vector<std::uintptr_t> order;  // live pointers, for picking one at random
  FenceId next_fence = 1;
  constexpr std::uintptr_t kStreams[] = {0, 0x100, 0x200};
  std::size_t peak_chunks = 0;

  for (int step = 0; step < operations; ++step) {
    const bool allocate = order.empty() || rng() % 100 < (order.size() < scenario.target_live ? 60u : 40u);
    if (allocate) {
      const std::size_t bytes = random_size(rng);
      const std::uintptr_t stream = kStreams[rng() % 3];
      std::uintptr_t ptr = 0;
      Status status = arena.allocate(bytes, ptr, stream);
      if (status == Status::fences_pending) {
        REQUIRE(arena.has_pending_fences());
        REQUIRE(model.bytes_fenced() > 0);
        arena.resolve_fences_through(next_fence);
        model.resolve_through(next_fence);
        REQUIRE_FALSE(arena.has_pending_fences());
        status = arena.allocate(bytes, ptr, stream);
      }
      if (status == Status::ok) {
        record_allocation(arena, source, model, ptr, bytes, stream, oracle.resolved_through);
        order.push_back(ptr);
      } else {
        REQUIRE(status == Status::out_of_memory);
        // No free chunk fits: the best-fit search missed nothing.
        REQUIRE(arena.stats().largest_free_block < (bytes + 255) / 256 * 256);
      }
    } else {
      const std::size_t index = rng() % order.size();
      const std::uintptr_t ptr = order[index];
      order[index] = order.back();
      order.pop_back();
      const auto block = model.live.find(ptr);
      REQUIRE(block != model.live.end());
      Fence fence;
      if (rng() % 4 == 0) fence = Fence{next_fence++, kStreams[rng() % 3]};
      REQUIRE(arena.deallocate(ptr, fence) == Status::ok);
      REQUIRE(arena.deallocate(ptr) == Status::double_free);
      if (!fence.empty()) model.fenced.emplace(ptr, FencedBlock{block->second.size, fence.id, fence.stream});
      model.bytes_in_use -= block->second.size;
      model.bytes_requested -= block->second.requested;
      model.live.erase(block);
      if (rng() % 64 == 0) {
        // Resolve a prefix of the fences issued so far (possibly none, never past the last).
        const FenceId through = next_fence - 1 - std::min<FenceId>(next_fence - 1, rng() % 8);
        if (scenario.oracle) {
          oracle.resolved_through = std::max(oracle.resolved_through, through);
        } else {
          arena.resolve_fences_through(through);
          model.resolve_through(through);
        }
      }
    }
    check_against_model(arena, source, model, scenario.oracle);
    peak_chunks = std::max(peak_chunks, arena.stats().chunks);
  }
  for (const std::uintptr_t ptr : order) REQUIRE(arena.deallocate(ptr) == Status::ok);
  arena.resolve_fences_through(next_fence);
  const ArenaStats stats = arena.stats();
  CHECK(stats.bytes_in_use == 0);
  CHECK(stats.bytes_fenced == 0);
  CHECK(stats.chunks == stats.regions);  // everything coalesced back to one chunk per region
  CHECK(arena.validate());
  if (scenario.oracle) CHECK_FALSE(oracle.asked.empty());
  return peak_chunks;
}

}  // namespace

TEST_CASE("randomized operations agree with the reference model", "[arena][random]") {
  ArenaOptions preallocate = preallocated(96 * kMiB);
  ArenaOptions growth = growing(96 * kMiB, true);
  ArenaOptions tight = preallocated(96 * kMiB);
  tight.max_internal_fragmentation = 64 * kKiB;
  const Scenario scenarios[] = {
      {"preallocate", preallocate, {}},
      {"growth with garbage collection and a capped source", growth, {48 * kMiB, 80 * kMiB}},
      {"preallocate, low fragmentation threshold", tight, {}},
      {"preallocate, fences resolved by an oracle", preallocate, {}, true},
  };
  const std::uint64_t seeds[] = {1, 2, 3, 4};
  for (std::size_t index = 0; index < std::size(seeds); ++index) {
    DYNAMIC_SECTION(scenarios[index].name << ", seed " << seeds[index]) {
      run_model(scenarios[index], seeds[index], 100'000);
    }
  }
}

TEST_CASE("randomized operations agree with the model while the record table grows", "[arena][random]") {
  // Thousands of chunks: the record table (1024 slots at first, at most 80% of them used) rehashes
  // several times, with free, in-use and fenced chunks, fence queues and regions following it.
  Scenario scenario{"many live blocks", preallocated(std::size_t{1} << 30), {}};
  scenario.target_live = 1500;
  Scenario grown{"many live blocks, growth", growing(std::size_t{1} << 30), {}};
  grown.options.min_growth_bytes = 4 * kMiB;  // many regions, whose first records move too
  grown.target_live = 1500;
  for (const Scenario& each : {scenario, grown}) {
    // Over 1638 records at once: the table rehashed at least twice (at 820 and 1639 live records).
    DYNAMIC_SECTION(each.name) { CHECK(run_model(each, 5, 12'000) > 1638); }
  }
}

TEST_CASE("several threads hammer one arena over host memory", "[arena][threads]") {
  HostRegionSource source;
  BfcArena arena(source, preallocated(64 * kMiB));
  constexpr int kThreads = 4;
  constexpr int kOperations = 20'000;
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<FenceId> fence_ids{1};
  std::atomic<int> failures{0};

  auto worker = [&](int thread) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(thread) + 100);
    std::vector<std::pair<std::uintptr_t, std::size_t>> mine;
    const auto tag = static_cast<unsigned char>(0x10 + thread);
    for (int step = 0; step < kOperations; ++step) {
      if (mine.empty() || (mine.size() < 64 && rng() % 2 == 0)) {
        const std::size_t bytes = 1 + rng() % (4 * kKiB);
        std::uintptr_t ptr = 0;
        Status status = arena.allocate(bytes, ptr);
        if (status == Status::fences_pending) {
          arena.resolve_fences_through(fence_ids.load());
          status = arena.allocate(bytes, ptr);
        }
        if (status != Status::ok) {
          if (status != Status::fences_pending) ++failures;  // another thread may fence meanwhile
          continue;
        }
        std::memset(reinterpret_cast<void*>(ptr), tag, bytes);
        mine.emplace_back(ptr, bytes);
        ++allocations;
      } else {
        const std::size_t index = rng() % mine.size();
        const auto [ptr, bytes] = mine[index];
        mine[index] = mine.back();
        mine.pop_back();
        const auto* memory = reinterpret_cast<const unsigned char*>(ptr);
        // Another thread writing into this block would mean two live blocks overlap.
        if (memory[0] != tag || memory[bytes / 2] != tag || memory[bytes - 1] != tag) ++failures;
        const Fence fence = rng() % 3 == 0 ? Fence{fence_ids.fetch_add(1), 0} : Fence{};
        if (arena.deallocate(ptr, fence) != Status::ok) ++failures;
        if (rng() % 100 == 0) arena.resolve_fences_through(fence_ids.load() - 1);
      }
    }
    for (const auto& block : mine) {
      if (arena.deallocate(block.first) != Status::ok) ++failures;
    }
  };
  // Readers run beside the writers: every snapshot they take must be self-consistent.
  std::atomic<bool> writers_done{false};
  std::atomic<std::uint64_t> snapshots{0};
  auto reader = [&] {
    while (!writers_done.load()) {
      const ArenaStats stats = arena.stats();
      if (stats.bytes_in_use + stats.bytes_fenced + stats.largest_free_block > stats.bytes_reserved) ++failures;
      const auto info = arena.find(1);
      if (info) ++failures;  // host memory at address 1 belongs to no region
      const OomReport report = arena.oom_report(128 * kMiB);
      if (report.stats.bytes_in_use > report.stats.bytes_reserved) ++failures;
      if (!arena.validate()) ++failures;
      ++snapshots;
    }
  };
  std::thread observer(reader);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) threads.emplace_back(worker, thread);
  for (std::thread& thread : threads) thread.join();
  writers_done = true;
  observer.join();
  CHECK(snapshots.load() > 0);

  CHECK(failures.load() == 0);
  arena.resolve_fences_through(fence_ids.load());
  const ArenaStats stats = arena.stats();
  CHECK(stats.num_allocs == allocations.load());
  CHECK(stats.bytes_in_use == 0);
  CHECK(stats.bytes_fenced == 0);
  CHECK(stats.chunks == 1);
  CHECK(arena.validate());
}
