// The arena's allocation paths: allocate, deallocate, fences, growth and garbage collection.
#include "bfc_arena.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "checked_size.h"

namespace gpumem {

using detail::Chunk;
using detail::ChunkHandle;
using detail::ChunkState;
using detail::kGranule;
using detail::kNoChunk;

namespace {

// Above this many chunks the debug assertions skip the O(chunks) full check.
constexpr std::size_t kDebugCheckMaxChunks = 64;

bool options_are_valid(const ArenaOptions& options) {
  return options.limit >= kGranule && options.backoff_factor > 0.0 && options.backoff_factor < 1.0 &&
         options.min_growth_bytes > 0 && options.block_alignment >= kGranule &&
         (options.block_alignment & (options.block_alignment - 1)) == 0 &&
         options.fences_before_growth_below_use >= 0.0 && options.fences_before_growth_below_use <= 1.0 &&
         options.idle_slack >= 0.0 && options.trim_calls_per_allocation >= 0.0 &&
         options.trim_burst_calls >= 0.0;  // NaN fails too
}

// Region records set aside at the first growth: arenas hold few regions.
constexpr std::size_t kInitialRegionRecords = 8;
// Idle-granule candidates kept before a walk over every chunk replaces them (when there are fewer
// chunks than this).
constexpr std::size_t kMinIdleCandidates = 1024;

// The oracle is user code that must not throw; should one throw anyway, the fence counts as pending.
bool ask_oracle(FenceOracle& oracle, const Fence& fence) noexcept {
  try {
    return oracle.is_resolved(fence);
  } catch (...) {
    return false;
  }
}

// What preallocation reserves in all: preallocation_bytes, or the whole limit.
std::size_t preallocation_target(const ArenaOptions& options) {
  return options.preallocation_bytes > 0 ? std::min(options.preallocation_bytes, options.limit) : options.limit;
}

// The first region size when preallocating: the whole target, or its head (growth sizes each region
// by its request instead). A resizable source needs no head: its free end can be given back.
std::size_t first_region_bytes(const ArenaOptions& options, std::size_t resize_granule) {
  if (!options.preallocate) return 0;
  const std::size_t target = preallocation_target(options);
  if (resize_granule != 0) return target / resize_granule * resize_granule;
  const std::size_t head = detail::round_down(options.preallocation_head_bytes);
  return head > 0 && head < target ? head : detail::round_down(target);
}

// A source's granule, taken as 0 (fixed-size regions) unless it is a power of two that is a multiple
// of the arena's granule, as region_source.h requires.
std::size_t usable_resize_granule(const RegionSource& source) {
  const std::size_t granule = source.resize_granule();
  return granule >= kGranule && (granule & (granule - 1)) == 0 ? granule : 0;
}

std::size_t round_up_to(std::size_t bytes, std::size_t unit) { return (bytes + unit - 1) / unit * unit; }

// The first of sorted, disjoint unmapped ranges that ends after `at`: the one holding `at`, or the
// next. (A function, not a lambda in each member: the thread-safety analysis does not follow the
// arena's lock into lambdas.)
template <class Holes>
auto first_hole_ending_after(Holes& holes, std::uintptr_t at) {
  return std::upper_bound(holes.begin(), holes.end(), at,
                          [](std::uintptr_t address, const Region& hole) { return address < hole.base + hole.size; });
}

// The first of the loans (sorted by borrowed granule) whose borrowed granule is at or after `at`.
template <class Loans>
auto first_loan_from(Loans& loans, std::uintptr_t at) {
  return std::lower_bound(loans.begin(), loans.end(), at,
                          [](const auto& loan, std::uintptr_t address) { return loan.borrower < address; });
}

}  // namespace

BfcArena::BfcArena(RegionSource& source, ArenaOptions options, FenceOracle* oracle)
    : source_(source),
      options_(options),
      oracle_(oracle),
      options_valid_(options_are_valid(options)),
      resize_granule_(usable_resize_granule(source)),
      lends_(resize_granule_ != 0 && source.lends()) {
  MutexLock lock(mutex_);
  next_region_bytes_ = options_valid_ ? first_region_bytes(options_, resize_granule_) : 0;
  counters_.bytes_limit = options_.limit;
  trim_credit_ = options_.trim_burst_calls;
  idle_slack_ = options_.idle_slack;
  // Idle memory stays mapped until the soft target or the limit asks for it, so the candidates
  // list fills up to its cap between scans: its room is made once, here, not on the hot path.
  if (resize_granule_ != 0) {
    try {
      idle_candidates_.reserve(kMinIdleCandidates);
    } catch (...) {  // bad_alloc: the list grows when it must, or scans go over every chunk
    }
  }
}

BfcArena::~BfcArena() {
  MutexLock lock(mutex_);
  for (const RegionRecord& record : regions_) release_region(record.region);
}

const ArenaOptions& BfcArena::options() const noexcept { return options_; }

Status BfcArena::allocate(std::size_t bytes, std::uintptr_t& out, std::uintptr_t stream,
                          FencedMemory fenced) noexcept {
  if (bytes == 0) return Status::zero_size;
  if (!options_valid_) return Status::invalid_argument;
  MutexLock lock(mutex_);
  const Status status = allocate_locked(bytes, stream, fenced, out);
  source_refused_ = false;
  if (!ended_loans_.empty()) settle_loans();
  assert(debug_check());
  return status;
}

Status BfcArena::allocate_locked(std::size_t bytes, std::uintptr_t stream, FencedMemory fenced,
                                 std::uintptr_t& out) {
  // Also keeps rounding from overflowing, and the requested count within its record's bits.
  if (bytes > options_.limit || bytes > Chunk::kMaxRequested) return Status::out_of_memory;
  // Every path below ends in carve(), which needs a record for the split-off rest; securing it
  // first is what keeps the paths from failing halfway.
  if (!reserve_records(1)) return Status::out_of_memory;
  const Request request{round_up_to(bytes, options_.block_alignment), bytes, stream != 0,
                        fenced == FencedMemory::synchronise_first};
  const std::size_t rounded = request.rounded;
  if (take_free(request, out)) return Status::ok;
  if (stream != 0 && take_fenced_on_stream(request, stream, out)) return Status::ok;
  if (oracle_ != nullptr && fenced_.chunks() > 0 && poll_oracle() > 0 && take_free(request, out)) {
    return Status::ok;
  }
  if (fences_first(request)) return Status::fences_pending;
  Growth growth = extend(rounded);
  if (growth == Growth::grew && options_.preallocate && options_.preallocation_head_bytes > 0 &&
      resize_granule_ == 0 && counters_.regions == 1 && counters_.bytes_reserved < preallocation_target(options_)) {
    // Preallocating head + rest: the rest at once too (next_region_bytes_ is what the limit leaves).
    // Refused even at the backed-off sizes, the arena makes do with what it has.
    extend(kGranule);
  }
  // A resizable source's one region cannot make room for itself by shrinking.
  if (growth == Growth::refused && !options_.preallocate && options_.garbage_collection &&
      resize_granule_ == 0 && release_free_regions_locked() > 0) {
    growth = extend(rounded);
  }
  if (growth == Growth::grew && take_free(request, out)) return Status::ok;
  if (growth == Growth::no_host_memory) return Status::out_of_memory;
  return fenced_.chunks() > 0 ? Status::fences_pending : Status::out_of_memory;
}

bool BfcArena::map_for_request(ChunkHandle handle, std::size_t rounded) {
  const Chunk& chunk = chunks_[handle];
  const std::uintptr_t base = chunk.base;
  const std::uintptr_t end = chunk.base + chunk.size;
  return map_under(base, splits(chunk.size, rounded) ? rounded : chunk.size,
                   base / resize_granule_ * resize_granule_, round_up_to(end, resize_granule_));
}

// Where the best fit needs memory mapped, the next larger fits that need none are looked at (a few).
constexpr int kMappedAlternatives = 4;

ChunkHandle BfcArena::mapped_alternative(ChunkHandle best, std::size_t rounded) const {
  std::size_t size = chunks_[best].size;
  for (int tries = 0; tries < kMappedAlternatives && size < std::numeric_limits<std::size_t>::max(); ++tries) {
    const ChunkHandle other = free_.best_fit(chunks_, size + 1);
    if (other == kNoChunk) break;
    if (!needs_mapping(other, rounded)) return other;
    size = chunks_[other].size;
  }
  return kNoChunk;
}

bool BfcArena::take_free(const Request& request, std::uintptr_t& out) {
  ChunkHandle handle = free_.best_fit(chunks_, request.rounded);
  if (handle == kNoChunk) return false;
  // Whether the block needs memory mapped under it: asked once (most blocks need none).
  bool unbacked = !unmapped_.empty() && needs_mapping(handle, request.rounded);
  // Growth mode: memory mapped already serves before more is mapped. Preallocated, the limit holds
  // what it holds anyway: the best fit, which packs blocks tightest.
  if (unbacked && !options_.preallocate) {
    if (const ChunkHandle mapped = mapped_alternative(handle, request.rounded); mapped != kNoChunk) {
      handle = mapped;
      unbacked = false;
    }
  }
  if (unbacked) {
    // Fenced memory first, where the options ask for it (the caller reports fences_pending).
    if (fences_first(request)) return false;
    // The block must have memory behind it before it is handed out; the chunk is still free (and
    // indexed) here, so a refusal leaves nothing to undo. Lending may rehash the records: the chunk
    // is found again by its base (lending never cuts into it).
    const std::uintptr_t chosen = chunks_[handle].base;
    const bool mapped = map_for_request(handle, request.rounded);
    handle = chunks_.find(chosen);
    if (!mapped) {
      // What was mapped under it before the refusal stays mapped, idle.
      note_idle_candidate(handle);
      // The limit leaves too little to map under the best fit; the free end (just grown, say) may
      // need less.
      const ChunkHandle tail = chunks_.find(tail_base_);
      if (tail == kNoChunk || tail == handle || chunks_.state(tail) != ChunkState::free ||
          chunks_[tail].size < request.rounded) {
        return false;
      }
      const bool tail_mapped = map_for_request(tail, request.rounded);
      handle = chunks_.find(tail_base_);
      if (!tail_mapped) {
        note_idle_candidate(handle);
        return false;
      }
    }
  }
  free_.erase(chunks_, handle);
  carve(handle, request, false);
  out = chunks_[handle].base;
  return true;
}

// Chunks fenced on `stream` are safe for work ordered after the free on that same stream. This path
// runs only on a miss of the free index; it scans the stream's queue for the best fit.
bool BfcArena::take_fenced_on_stream(const Request& request, std::uintptr_t stream, std::uintptr_t& out) {
  const std::size_t rounded = request.rounded;
  const detail::FenceQueues::Queue* queue = fenced_.find(stream);
  if (queue == nullptr) return false;
  ChunkHandle best = kNoChunk;
  for (ChunkHandle node = queue->head; node != kNoChunk; node = chunks_[node].right) {
    const Chunk& chunk = chunks_[node];
    if (chunk.size < rounded) continue;
    if (best == kNoChunk || chunk.size < chunks_[best].size ||
        (chunk.size == chunks_[best].size && chunk.base < chunks_[best].base)) {
      best = node;
    }
  }
  if (best == kNoChunk) return false;
  fenced_.remove(chunks_, best);
  counters_.bytes_fenced -= chunks_[best].size;
  carve(best, request, true);
  out = chunks_[best].base;
  return true;
}

bool BfcArena::splits(std::size_t size, std::size_t rounded) const noexcept {
  const std::size_t rest_size = size - rounded;
  // rest >= rounded is chunk >= 2 * rounded without the doubling, which overflows for 2^63.
  return rest_size > 0 && (rest_size >= rounded || rest_size >= options_.max_internal_fragmentation);
}

void BfcArena::carve(ChunkHandle handle, const Request& request, bool was_fenced) {
  const std::size_t rounded = request.rounded;
  const std::size_t requested = request.requested;
  const std::size_t size = chunks_[handle].size;
  const std::size_t rest_size = size - rounded;
  if (splits(size, rounded)) {
    // Reserved by allocate_locked: cannot fail.
    const ChunkHandle rest = split_chunk(handle, rounded, was_fenced ? ChunkState::fenced : ChunkState::free);
    if (was_fenced) {
      // The remainder may still be in use by the device: it keeps the fence.
      chunks_.set_fence(rest, chunks_.fence(handle));
      fenced_.push(chunks_, rest);
      counters_.bytes_fenced += rest_size;
    } else {
      // The chunk was coalesced, so its right neighbour is not free: the rest needs no merge.
      free_.insert(chunks_, rest);
      note_idle_candidate(rest);
    }
  }
  Chunk& chunk = chunks_[handle];
  chunks_.set_state(handle, ChunkState::in_use);
  if (was_fenced) chunks_.set_fence(handle, Fence{});
  chunk.set_requested(requested, request.ordered);

  ArenaStats& c = counters_;
  ++c.num_allocs;
  c.bytes_in_use += chunk.size;
  c.peak_bytes_in_use = std::max(c.peak_bytes_in_use, c.bytes_in_use);
  c.bytes_requested += requested;
  c.largest_alloc_size = std::max(c.largest_alloc_size, chunk.size);  // as XLA: the chunk handed out
}

Status BfcArena::deallocate(std::uintptr_t ptr, Fence fence) noexcept {
  MutexLock lock(mutex_);
  const ChunkHandle handle = chunks_.find(ptr);
  if (handle == kNoChunk || chunks_.state(handle) != ChunkState::in_use) return classify_bad_free(ptr);
  if (!lenders_.empty() && is_lender(ptr)) return Status::not_owned;  // no caller was handed it
  // A fence on a new stream needs a queue: secured before anything changes.
  if (!fence.empty() && !fenced_.reserve(fence.stream)) return Status::out_of_memory;
  Chunk& chunk = chunks_[handle];
  counters_.bytes_in_use -= chunk.size;
  counters_.bytes_requested -= chunk.requested();
  chunk.left = chunk.right = kNoChunk;  // no longer the requested count: links from here on
  if (fence.empty()) {
    chunks_.set_state(handle, ChunkState::free);
    const ChunkHandle merged = coalesce(handle);
    free_.insert(chunks_, merged);
    note_idle_candidate(merged);
  } else {
    chunks_.set_state(handle, ChunkState::fenced);
    chunks_.set_fence(handle, fence);
    counters_.bytes_fenced += chunk.size;
    fenced_.push(chunks_, handle);
  }
  assert(debug_check());
  return Status::ok;
}

void BfcArena::absorb_next(ChunkHandle low) {
  Chunk& chunk = chunks_[low];
  const ChunkHandle high = chunk.next;
  const Chunk& next = chunks_[high];
  if (next.base == tail_base_) tail_base_ = chunk.base;
  chunk.size += next.size;
  chunk.next = next.next;
  if (next.next != kNoChunk) chunks_.set_prev(next.next, low);
  chunks_.destroy(high);
}

ChunkHandle BfcArena::coalesce(ChunkHandle handle) {
  const ChunkHandle next = chunks_[handle].next;
  if (next != kNoChunk && chunks_.state(next) == ChunkState::free) {
    free_.erase(chunks_, next);
    absorb_next(handle);
  }
  const ChunkHandle prev = chunks_.prev(handle);
  if (prev != kNoChunk && chunks_.state(prev) == ChunkState::free) {
    free_.erase(chunks_, prev);
    absorb_next(prev);
    return prev;
  }
  return handle;
}

void BfcArena::resolve_chunk(ChunkHandle handle) {
  fenced_.remove(chunks_, handle);
  Chunk& chunk = chunks_[handle];
  counters_.bytes_fenced -= chunk.size;
  chunks_.set_state(handle, ChunkState::free);
  chunks_.set_fence(handle, Fence{});
  const ChunkHandle merged = coalesce(handle);
  free_.insert(chunks_, merged);
  note_idle_candidate(merged);
}

void BfcArena::resolve_fences_through(FenceId id) noexcept {
  MutexLock lock(mutex_);
  for (std::size_t index = 0; index < fenced_.queue_count(); ++index) {
    ChunkHandle head = kNoChunk;
    while ((head = fenced_.queue(index).head) != kNoChunk && chunks_.fence(head).id <= id) {
      resolve_chunk(head);
    }
  }
  fenced_.drop_empty_queues();
  assert(debug_check());
}

// Asks the oracle about each queue's oldest fences. Work on one stream completes in order, so a
// queue is examined only up to its first unresolved fence.
std::size_t BfcArena::poll_oracle() {
  std::size_t resolved = 0;
  for (std::size_t index = 0; index < fenced_.queue_count(); ++index) {
    ChunkHandle head = kNoChunk;
    while ((head = fenced_.queue(index).head) != kNoChunk) {
      if (!ask_oracle(*oracle_, chunks_.fence(head))) break;
      resolve_chunk(head);
      ++resolved;
    }
  }
  fenced_.drop_empty_queues();
  return resolved;
}

// Reserves a region big enough for `rounded` (XLA's Extend): when preallocating, what the limit
// leaves (the head first, doubled as needed to hold the request), backed off at backoff_factor while
// the source refuses; when growing, the request, at least min_growth_bytes. Every size is capped by
// what the limit leaves, and the last attempt is exactly the request.
BfcArena::Growth BfcArena::extend(std::size_t rounded) {
  if (resize_granule_ != 0) return extend_in_place(rounded);
  const std::size_t available = detail::round_down(options_.limit - counters_.bytes_reserved);
  if (rounded > available) return Growth::refused;
  // The new region's chunk record, the record of the chunk take_free will split off it, and the
  // region's own record are secured before the source is asked: a region that could not be recorded
  // would leak.
  if (!reserve_records(2) || !reserve_region_record()) return Growth::no_host_memory;
  std::size_t bytes = detail::round_up(std::min(options_.min_growth_bytes, available));
  const bool preallocation = preallocating();
  if (preallocation) {
    while (rounded > next_region_bytes_) {
      next_region_bytes_ =
          next_region_bytes_ == 0 || next_region_bytes_ > available / 2 ? available : next_region_bytes_ * 2;
    }
    bytes = next_region_bytes_;
  }
  bytes = std::max(std::min(bytes, available), rounded);
  Region region;
  while (reserve_region(bytes, region) != Status::ok) {
    ++counters_.region_refusals;
    if (bytes == rounded) return Growth::refused;
    const auto smaller = preallocation ? detail::round_down(static_cast<std::size_t>(
                                                    static_cast<double>(bytes) * options_.backoff_factor))
                                              : rounded;
    bytes = std::max(std::min(smaller, bytes - kGranule), rounded);
  }
  if (region.base == 0 || region.base % options_.block_alignment != 0 || region.size != bytes) {
    // A source breaking its contract: do not build on the region. It was reserved, so it counts as a
    // reservation and a release, keeping reservations - releases equal to the regions held.
    ++counters_.region_reservations;
    ++counters_.region_releases;
    release_region(region);
    return Growth::refused;
  }
  if (preallocation) {
    const std::size_t target = preallocation_target(options_);
    const std::size_t reserved = counters_.bytes_reserved + region.size;
    next_region_bytes_ = reserved < target ? detail::round_down(target - reserved) : 0;
  }
  adopt_region(region);
  return Growth::grew;
}

void BfcArena::adopt_region(const Region& region) {
  const ChunkHandle handle = chunks_.create(region.base, ChunkState::free);
  chunks_[handle].size = region.size;
  free_.insert(chunks_, handle);
  const auto position = std::upper_bound(
      regions_.begin(), regions_.end(), region.base,
      [](std::uintptr_t base, const RegionRecord& record) { return base < record.region.base; });
  regions_.insert(position, RegionRecord{region, handle});  // within the reserved capacity
  if (resize_granule_ != 0) tail_base_ = region.base;
  note_idle_candidate(handle);

  ArenaStats& c = counters_;
  ++c.region_reservations;
  ++c.regions;
  c.bytes_reserved += region.size;
  c.peak_bytes_reserved = std::max(c.peak_bytes_reserved, c.bytes_reserved);
}

// The shortfall: the request less a free chunk at the region's end, in whole granules. Preallocation
// asks for the whole limit first (backed off while refused, like extend()); growth asks for the
// shortfall, at least min_growth_bytes, then exactly the shortfall.
BfcArena::Growth BfcArena::extend_in_place(std::size_t rounded) {
  const std::size_t granule = resize_granule_;
  std::size_t free_tail = 0;
  if (!regions_.empty()) {
    const ChunkHandle tail = chunks_.find(tail_base_);
    if (chunks_.state(tail) == ChunkState::free) free_tail = chunks_[tail].size;
  }
  // A free tail of `rounded` bytes or more is there already: what failed was mapping memory under it
  // (the limit, or the source, refused). Otherwise take_free() found no free chunk of `rounded`
  // bytes, so a free tail is smaller than that.
  if (free_tail >= rounded) return Growth::refused;
  const std::size_t shortfall = round_up_to(rounded - free_tail, granule);
  // What is mapped counts against the limit, not the addresses: idle memory elsewhere in the region
  // can make room (and in growth mode does so before the arena holds more than its soft target).
  if (!regions_.empty()) {
    if (shortfall > options_.limit - counters_.bytes_reserved) {
      unmap_idle(IdleScan::candidates);
    } else if (const std::size_t beyond = beyond_soft_target(rounded, shortfall); beyond > 0) {
      trim_to_soft_target(beyond, 0, 0);
    }
  }
  const std::size_t available = (options_.limit - counters_.bytes_reserved) / granule * granule;
  if (shortfall > available) {
    return lends_ && !regions_.empty() ? grow_for_loans(shortfall, LoanScope::beyond_limit) : Growth::refused;
  }
  // A new chunk after a tail that is not free, and the record take_free will split off.
  if (!reserve_records(2) || !reserve_region_record()) return Growth::no_host_memory;
  // A growing region is mapped only as far as the request needs: the source takes new memory in
  // steps of its own (slabs, backing.h) and keeps the rest for the next growth.
  std::size_t bytes = options_.preallocate && regions_.empty() ? next_region_bytes_
                      : regions_.empty() ? round_up_to(std::min(options_.min_growth_bytes, available), granule)
                                         : shortfall;
  bytes = std::max(std::min(bytes, available), shortfall);
  const bool first = regions_.empty();
  bool made_room = false;
  Region grown;
  while (true) {
    Status status = Status::out_of_memory;
    if (first) {
      status = reserve_region(bytes, grown);
      if (status == Status::ok && (grown.base == 0 || grown.base % granule != 0 ||
                                   grown.base % options_.block_alignment != 0 || grown.size != bytes)) {
        ++counters_.region_reservations;  // a source breaking its contract: as in extend()
        ++counters_.region_releases;
        release_region(grown);
        return Growth::refused;
      }
    } else {
      grown = regions_.front().region;
      try {
        status = source_.grow(grown, bytes);
      } catch (...) {  // a source breaking its contract: take it as a refusal
        status = Status::out_of_memory;
      }
      if (status == Status::ok && (grown.base != regions_.front().region.base ||
                                   grown.size != regions_.front().region.size + bytes)) {
        return Growth::refused;  // the platform's region no longer matches the record: build nothing on it
      }
    }
    if (status == Status::ok) break;
    ++counters_.region_refusals;
    if (bytes == shortfall) {
      // The source refused even the shortfall: its own limit may lie below the arena's (a budget
      // other allocation paths share, or a GPU other processes share). Idle granules elsewhere in the
      // region make room, once.
      if (first) return Growth::refused;
      if (!made_room && unmap_idle(IdleScan::all) > 0) {
        made_room = true;
        continue;
      }
      // Still refused: idle granules of partly used pieces can back the whole shortfall without
      // new memory (the source's limit is then what bounds the idle memory anywhere), once no
      // fenced chunk is left that the caller could reuse by synchronising instead.
      if (!lends_ || fenced_.chunks() > 0) return Growth::refused;
      source_refused_ = true;
      return grow_for_loans(shortfall, LoanScope::whole_shortfall);
    }
    const std::size_t smaller =
        options_.preallocate && first
            ? static_cast<std::size_t>(static_cast<double>(bytes) * options_.backoff_factor) / granule * granule
            : shortfall;
    bytes = std::max(std::min(smaller, bytes - granule), shortfall);
  }
  if (first) {
    adopt_region(grown);
    return Growth::grew;
  }
  regions_.front().region = grown;
  append_to_tail(bytes);
  ++counters_.region_grows;
  return Growth::grew;
}

void BfcArena::append_to_tail(std::size_t bytes, bool backed) {
  const std::uintptr_t end = regions_.front().region.base + regions_.front().region.size;
  if (!backed) note_unmapped(end - bytes, end);
  const ChunkHandle tail = chunks_.find(tail_base_);
  if (chunks_.state(tail) == ChunkState::free) {
    free_.erase(chunks_, tail);
    chunks_[tail].size += bytes;
    free_.insert(chunks_, tail);
    note_idle_candidate(tail);
  } else {  // in use or fenced: the new bytes make a free chunk of their own (record reserved)
    const std::uintptr_t base = chunks_[tail].base + chunks_[tail].size;
    const ChunkHandle added = chunks_.create(base, ChunkState::free);
    chunks_[added].size = bytes;
    chunks_.set_prev(added, tail);
    chunks_[tail].next = added;
    free_.insert(chunks_, added);
    tail_base_ = base;
    note_idle_candidate(added);
  }
  ArenaStats& c = counters_;
  if (!backed) {
    c.bytes_unmapped += bytes;
    return;
  }
  c.bytes_reserved += bytes;
  c.peak_bytes_reserved = std::max(c.peak_bytes_reserved, c.bytes_reserved);
}

std::size_t BfcArena::unmapped_within(std::uintptr_t begin, std::uintptr_t end) const {
  std::size_t bytes = 0;
  auto range = first_hole_ending_after(unmapped_, begin);
  for (; range != unmapped_.end() && range->base < end; ++range) {
    bytes += std::min(end, range->base + range->size) - std::max(begin, range->base);
  }
  return bytes;
}

bool BfcArena::map_under(std::uintptr_t base, std::size_t bytes, std::uintptr_t keep_from, std::uintptr_t keep_to) {
  const std::size_t granule = resize_granule_;
  const std::uintptr_t begin = base / granule * granule;
  const std::uintptr_t end = round_up_to(base + bytes, granule);
  const std::size_t needed = unmapped_within(begin, end);
  if (needed == 0) return true;
  if (needed > options_.limit - counters_.bytes_reserved) {
    unmap_idle(IdleScan::candidates, begin, end);
  } else if (const std::size_t beyond = beyond_soft_target(bytes, needed); beyond > 0) {
    trim_to_soft_target(beyond, begin, end);
  }
  // Granules to back with lent memory: what the limit does not allow once idle pieces are unmapped
  // (all of them where the source refused new memory in this call already).
  std::size_t to_lend = 0;
  if (source_refused_ || needed > options_.limit - counters_.bytes_reserved) {
    if (!lends_) return false;
    unmap_idle(IdleScan::all, begin, end);
    const std::size_t fresh =
        source_refused_ ? 0 : (options_.limit - counters_.bytes_reserved) / granule * granule;
    to_lend = needed > fresh ? (needed - fresh) / granule : 0;
    if (to_lend > 0 && plan_loans(to_lend, std::min(begin, keep_from), std::max(end, keep_to)) < to_lend) {
      return false;
    }
  }
  std::size_t fresh_left = needed - to_lend * granule;
  std::size_t planned = 0;
  Region& region = regions_.front().region;
  bool made_room = false;
  for (std::uintptr_t at = begin; at < end;) {
    // Mapping part of a range splits it in two: room for the extra record first (before `hole`,
    // which growing the vector would leave dangling).
    try {
      unmapped_.reserve(unmapped_.size() + 1);
    } catch (...) {  // bad_alloc
      return false;
    }
    const auto hole = first_hole_ending_after(unmapped_, at);
    if (hole == unmapped_.end() || hole->base >= end) break;
    const std::uintptr_t from = std::max(at, hole->base);
    if (fresh_left == 0) {  // the rest is lent, a granule at a time
      if (planned == loan_plan_.size() || !lend_into(from, loan_plan_[planned])) return false;
      ++planned;
      at = from + granule;
      continue;
    }
    const std::uintptr_t to = std::min({end, hole->base + hole->size, from + fresh_left});
    Status status = Status::out_of_memory;
    try {
      status = source_.map(region, from, to - from);
    } catch (...) {  // a source breaking its contract: take it as a refusal
    }
    if (status != Status::ok) {
      ++counters_.region_refusals;
      // As in extend_in_place: the source's limit may lie below the arena's; idle granules outside
      // this block make room, once (the holes are found again from `from`).
      if (!made_room && unmap_idle(IdleScan::all, begin, end) > 0) {
        made_room = true;
        at = from;
        continue;
      }
      // Still refused: the rest of the block is lent, if idle granules of partly used pieces can
      // back all of it (planned afresh: the plan covers every granule left), once no fenced chunk
      // is left (as in extend_in_place).
      if (!lends_ || fenced_.chunks() > 0) return false;
      source_refused_ = true;
      const std::size_t rest = unmapped_within(from, end) / granule;
      if (plan_loans(rest, std::min(begin, keep_from), std::max(end, keep_to)) < rest) return false;
      planned = 0;
      fresh_left = 0;
      at = from;
      continue;
    }
    ++counters_.region_maps;
    counters_.bytes_reserved += to - from;
    counters_.bytes_unmapped -= to - from;
    counters_.peak_bytes_reserved = std::max(counters_.peak_bytes_reserved, counters_.bytes_reserved);
    note_mapped(from, to);
    fresh_left -= to - from;
    at = to;
  }
  return true;
}

void BfcArena::note_mapped(std::uintptr_t from, std::uintptr_t to) {
  const auto hole = first_hole_ending_after(unmapped_, from);
  const std::uintptr_t hole_end = hole->base + hole->size;
  if (from > hole->base && to < hole_end) {  // the middle: split (capacity secured by the caller)
    hole->size = from - hole->base;
    unmapped_.insert(hole + 1, Region{to, hole_end - to});
  } else if (from > hole->base) {  // the range's end
    hole->size = from - hole->base;
  } else if (to < hole_end) {  // its start
    hole->size = hole_end - to;
    hole->base = to;
  } else {  // all of it
    unmapped_.erase(hole);
  }
}

BfcArena::Growth BfcArena::grow_for_loans(std::size_t shortfall, LoanScope scope) {
  const std::size_t granule = resize_granule_;
  unmap_idle(IdleScan::all);
  const std::size_t fresh =
      scope == LoanScope::whole_shortfall ? 0 : (options_.limit - counters_.bytes_reserved) / granule * granule;
  if (shortfall > fresh) {
    // The block will lie at the region's end: over a free tail chunk, and the addresses grown.
    const Region& region = regions_.front().region;
    const ChunkHandle tail = chunks_.find(tail_base_);
    const std::uintptr_t kept = chunks_.state(tail) == ChunkState::free ? tail_base_ / granule * granule
                                                                         : region.base + region.size;
    const std::size_t granules = (shortfall - fresh) / granule;
    if (plan_loans(granules, kept, std::numeric_limits<std::uintptr_t>::max()) < granules) return Growth::refused;
  }
  // A new chunk after a tail that is not free, and the record take_free will split off.
  if (!reserve_records(2) || !reserve_region_record()) return Growth::no_host_memory;
  try {
    unmapped_.reserve(unmapped_.size() + 1);
  } catch (...) {  // bad_alloc
    return Growth::no_host_memory;
  }
  Region grown = regions_.front().region;
  Status status = Status::out_of_memory;
  try {
    status = source_.grow_unbacked(grown, shortfall);
  } catch (...) {  // a source breaking its contract: take it as a refusal
  }
  if (status != Status::ok) {
    ++counters_.region_refusals;
    return Growth::refused;
  }
  if (grown.base != regions_.front().region.base || grown.size != regions_.front().region.size + shortfall) {
    return Growth::refused;  // the platform's region no longer matches the record: build nothing on it
  }
  regions_.front().region = grown;
  append_to_tail(shortfall, false);
  ++counters_.region_grows;
  return Growth::grew;
}

ChunkHandle BfcArena::split_chunk(ChunkHandle low, std::size_t low_size, ChunkState high_state) {
  const ChunkHandle high = chunks_.create(chunks_[low].base + low_size, high_state);
  Chunk& chunk = chunks_[low];
  Chunk& rest = chunks_[high];
  rest.size = chunk.size - low_size;
  chunks_.set_prev(high, low);
  rest.next = chunk.next;
  if (chunk.next != kNoChunk) chunks_.set_prev(chunk.next, high);
  chunk.next = high;
  chunk.size = low_size;
  if (chunk.base == tail_base_) tail_base_ = rest.base;
  return high;
}

bool BfcArena::is_lender(std::uintptr_t base) const {
  return std::binary_search(lenders_.begin(), lenders_.end(), base) ||
         std::find(ended_loans_.begin(), ended_loans_.end(), base) != ended_loans_.end();
}

// Walks the region's chunks, O(chunks): only where the limit is reached and idle pieces did not
// make room.
std::size_t BfcArena::plan_loans(std::size_t granules, std::uintptr_t keep_from, std::uintptr_t keep_to) {
  const std::size_t granule = resize_granule_;
  loan_plan_.clear();
  try {
    loan_plan_.reserve(granules);
  } catch (...) {  // bad_alloc
    return 0;
  }
  for (ChunkHandle node = regions_.front().first; node != kNoChunk && loan_plan_.size() < granules;
       node = chunks_[node].next) {
    if (chunks_.state(node) != ChunkState::free) continue;
    const Chunk& chunk = chunks_[node];
    for (std::uintptr_t at = round_up_to(chunk.base, granule);
         at + granule <= chunk.base + chunk.size && loan_plan_.size() < granules; at += granule) {
      if ((at + granule > keep_from && at < keep_to) || unmapped_within(at, at + granule) != 0) continue;
      const auto loan = first_loan_from(loans_, at);
      if (loan != loans_.end() && loan->borrower == at) continue;  // borrowed: it goes back by unmapping
      loan_plan_.push_back(at);
    }
  }
  return loan_plan_.size();
}

bool BfcArena::lend_into(std::uintptr_t at, std::uintptr_t lender) {
  const std::size_t granule = resize_granule_;
  // Everything that can fail first: records for cutting the lender out of its chunk, the loan's
  // entries, and room for its lender once the loan ends.
  if (!reserve_records(2)) return false;
  try {
    loans_.reserve(loans_.size() + 1);
    lenders_.reserve(lenders_.size() + 1);
    ended_loans_.reserve(loans_.size() + ended_loans_.size() + 1);
  } catch (...) {  // bad_alloc
    return false;
  }
  // The plan may be stale (a refusal made room since): the lender must still be an idle granule.
  const ChunkHandle holder = chunk_containing(regions_.front(), lender);
  if (holder == kNoChunk || chunks_.state(holder) != ChunkState::free ||
      lender + granule > chunks_[holder].base + chunks_[holder].size || unmapped_within(lender, lender + granule) != 0) {
    return false;
  }
  Status status = Status::out_of_memory;
  try {
    status = source_.lend(regions_.front().region, lender, at);
  } catch (...) {  // a source breaking its contract: take it as a refusal
  }
  if (status != Status::ok) {
    ++counters_.region_refusals;
    return false;
  }
  // The lender's granule leaves its free chunk as an in-use chunk of its own.
  free_.erase(chunks_, holder);
  ChunkHandle out_of_use = holder;
  if (chunks_[holder].base < lender) {
    out_of_use = split_chunk(holder, lender - chunks_[holder].base, ChunkState::free);
    free_.insert(chunks_, holder);
    note_idle_candidate(holder);
  }
  if (chunks_[out_of_use].size > granule) {
    const ChunkHandle rest = split_chunk(out_of_use, granule, ChunkState::free);
    free_.insert(chunks_, rest);
    note_idle_candidate(rest);
  }
  chunks_.set_state(out_of_use, ChunkState::in_use);
  chunks_[out_of_use].set_requested(granule, false);
  loans_.insert(first_loan_from(loans_, at), Loan{at, lender});
  lenders_.insert(std::lower_bound(lenders_.begin(), lenders_.end(), lender), lender);
  note_mapped(at, at + granule);
  counters_.bytes_unmapped -= granule;
  counters_.bytes_lent += granule;
  ++counters_.region_loans;
  return true;
}

std::size_t BfcArena::end_loans_in(std::uintptr_t from, std::uintptr_t to) {
  const auto first = first_loan_from(loans_, from);
  const auto last = first_loan_from(loans_, to);
  for (auto loan = first; loan != last; ++loan) {
    ended_loans_.push_back(loan->lender);  // capacity secured when the loan was made
    lenders_.erase(std::lower_bound(lenders_.begin(), lenders_.end(), loan->lender));
  }
  const std::size_t bytes = static_cast<std::size_t>(last - first) * resize_granule_;
  loans_.erase(first, last);
  return bytes;
}

void BfcArena::settle_loans() {
  for (const std::uintptr_t lender : ended_loans_) {
    const ChunkHandle handle = chunks_.find(lender);
    Chunk& chunk = chunks_[handle];
    chunk.left = chunk.right = kNoChunk;  // no longer the requested count
    chunks_.set_state(handle, ChunkState::free);
    const ChunkHandle merged = coalesce(handle);
    free_.insert(chunks_, merged);
    note_idle_candidate(merged);
  }
  ended_loans_.clear();
}

void BfcArena::note_unmapped(std::uintptr_t begin, std::uintptr_t end) {
  auto next = std::upper_bound(unmapped_.begin(), unmapped_.end(), begin,
                               [](std::uintptr_t at, const Region& hole) { return at < hole.base; });
  const bool joins_prev = next != unmapped_.begin() && (next - 1)->base + (next - 1)->size == begin;
  const bool joins_next = next != unmapped_.end() && next->base == end;
  if (joins_prev && joins_next) {
    (next - 1)->size += (end - begin) + next->size;
    unmapped_.erase(next);
  } else if (joins_prev) {
    (next - 1)->size += end - begin;
  } else if (joins_next) {
    next->size += next->base - begin;
    next->base = begin;
  } else {
    unmapped_.insert(next, Region{begin, end - begin});  // capacity secured by the caller
  }
}

void BfcArena::note_idle_candidate(ChunkHandle handle) noexcept {
  if (resize_granule_ == 0 || idle_scan_all_) return;
  const Chunk& chunk = chunks_[handle];
  // Only whole granules are ever unmapped.
  if (round_up_to(chunk.base, resize_granule_) + resize_granule_ > chunk.base + chunk.size) return;
  // A list longer than the chunks is cheaper to replace by one walk over them.
  if (idle_candidates_.size() >= std::max(kMinIdleCandidates, chunks_.live())) {
    idle_scan_all_ = true;
    idle_candidates_.clear();
    return;
  }
  try {
    idle_candidates_.push_back(chunk.base);
  } catch (...) {  // bad_alloc: the next scan walks every chunk instead
    idle_scan_all_ = true;
    idle_candidates_.clear();
  }
}

Region BfcArena::piece_at(std::uintptr_t at) const {
  Region piece;
  try {
    piece = source_.piece_at(regions_.front().region, at);
  } catch (...) {  // a source breaking its contract: the granule
  }
  if (piece.size == 0 || piece.base > at || at - piece.base >= piece.size || piece.base % resize_granule_ != 0 ||
      piece.size % resize_granule_ != 0) {
    return Region{at / resize_granule_ * resize_granule_, resize_granule_};
  }
  return piece;
}

bool BfcArena::unmap_granules(std::uintptr_t from, std::uintptr_t to, std::size_t& released) {
  // Pieces reaching outside the range hold memory in use (or kept): they stay, and with them the
  // idle granules they hold.
  for (std::uintptr_t at = from; at < to;) {
    const Region first = piece_at(at);
    if (first.base < at) {
      at = first.base + first.size;
      continue;
    }
    std::uintptr_t end = at;
    for (Region piece = first; piece.base == end && piece.size <= to - end;) {
      end += piece.size;
      if (end == to) break;
      piece = piece_at(end);
    }
    if (end == at) return true;  // the piece reaches past the range: nothing more in it
    if (!unmap_pieces(at, end, released)) return false;
    at = end;
  }
  return true;
}

bool BfcArena::unmap_pieces(std::uintptr_t from, std::uintptr_t to, std::size_t& released) {
  if (from >= to) return true;
  try {
    unmapped_.reserve(unmapped_.size() + 1);
  } catch (...) {  // bad_alloc
    return false;
  }
  std::size_t given = 0;
  try {
    given = source_.unmap(regions_.front().region, from, to - from);
  } catch (...) {  // a source breaking its contract: nothing given back
  }
  // A source breaking its contract (more than asked, part of a granule): nothing is recorded.
  if (given == 0 || given > to - from || given % resize_granule_ != 0) return false;
  note_unmapped(from, from + given);
  ++counters_.region_unmaps;
  // Borrowed granules give no memory back: it stays behind their lenders, which go back into use.
  const std::size_t borrowed = loans_.empty() ? 0 : end_loans_in(from, from + given);
  counters_.bytes_reserved -= given - borrowed;
  counters_.bytes_lent -= borrowed;
  counters_.bytes_unmapped += given;
  released += given - borrowed;
  return given == to - from;  // short: the platform refused part way (during a graph capture, say)
}

bool BfcArena::unmap_idle_in(ChunkHandle node, std::uintptr_t kept_from, std::uintptr_t kept_to,
                             std::size_t& released) {
  const std::size_t granule = resize_granule_;
  const Chunk& chunk = chunks_[node];
  const std::uintptr_t end = (chunk.base + chunk.size) / granule * granule;
  // The mapped stretches of the chunk's whole granules lie between its unmapped ranges.
  for (std::uintptr_t at = round_up_to(chunk.base, granule); at < end;) {
    const auto hole = first_hole_ending_after(unmapped_, at);
    if (hole != unmapped_.end() && hole->base <= at) {  // `at` is unmapped already
      at = hole->base + hole->size;
      continue;
    }
    const std::uintptr_t stop = hole != unmapped_.end() ? std::min(end, hole->base) : end;
    // Less the kept granules: what lies before them and what lies after.
    const bool ok = kept_from >= kept_to || stop <= kept_from || at >= kept_to
                        ? unmap_granules(at, stop, released)
                        : unmap_granules(at, std::max(at, kept_from), released) &&
                              unmap_granules(std::min(stop, kept_to), stop, released);
    if (!ok) return false;
    at = stop;
  }
  return true;
}

// IdleScan::all walks the region's chunks, O(chunks): for trimming and garbage collection. The
// allocation paths scan the candidates, O(chunks freed since the last scan).
std::size_t BfcArena::beyond_soft_target(std::size_t rounded, std::size_t needed) const {
  if (options_.preallocate || !(idle_slack_ < std::numeric_limits<double>::infinity())) return 0;
  // What mapping `needed` would add: the memory the source keeps idle serves first.
  const std::size_t idle = source_.idle_bytes();
  const std::size_t fresh = needed > idle ? needed - idle : 0;
  const std::size_t live = std::max(counters_.peak_bytes_in_use, counters_.bytes_in_use + rounded);
  const double slack = static_cast<double>(live) * (1.0 + idle_slack_) + static_cast<double>(options_.min_growth_bytes);
  const std::size_t target = slack >= static_cast<double>(std::numeric_limits<std::size_t>::max())
                                 ? std::numeric_limits<std::size_t>::max()
                                 : static_cast<std::size_t>(slack);
  const std::size_t after = saturating_add(saturating_add(counters_.bytes_reserved, idle), fresh);
  return fresh > 0 && after > target ? after - target : 0;
}

void BfcArena::trim_to_soft_target(std::size_t want, std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  const double earned = static_cast<double>(counters_.num_allocs - trim_credited_at_) * options_.trim_calls_per_allocation;
  trim_credit_ = std::min(options_.trim_burst_calls, trim_credit_ + earned);
  trim_credited_at_ = counters_.num_allocs;
  if (trim_credit_ < 1.0) {  // none left: new memory serves, and the slack widens
    constexpr double kNarrowestWidened = 1.0 / 64;
    constexpr double kWidestSlack = 1.0 / 8;
    if (idle_slack_ < kWidestSlack) {
      idle_slack_ = std::min(kWidestSlack, std::max(kNarrowestWidened, 2 * idle_slack_));
    }
    return;
  }
  const std::uint64_t unmaps_before = counters_.region_unmaps;
  const std::size_t released = unmap_idle(IdleScan::candidates, keep_begin, keep_end, want);
  // Each unmapping call, and each granule unmapped: mapped again where the request lies.
  trim_credit_ -= static_cast<double>(counters_.region_unmaps - unmaps_before) +
                  static_cast<double>(released / resize_granule_);
}

std::size_t BfcArena::unmap_idle(IdleScan scan, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                 std::size_t want) {
  if (resize_granule_ == 0 || regions_.empty() || want == 0) return 0;
  const std::uintptr_t kept_from = keep_begin / resize_granule_ * resize_granule_;
  const std::uintptr_t kept_to = round_up_to(keep_end, resize_granule_);
  std::size_t released = 0;
  if (scan == IdleScan::all || idle_scan_all_) {
    ChunkHandle node = regions_.front().first;
    for (; node != kNoChunk && released < want; node = chunks_[node].next) {
      if (chunks_.state(node) != ChunkState::free) continue;
      if (!unmap_idle_in(node, kept_from, kept_to, released)) return released;  // the list stays as it was
    }
    if (node == kNoChunk) {  // every chunk was looked at: the list starts afresh
      idle_scan_all_ = false;
      idle_candidates_.clear();
    }
  } else {
    std::size_t index = 0;
    for (; index < idle_candidates_.size() && released < want; ++index) {
      const ChunkHandle node = chunks_.find(idle_candidates_[index]);
      // Stale: the chunk merged into its left neighbour (noted itself) or was carved (its rest noted).
      if (node == kNoChunk || chunks_.state(node) != ChunkState::free) continue;
      if (!unmap_idle_in(node, kept_from, kept_to, released)) break;
    }
    // What was not scanned (a refusal stopped it) stays, the refused chunk included.
    idle_candidates_.erase(idle_candidates_.begin(), idle_candidates_.begin() + static_cast<std::ptrdiff_t>(index));
  }
  // The kept granules of a candidate were skipped: should they stay idle (the caller's mapping
  // failed), the caller notes that chunk again.
  return released;
}

bool BfcArena::fences_first(const Request& request) const noexcept {
  if (!request.may_report_fences || fenced_.chunks() == 0 || counters_.bytes_fenced < request.rounded) {
    return false;
  }
  return counters_.bytes_reserved + request.rounded > options_.fences_before_growth_above ||
         (options_.fences_before_growth_below_use > 0.0 &&
          static_cast<double>(counters_.bytes_in_use) <
              options_.fences_before_growth_below_use * static_cast<double>(counters_.bytes_reserved));
}

bool BfcArena::needs_mapping(ChunkHandle handle, std::size_t rounded) const {
  const Chunk& chunk = chunks_[handle];
  const std::size_t bytes = splits(chunk.size, rounded) ? rounded : chunk.size;
  const std::uintptr_t begin = chunk.base / resize_granule_ * resize_granule_;
  return unmapped_within(begin, round_up_to(chunk.base + bytes, resize_granule_)) > 0;
}

bool BfcArena::preallocating() const noexcept {
  return options_.preallocate && counters_.bytes_reserved + counters_.bytes_unmapped < preallocation_target(options_);
}

bool BfcArena::reserve_region_record() {
  if (regions_.size() < regions_.capacity()) return true;
  try {
    regions_.reserve(std::max(kInitialRegionRecords, 2 * regions_.capacity()));
  } catch (...) {  // bad_alloc; the vector is unchanged
    return false;
  }
  return true;
}

bool BfcArena::reserve_records(std::size_t count) {
  switch (chunks_.reserve(count)) {
    case detail::ChunkStore::Reserve::ready: return true;
    case detail::ChunkStore::Reserve::no_memory: return false;
    case detail::ChunkStore::Reserve::relocated: break;
  }
  // The records moved: every handle kept outside them follows.
  free_.relocate(chunks_);
  fenced_.relocate(chunks_);
  for (RegionRecord& record : regions_) record.first = chunks_.relocated(record.first);
  chunks_.end_relocation();
  return true;
}

bool BfcArena::release_region(const Region& region) {
  try {
    return source_.release(region);
  } catch (...) {  // a source breaking its contract: take it as a refusal
    return false;
  }
}

Status BfcArena::reserve_region(std::size_t bytes, Region& out) {
  try {
    return source_.reserve(bytes, out);
  } catch (...) {
    return Status::out_of_memory;
  }
}

std::size_t BfcArena::release_free_regions() noexcept {
  MutexLock lock(mutex_);
  const std::size_t released = release_free_regions_locked();
  assert(debug_check());
  return released;
}

std::optional<std::size_t> BfcArena::try_release_idle(std::size_t want) noexcept {
  if (!mutex_.try_lock()) return std::nullopt;
  if (oracle_ != nullptr && fenced_.chunks() > 0) poll_oracle();
  std::size_t released = 0;
  if (resize_granule_ == 0) {
    released = release_free_regions_locked();  // fixed regions go back whole
  } else if (!regions_.empty()) {
    const auto held = [this]() GPUMEM_REQUIRES(mutex_) { return counters_.bytes_reserved + source_.idle_bytes(); };
    const std::size_t held_before = held();
    unmap_idle(IdleScan::all, 0, 0, want);
    if (!ended_loans_.empty()) {  // their lenders' pieces may now be idle as a whole
      settle_loans();
      unmap_idle(IdleScan::all, 0, 0, want);
      settle_loans();
    }
    try {
      source_.release_idle();
    } catch (...) {  // a source breaking its contract: nothing given back
    }
    released = held_before - std::min(held_before, held());
  }
  assert(debug_check());
  mutex_.unlock();
  return released;
}

std::size_t BfcArena::release_free_regions_locked() {
  // With a resizable source, what goes back is what the arena and its source hold less afterwards:
  // unmapped granules may stay with the source, in pieces still in use.
  const auto held = [this]() GPUMEM_REQUIRES(mutex_) {
    return counters_.bytes_reserved + (resize_granule_ != 0 ? source_.idle_bytes() : 0);
  };
  const std::size_t held_before = held();
  std::size_t released = unmap_idle(IdleScan::all);
  if (!ended_loans_.empty()) {  // their lenders' pieces may now be idle as a whole
    settle_loans();
    unmap_idle(IdleScan::all);
    settle_loans();
  }
  if (resize_granule_ != 0 && !regions_.empty()) {
    try {
      source_.release_idle();  // what the source keeps for the next mapping, where it can go
    } catch (...) {  // a source breaking its contract: nothing given back
    }
    released = held_before - std::min(held_before, held());
  }
  std::size_t kept = 0;
  for (const RegionRecord& record : regions_) {
    const Chunk& first = chunks_[record.first];
    // A region the source refuses to take back is still held: it stays, as it was.
    if (chunks_.state(record.first) != ChunkState::free || first.size != record.region.size ||
        !release_region(record.region)) {
      regions_[kept++] = record;
      continue;
    }
    free_.erase(chunks_, record.first);
    chunks_.destroy(record.first);
    // A resizable source's one region: its unmapped ranges go with it.
    const std::size_t mapped = record.region.size - (resize_granule_ != 0 ? counters_.bytes_unmapped : 0);
    released += mapped;
    ++counters_.region_releases;
    --counters_.regions;
    counters_.bytes_reserved -= mapped;
    if (resize_granule_ != 0) {
      unmapped_.clear();
      counters_.bytes_unmapped = 0;
      idle_candidates_.clear();
      idle_scan_all_ = false;
    }
  }
  regions_.resize(kept);
  if (regions_.empty()) tail_base_ = 0;
  return released;
}

const BfcArena::RegionRecord* BfcArena::region_containing(std::uintptr_t ptr) const {
  auto position = std::upper_bound(
      regions_.begin(), regions_.end(), ptr,
      [](std::uintptr_t address, const RegionRecord& record) { return address < record.region.base; });
  if (position == regions_.begin()) return nullptr;
  --position;
  return ptr - position->region.base < position->region.size ? &*position : nullptr;
}

// Walks the region's chunks: O(chunks in the region), used off the allocation paths only.
ChunkHandle BfcArena::chunk_containing(const RegionRecord& region, std::uintptr_t ptr) const {
  for (ChunkHandle node = region.first; node != kNoChunk; node = chunks_[node].next) {
    const Chunk& chunk = chunks_[node];
    if (ptr - chunk.base < chunk.size) return node;
  }
  return kNoChunk;
}

// A pointer that starts no live chunk. Once freed, a chunk may have merged into its left neighbour,
// so its start is no longer a chunk start: any granule-aligned address inside free (or fenced)
// memory therefore counts as a double free; anything else, interior pointers included, is not owned.
Status BfcArena::classify_bad_free(std::uintptr_t ptr) const {
  const RegionRecord* region = region_containing(ptr);
  if (region == nullptr || ptr % kGranule != 0) return Status::not_owned;
  const ChunkHandle handle = chunk_containing(*region, ptr);
  if (handle != kNoChunk && chunks_.state(handle) != ChunkState::in_use) return Status::double_free;
  return Status::not_owned;
}

bool BfcArena::owns(std::uintptr_t ptr) const noexcept {
  MutexLock lock(mutex_);
  return region_containing(ptr) != nullptr;
}

std::optional<ChunkInfo> BfcArena::find(std::uintptr_t ptr) const noexcept {
  MutexLock lock(mutex_);
  const RegionRecord* region = region_containing(ptr);
  if (region == nullptr) return std::nullopt;
  ChunkHandle handle = chunks_.find(ptr);  // the common case: the start of a chunk
  if (handle == kNoChunk) handle = chunk_containing(*region, ptr);
  if (handle == kNoChunk) return std::nullopt;
  const Chunk& chunk = chunks_[handle];
  const bool in_use = chunks_.state(handle) == ChunkState::in_use;
  return ChunkInfo{chunk.base, chunk.size, in_use ? chunk.requested() : 0, in_use, in_use && chunk.ordered(),
                   region->region};
}

std::size_t BfcArena::available() const noexcept {
  MutexLock lock(mutex_);
  const std::size_t free_in_regions = counters_.bytes_reserved - counters_.bytes_in_use;
  return free_in_regions + (options_.limit - counters_.bytes_reserved);
}

bool BfcArena::has_pending_fences() const noexcept {
  MutexLock lock(mutex_);
  return fenced_.chunks() > 0;
}

ArenaStats BfcArena::stats() const noexcept {
  MutexLock lock(mutex_);
  return stats_locked();
}

bool BfcArena::try_stats(ArenaStats& out) const noexcept {
  if (!mutex_.try_lock()) return false;
  out = stats_locked();
  mutex_.unlock();
  return true;
}

ArenaStats BfcArena::stats_locked() const {
  ArenaStats stats = counters_;
  const ChunkHandle largest = free_.largest(chunks_);
  stats.largest_free_block = largest == kNoChunk ? 0 : chunks_[largest].size;
  const std::size_t not_in_use = stats.bytes_reserved - stats.bytes_in_use;
  // Unmapped addresses are no memory: a free chunk over them counts for what is mapped at most.
  if (resize_granule_ != 0) stats.largest_free_block = std::min(stats.largest_free_block, not_in_use);
  stats.fragmentation =
      not_in_use == 0
          ? 0.0
          : static_cast<double>(not_in_use - stats.largest_free_block) / static_cast<double>(not_in_use);
  stats.chunks = chunks_.live();
  if (resize_granule_ != 0) stats.bytes_pooled = source_.idle_bytes();
  return stats;
}

bool BfcArena::holds_mapped_piece(std::uintptr_t begin, std::uintptr_t end) const {
  for (std::uintptr_t at = begin; at < end;) {
    const auto hole = first_hole_ending_after(unmapped_, at);
    if (hole != unmapped_.end() && hole->base <= at) {
      at = hole->base + hole->size;
      continue;
    }
    const Region piece = piece_at(at);
    if (piece.base >= begin && piece.size <= end - piece.base) return true;
    at = piece.base + piece.size;
  }
  return false;
}

bool BfcArena::idle_candidates_complete() const {
  if (idle_scan_all_ || regions_.empty()) return true;
  // A linear search, not a sorted copy: the check runs on the hot path of debug builds, which makes
  // no heap allocation there (and it runs only on arenas of few chunks).
  const std::size_t granule = resize_granule_;
  for (ChunkHandle node = regions_.front().first; node != kNoChunk; node = chunks_[node].next) {
    if (chunks_.state(node) != ChunkState::free) continue;
    const Chunk& chunk = chunks_[node];
    const std::uintptr_t begin = round_up_to(chunk.base, granule);
    const std::uintptr_t end = (chunk.base + chunk.size) / granule * granule;
    if (!holds_mapped_piece(begin, end)) continue;  // nothing idle to unmap
    if (std::find(idle_candidates_.begin(), idle_candidates_.end(), chunk.base) == idle_candidates_.end()) return false;
  }
  return true;
}

bool BfcArena::validate() const noexcept {
  MutexLock lock(mutex_);
  return validate_locked();
}

bool BfcArena::debug_check() const {
  return chunks_.live() > kDebugCheckMaxChunks || validate_locked();
}

bool BfcArena::validate_locked() const {
  std::size_t chunks = 0, free_chunks = 0, fenced_chunks = 0, lenders = 0;
  std::size_t reserved = 0, in_use = 0, requested = 0, fenced = 0;
  std::uintptr_t previous_end = 0;
  std::uintptr_t last_chunk_base = 0;
  for (const RegionRecord& record : regions_) {
    const Region& region = record.region;
    if (region.base == 0 || region.size == 0 || region.base < previous_end) return false;
    previous_end = region.base + region.size;
    reserved += region.size;
    std::uintptr_t expected = region.base;
    ChunkHandle previous = kNoChunk;
    for (ChunkHandle node = record.first; node != kNoChunk; node = chunks_[node].next) {
      const Chunk& chunk = chunks_[node];
      if (++chunks > chunks_.live()) return false;  // a cycle
      if (chunks_.prev(node) != previous || chunks_.find(chunk.base) != node || chunk.base != expected ||
          chunk.size == 0 || chunk.size % kGranule != 0 || chunk.base + chunk.size > previous_end) {
        return false;
      }
      switch (chunks_.state(node)) {
        case ChunkState::unused: return false;
        case ChunkState::free:
          ++free_chunks;
          if (!chunks_.fence(node).empty()) return false;
          if (previous != kNoChunk && chunks_.state(previous) == ChunkState::free) return false;
          break;
        case ChunkState::in_use:
          if (!lenders_.empty() && std::binary_search(lenders_.begin(), lenders_.end(), chunk.base)) {
            ++lenders;  // out of use for a loan: one granule, counted in bytes_lent
            if (chunk.size != resize_granule_ || chunk.requested() != chunk.size) return false;
            break;
          }
          in_use += chunk.size;
          requested += chunk.requested();
          if (chunk.requested() == 0 || chunk.requested() > chunk.size || !chunks_.fence(node).empty()) {
            return false;
          }
          break;
        case ChunkState::fenced:
          ++fenced_chunks;
          fenced += chunk.size;
          if (chunks_.fence(node).empty()) return false;
          break;
      }
      expected += chunk.size;
      previous = node;
    }
    if (expected != previous_end) return false;
    last_chunk_base = chunks_[previous].base;
  }
  if (resize_granule_ != 0) {
    if (regions_.size() > 1 || tail_base_ != last_chunk_base) return false;
    if (!regions_.empty() && (regions_.front().region.base % resize_granule_ != 0 ||
                              regions_.front().region.size % resize_granule_ != 0)) {
      return false;
    }
    // Unmapped ranges: whole granules, sorted, apart, each inside one free chunk; counted.
    std::size_t unmapped = 0;
    std::uintptr_t after = 0;
    for (const Region& range : unmapped_) {
      if (regions_.empty() || range.size == 0 || range.base % resize_granule_ != 0 ||
          range.size % resize_granule_ != 0 || range.base <= after) {
        return false;
      }
      const ChunkHandle holder = chunk_containing(regions_.front(), range.base);
      if (holder == kNoChunk || chunks_.state(holder) != ChunkState::free ||
          range.base + range.size > chunks_[holder].base + chunks_[holder].size) {
        return false;
      }
      after = range.base + range.size;
      unmapped += range.size;
    }
    if (unmapped != counters_.bytes_unmapped) return false;
    reserved -= unmapped;
    // Loans: borrowers sorted, apart, mapped granules of the region; their lenders are lenders_.
    if (!ended_loans_.empty() || lenders_.size() != loans_.size() || lenders != loans_.size() ||
        !std::is_sorted(lenders_.begin(), lenders_.end()) ||
        counters_.bytes_lent != loans_.size() * resize_granule_) {
      return false;
    }
    std::uintptr_t after_loan = 0;
    for (const Loan& loan : loans_) {
      if (regions_.empty() || loan.borrower < after_loan || loan.borrower % resize_granule_ != 0 ||
          loan.borrower - regions_.front().region.base >= regions_.front().region.size ||
          unmapped_within(loan.borrower, loan.borrower + resize_granule_) != 0 ||
          !std::binary_search(lenders_.begin(), lenders_.end(), loan.lender)) {
        return false;
      }
      after_loan = loan.borrower + resize_granule_;
    }
    reserved -= counters_.bytes_lent;
    if (!idle_candidates_complete()) return false;
  } else if (tail_base_ != 0 || !unmapped_.empty() || counters_.bytes_unmapped != 0 || !loans_.empty() ||
             counters_.bytes_lent != 0) {
    return false;
  }
  std::size_t indexed = 0, queued = 0;
  const ArenaStats& c = counters_;
  return chunks == chunks_.live() && chunks_.validate() && free_.validate(chunks_, indexed) &&
         indexed == free_chunks && fenced_.validate(chunks_, queued) && queued == fenced_chunks &&
         reserved == c.bytes_reserved && regions_.size() == c.regions && in_use == c.bytes_in_use &&
         requested == c.bytes_requested && fenced == c.bytes_fenced && c.bytes_reserved <= c.bytes_limit &&
         c.peak_bytes_in_use >= c.bytes_in_use && c.peak_bytes_reserved >= c.bytes_reserved;
}

}  // namespace gpumem
