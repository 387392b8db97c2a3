// BfcArena: a best-fit-with-coalescing allocator over address ranges ("regions") obtained from a
// RegionSource. Device-agnostic: it never touches the memory it manages, only host-side records.
//
// Model (after XLA's bfc_allocator): every request is rounded up to a multiple of 256 bytes (or of
// block_alignment, when that is larger, so that every block starts at such a multiple); free
// chunks sit in 21 bins by size class (bin b: [256 << b, 256 << (b+1)), bin 20: >= 256 MiB), each
// ordered by (size, address); allocation takes the best fit (smallest chunk that fits, lowest address
// among equals), splits a chunk when chunk >= 2 * rounded or chunk - rounded >=
// max_internal_fragmentation, and a free chunk merges with its free, unfenced neighbours inside the
// same region. Regions come either as one preallocated region of the limit or by growth: a region
// of the request's size, at least min_growth_bytes; a refused preallocation is retried at
// backoff_factor times the size, and any refused reservation finally at exactly the request's size.
//
// Resizable sources (RegionSource::resize_granule() > 0: memory mapped under one reserved address
// range): the arena holds one region and grows it at its end by the shortfall (the request less a
// free chunk at the region's end, rounded up to the source's granule), so chunks coalesce across
// growth steps. Idle granules (wholly inside free, unfenced chunks) can be unmapped: their memory goes
// back while the addresses stay in the region, and a block carved over them later has them mapped
// again. The limit then bounds the memory mapped, not the address range, so holes left by
// fragmentation cost addresses only. Idle granules are unmapped when mapping would pass the limit,
// by release_free_regions(), and in growth mode where new memory would take what the arena holds past
// its live peak by more than ArenaOptions::idle_slack (the idle memory then moves to where it is
// needed). A wholly free region goes back by release_free_regions(). Where the best fit for a request
// needs memory mapped and another fitting chunk does not, the other serves it: memory stays where it
// is mapped.
//
// Loans (a source that lends, RegionSource::lends()): a source backing its memory in pieces larger
// than a granule gives an idle granule back only with its whole piece, so a piece that also holds
// live blocks keeps its idle granules. When a block needs memory the limit no longer allows, even
// after idle pieces are unmapped, or the source refuses it (a limit of its own below the arena's: a
// shared GPU's share, which shrinks as members join; only once no fenced chunk is left, which the
// caller would rather synchronise for: fences_pending), the arena has such idle granules mapped a
// second time under the block's unmapped granules (growing the region's addresses, unbacked, where
// the block needs them at its end): the limit then bounds what is idle anywhere, not what is idle in
// whole pieces. A lent granule's first addresses stay out of use, an in-use chunk of one granule that
// no caller holds, until its borrowed granule is unmapped as any idle granule is; the lender's chunk
// is freed at the end of that public call.
//
// Fences: a chunk freed with a fence stays out of circulation (no reuse, no coalescing) until the
// fence is resolved: by resolve_fences_through(), by the FenceOracle on an allocation miss, or for
// an allocation on the fence's own stream, which may reuse it at once. The oracle is asked only on a
// miss, about each stream's oldest fences first; a stream's walk stops at its first unresolved fence
// (work on one stream completes in order).
//
// Costs: allocate and deallocate are O(log n) in the free chunks of one size class (a bitmap finds
// the next non-empty class in O(1)); deallocate finds its chunk in O(1) through the record table,
// which places records by address (chunk_store.h). Neither allocates memory once the record table
// has grown to the arena's high-water mark. Host memory is proportional to the number of chunks.
// With a resizable source, a free chunk that may hold idle granules is noted (a vector append), and
// unmapping before growth looks at the chunks noted since it last ran, not at every chunk; unmapped
// ranges are a sorted vector (O(log n) lookups, O(n) moves on insertion, at map and unmap calls only).
//
// Thread safety: every public member takes one mutex per arena. Calls are short (no system call on
// the hit path) and the shim serialises per context anyway, so finer locking would buy little.
//
// Failure: nothing throws out of the arena's operations (they are noexcept). Host metadata (chunk
// records, fence queues, region records) is secured before any state changes, so running out of
// host memory yields Status::out_of_memory with the arena exactly as it was.
// oom_report() alone builds strings and may throw std::bad_alloc; it changes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "chunk_store.h"
#include "fence.h"
#include "fence_queues.h"
#include "free_index.h"
#include "region_source.h"
#include "status.h"
#include "thread_annotations.h"

namespace gpumem {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
// ArenaOptions::max_internal_fragmentation for a split rule that hands out at most this many bytes
// beyond the 256-byte rounded request.
inline constexpr std::size_t kTightSplitBytes = 256;

struct ArenaOptions {
  // Bytes the arena may reserve from its source in total. Must be > 0.
  std::size_t limit = 0;
  // true: the whole `limit` at the first allocation (0.9x back-off while the source refuses), as one
  // region or as head + rest (preallocation_head_bytes). false: growth, regions on demand, each the
  // size of the request that needs it, at least min_growth_bytes.
  bool preallocate = true;
  // Preallocation only: how much to reserve at the first allocation; 0 means the whole limit. Below
  // the limit, the arena grows beyond it as in growth mode (regions of the request, at least
  // min_growth_bytes), keeping idle memory as a preallocated arena does. A GPU shared with other
  // processes preallocates the fraction of its guaranteed share and may grow to what it can borrow.
  std::size_t preallocation_bytes = 0;
  // When a request needs more memory (growing, or mapping idle granules back) that would take what
  // the arena holds past this many bytes, while freed-but-fenced chunks hold at least the request,
  // allocate() reports Status::fences_pending first, so that the caller synchronises and the fenced
  // memory is reused rather than more taken. The default never does: a preallocated arena reuses
  // fenced memory at its limit, a growing one as its manager decides. A GPU shared with other
  // processes sets its preallocation here (0 when growing): memory beyond it is borrowed.
  std::size_t fences_before_growth_above = std::numeric_limits<std::size_t>::max();
  // The same answer, Status::fences_pending before more memory is taken, whenever fenced chunks hold
  // at least the request while live blocks fill less than this share of what the arena holds. 0 (the
  // default) never. A growing arena whose frees wait for a synchronisation sets 0.5: it then grows
  // only while its live blocks fill half of it (or nothing fenced could serve), so what it holds stays
  // within about twice its live peak plus a growth step, and it synchronises only where it would
  // otherwise grow.
  double fences_before_growth_below_use = 0.0;
  // Preallocation only: when > 0 (and below the limit), the limit is reserved as two regions, a head
  // of this size and the rest. Best fit puts small blocks in the head while it has room, so the rest
  // stays wholly free, and can be given back (release_free_regions) for another use of the memory,
  // until the program's own blocks need it. 0: one region.
  std::size_t preallocation_head_bytes = 0;
  // Growth mode: before reporting out-of-memory, release wholly free regions and retry.
  bool garbage_collection = false;
  // Growth mode: the smallest region reserved (or growth step of a resizable source's region), so
  // that small requests do not make thousands of regions; a larger request gets a region of its size.
  // 8 MiB: on the recorded PyTorch traces (bench/traces/README.md) it takes 30-44 regions where 2 MiB
  // takes 48-74, at the same utilisation (0.88-0.92 classic); 20 MiB and more cost utilisation.
  std::size_t min_growth_bytes = 8 * kMiB;
  // The split rule: a free chunk larger than the request is split when the remainder would be at
  // least the request (chunk >= 2 x request) or at least this many bytes, else handed out whole.
  // XLA's rule is 128 MiB; kTightSplitBytes splits nearly always (docs/configuration.md says why).
  std::size_t max_internal_fragmentation = 128 * kMiB;
  // Factor applied to a refused preallocation before retrying.
  double backoff_factor = 0.9;
  // Every block's address and size are multiples of this: a power of two, at least the 256-byte
  // granule. A source's regions must start at such a multiple. 256 is XLA's rounding; the shim uses
  // 512, CUDA's texture alignment, because cudaMalloc's pointers are documented to need no texture
  // offset (policy.h, kDeviceBlockAlignment).
  std::size_t block_alignment = 256;
  // Resizable sources, growth mode: the memory the arena holds (mapped, and idle in its source) is
  // kept within (1 + idle_slack) times its live peak plus one min_growth_bytes step: where a request
  // needs new memory beyond that, idle granules (wholly inside free, unfenced chunks) are unmapped
  // first, and their memory serves the request (a source that keeps memory for the next mapping,
  // backing.h, maps it again without taking new memory). Within it, idle memory stays mapped: a
  // training step's pattern of frees and allocations costs no driver call. Infinity: idle granules
  // are unmapped only at the limit. bench/traces/README.md has the trade-off, measured on the traces.
  double idle_slack = 1.0 / 64;
  // What keeping to that soft target may cost in driver calls: each unmapping call, and each granule
  // unmapped (one call to map it again), spends a credit of trim_burst_calls at first, earned back at
  // trim_calls_per_allocation per allocation. With none left the arena takes new memory instead and
  // doubles its slack (from at least 1/64, to at most 1/8, for the rest of its life): a workload whose
  // live set moves all the time (sizes that never repeat) needs more room than the slack to settle,
  // and gets it rather than a driver call per operation. The limit trims whatever the credit.
  // 0.04 per allocation is 20 calls per 1,000 operations (allocations and frees); the burst covers a
  // program's first steps: no trace of bench/traces runs out of it.
  double trim_calls_per_allocation = 0.04;
  double trim_burst_calls = 1024;
};

// Counters and gauges, in bytes unless named otherwise. Invariants: bytes_in_use <= bytes_reserved <=
// bytes_limit; peak_* >= current; fragmentation in [0, 1].
struct ArenaStats {
  std::uint64_t num_allocs = 0;           // successful allocations so far
  std::size_t bytes_in_use = 0;           // rounded sizes of live chunks (what they occupy)
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_requested = 0;        // live bytes as asked for, before rounding
  std::size_t largest_alloc_size = 0;     // largest chunk handed out (as XLA: the chunk, waste included)
  std::size_t bytes_limit = 0;
  std::size_t bytes_reserved = 0;         // total size of regions held now (less bytes_unmapped)
  std::size_t peak_bytes_reserved = 0;
  std::size_t largest_free_block = 0;     // largest unfenced free chunk
  std::size_t bytes_fenced = 0;           // freed bytes waiting for a fence
  double fragmentation = 0.0;             // (reserved - in_use - largest_free) / (reserved - in_use), 0 if denominator is 0
  std::size_t regions = 0;                // regions held now
  std::uint64_t region_reservations = 0;  // successful RegionSource::reserve calls (a region
                                          // rejected as breaking the contract included)
  std::uint64_t region_releases = 0;      // RegionSource::release calls; reservations - releases == regions
  std::uint64_t region_refusals = 0;      // reserve and grow calls the source refused (each retried
                                          // smaller, down to the request)
  std::uint64_t region_grows = 0;         // resizable sources: successful RegionSource::grow calls
  std::uint64_t region_unmaps = 0;        // resizable sources: RegionSource::unmap calls (idle granules)
  std::uint64_t region_maps = 0;          // resizable sources: RegionSource::map calls that succeeded
  std::size_t bytes_unmapped = 0;         // resizable sources: addresses in the region with no memory now
  std::size_t bytes_pooled = 0;           // resizable sources: memory the source holds mapped nowhere,
                                          // kept for the next mapping (RegionSource::idle_bytes)
  std::size_t bytes_lent = 0;             // lending sources: idle granules whose memory also backs
                                          // blocks' addresses elsewhere (out of use meanwhile)
  std::uint64_t region_loans = 0;         // lending sources: RegionSource::lend calls that succeeded
  std::size_t chunks = 0;                 // chunk records (in use, free and fenced)
};

// What the arena looked like when a request could not be served. render() gives a compact text form
// in the spirit of XLA's dump.
struct OomReport {
  struct Bin {
    int index = 0;
    std::size_t min_chunk_size = 0;  // lower bound of the bin's size class
    std::size_t total_chunks = 0;
    std::size_t chunks_in_use = 0;
    std::size_t bytes_in_use = 0;
    std::size_t bytes_requested = 0;
    std::size_t free_chunks = 0;
    std::size_t free_bytes = 0;
  };
  struct InUseSize {  // live chunks grouped by rounded size
    std::size_t chunk_size = 0;
    std::size_t count = 0;
  };
  std::size_t requested = 0;
  std::size_t rounded = 0;
  std::size_t free_bytes = 0;           // all free bytes in regions (fenced included)
  std::size_t largest_free_chunk = 0;
  std::vector<Bin> bins;                // only bins that hold chunks
  std::vector<InUseSize> in_use_by_size;
  ArenaStats stats;
  std::string occupancy;                // 100 chars: '*' requested bytes, 'x' rounding waste, '_' free
  std::string render() const;
};

// What find() reports about the chunk containing an address.
struct ChunkInfo {
  std::uintptr_t base = 0;   // chunk start
  std::size_t size = 0;      // rounded chunk size
  std::size_t requested = 0; // bytes asked for (0 if free)
  bool in_use = false;
  bool ordered = false;      // in use and allocated with a stream (allocate()'s `stream` not 0)
  Region region;             // the region holding the chunk
};

// Whether one allocate() call may answer Status::fences_pending before taking more memory, as the
// options' fences_before_growth_* rules ask. A caller that cannot synchronise now (a graph capture
// is under way, or synchronising did not help) says grow_instead: the arena then takes memory where
// the limit allows, and reports fences_pending only when it cannot.
enum class FencedMemory : std::uint8_t { synchronise_first, grow_instead };

class BfcArena {
 public:
  // `oracle` may be null: then only resolve_fences_through() and same-stream reuse resolve fences.
  BfcArena(RegionSource& source, ArenaOptions options, FenceOracle* oracle = nullptr);
  ~BfcArena();  // gives every region back to the source
  BfcArena(const BfcArena&) = delete;
  BfcArena& operator=(const BfcArena&) = delete;

  // Serves `bytes` (rounded up to 256, or to block_alignment). `stream` lets chunks fenced on that
  // same stream be reused.
  // Order of attempts: unfenced free chunks; chunks fenced on `stream`; fences the oracle reports
  // resolved; growth (growth mode); garbage collection (if enabled). Then Status::fences_pending if
  // fenced chunks remain (caller makes the device idle, calls resolve_fences_through, retries), else
  // Status::out_of_memory (also when host memory for the arena's records runs out). Status::zero_size
  // for 0 bytes. Where the options' fences_before_growth_* rules apply (and `fenced` allows), the
  // answer is Status::fences_pending before any growth.
  Status allocate(std::size_t bytes, std::uintptr_t& out, std::uintptr_t stream = 0,
                  FencedMemory fenced = FencedMemory::synchronise_first) noexcept;

  // Frees the chunk starting at `ptr`. With a non-empty fence the chunk is not reused (nor coalesced)
  // until the fence is resolved. Status::not_owned / Status::double_free leave the arena untouched,
  // and so does Status::out_of_memory: no host memory for a new stream's fence queue (the block stays
  // allocated; freeing it without a fence, after synchronising, needs no memory).
  Status deallocate(std::uintptr_t ptr, Fence fence = {}) noexcept;

  // Every fence with id <= `id` is resolved: those chunks become free and coalesce.
  void resolve_fences_through(FenceId id) noexcept;

  // True if `ptr` lies inside any region of this arena.
  bool owns(std::uintptr_t ptr) const noexcept;
  // The chunk containing `ptr` (any address inside it), or nullopt if outside every region.
  std::optional<ChunkInfo> find(std::uintptr_t ptr) const noexcept;

  // Bytes that could still be handed out: free bytes in regions (fenced included) plus
  // limit - reserved.
  std::size_t available() const noexcept;
  // Gives wholly free, unfenced regions back to the source, and with a resizable source the memory
  // of every idle granule; returns the bytes released.
  std::size_t release_free_regions() noexcept;
  // release_free_regions() for a thread other than the program's (a GPU shared with other processes
  // gives idle memory back on request, docs/sharing.md): never waits for the arena's lock (nullopt
  // while another call holds it); first resolves the fences the oracle reports complete; and with a
  // resizable source unmaps idle granules only until about `want` bytes went back (whole pieces) and
  // keeps the region, so that one call holds the lock for a bounded time. Returns the bytes released.
  std::optional<std::size_t> try_release_idle(std::size_t want) noexcept;
  bool has_pending_fences() const noexcept;

  ArenaStats stats() const noexcept;
  // stats() unless another call holds the arena right now (then false, `out` untouched): for callers
  // that must never wait, such as an exit handler.
  bool try_stats(ArenaStats& out) const noexcept;
  // May throw std::bad_alloc (it builds strings and tables); the arena is unaffected.
  OomReport oom_report(std::size_t requested) const;
  const ArenaOptions& options() const noexcept;

  // Checks every internal invariant; returns false (and never aborts) if one is broken. Called from
  // debug assertions and tests.
  bool validate() const noexcept;

 private:
  // A region and the record of its lowest chunk (merges always keep the lower record; a growing
  // record table moves it, and reserve_records() follows).
  struct RegionRecord {
    Region region;
    detail::ChunkHandle first = detail::kNoChunk;
  };

  // What extend() achieved.
  enum class Growth : std::uint8_t { grew, refused, no_host_memory };

  // One allocation as the paths below need it.
  struct Request {
    std::size_t rounded = 0;    // the chunk size to hand out
    std::size_t requested = 0;  // the bytes asked for
    bool ordered = false;       // asked for with a stream
    bool may_report_fences = true;  // FencedMemory::synchronise_first
  };
  Status allocate_locked(std::size_t bytes, std::uintptr_t stream, FencedMemory fenced, std::uintptr_t& out)
      GPUMEM_REQUIRES(mutex_);
  bool take_free(const Request& request, std::uintptr_t& out) GPUMEM_REQUIRES(mutex_);
  bool take_fenced_on_stream(const Request& request, std::uintptr_t stream,
                             std::uintptr_t& out) GPUMEM_REQUIRES(mutex_);
  // Marks `handle` (already out of the free index / fence queues) in use, splitting off the rest.
  // Needs one record reserved in chunks_ (allocate_locked secures it).
  void carve(detail::ChunkHandle handle, const Request& request, bool was_fenced)
      GPUMEM_REQUIRES(mutex_);
  // Merges a free chunk with free neighbours; returns the surviving record (not yet indexed).
  detail::ChunkHandle coalesce(detail::ChunkHandle handle) GPUMEM_REQUIRES(mutex_);
  // Merges the next chunk (free, already out of the index) into `low`.
  void absorb_next(detail::ChunkHandle low) GPUMEM_REQUIRES(mutex_);
  void resolve_chunk(detail::ChunkHandle handle) GPUMEM_REQUIRES(mutex_);
  std::size_t poll_oracle() GPUMEM_REQUIRES(mutex_);
  Growth extend(std::size_t rounded) GPUMEM_REQUIRES(mutex_);
  // extend() for a resizable source: grows the one region (reserving it first) by the shortfall.
  Growth extend_in_place(std::size_t rounded) GPUMEM_REQUIRES(mutex_);
  // Puts `bytes` just grown at the region's end into the chunk list: into a free tail chunk, or as a
  // new free chunk after a tail that is not free. Unbacked (RegionSource::grow_unbacked): recorded
  // as unmapped (capacity secured by the caller).
  void append_to_tail(std::size_t bytes, bool backed = true) GPUMEM_REQUIRES(mutex_);
  // What grow_for_loans() must find lendable: the part of the shortfall the limit does not allow, or
  // all of it (the source refused new memory below the arena's limit: a shared GPU's share).
  enum class LoanScope { beyond_limit, whole_shortfall };
  // extend_in_place() where the limit (or the source) leaves less than `shortfall`: grows the region
  // unbacked by it, if unmapping idle pieces and lending idle granules can back what `scope` says.
  Growth grow_for_loans(std::size_t shortfall, LoanScope scope) GPUMEM_REQUIRES(mutex_);
  // Splits chunk `low` after `low_size` bytes; the upper part, a new record in `high_state`, is
  // returned (unindexed). Needs one record reserved.
  detail::ChunkHandle split_chunk(detail::ChunkHandle low, std::size_t low_size, detail::ChunkState high_state)
      GPUMEM_REQUIRES(mutex_);
  // Lending source: fills loan_plan_ with up to `granules` idle granules (whole, mapped, inside free
  // chunks, not borrowed) outside [keep_from, keep_to); returns how many.
  std::size_t plan_loans(std::size_t granules, std::uintptr_t keep_from, std::uintptr_t keep_to)
      GPUMEM_REQUIRES(mutex_);
  // Lending source: backs the unmapped granule at `at` with the memory of the idle granule at
  // `lender`, which goes out of use; false (nothing changed) if the source or host memory refuses.
  bool lend_into(std::uintptr_t at, std::uintptr_t lender) GPUMEM_REQUIRES(mutex_);
  // Ends the loans whose borrowed granules lie in [from, to) (just unmapped): their lenders wait in
  // ended_loans_ for settle_loans(). Returns the bytes.
  std::size_t end_loans_in(std::uintptr_t from, std::uintptr_t to) GPUMEM_REQUIRES(mutex_);
  // Frees the lenders of ended loans. Run at the end of a public call: freeing coalesces chunks,
  // which the paths that unmap (holding handles) must not see.
  void settle_loans() GPUMEM_REQUIRES(mutex_);
  // Whether `base` is a lent granule's (the start of a chunk out of use for a loan).
  bool is_lender(std::uintptr_t base) const GPUMEM_REQUIRES(mutex_);
  // Records [from, to) (inside one unmapped range) as mapped; capacity for one more range secured.
  void note_mapped(std::uintptr_t from, std::uintptr_t to) GPUMEM_REQUIRES(mutex_);
  // Resizable source: the bytes of [begin, end) (whole granules) that are unmapped now.
  std::size_t unmapped_within(std::uintptr_t begin, std::uintptr_t end) const GPUMEM_REQUIRES(mutex_);
  // Resizable source: maps every unmapped granule under [base, base + bytes), unmapping idle granules
  // first where the limit requires it (or growth mode asks for it), and with a lending source lending
  // idle granules from outside [keep_from, keep_to) (the chunk the block is carved from) for what the
  // limit does not allow. False if the limit or the source refuses (granules mapped so far stay
  // mapped: they are idle).
  bool map_under(std::uintptr_t base, std::size_t bytes, std::uintptr_t keep_from, std::uintptr_t keep_to)
      GPUMEM_REQUIRES(mutex_);
  // map_under() for the part of free chunk `handle` that carve() would hand out for `rounded` bytes.
  bool map_for_request(detail::ChunkHandle handle, std::size_t rounded) GPUMEM_REQUIRES(mutex_);
  // Unmaps the source's pieces that lie wholly in [from, to) (whole granules, all mapped, inside a
  // free chunk) and records them; false if the source gave back less than asked (what it gave back
  // is recorded and added to `released`).
  bool unmap_granules(std::uintptr_t from, std::uintptr_t to, std::size_t& released) GPUMEM_REQUIRES(mutex_);
  // Unmaps [from, to), whole pieces, in one call to the source; false as unmap_granules().
  bool unmap_pieces(std::uintptr_t from, std::uintptr_t to, std::size_t& released) GPUMEM_REQUIRES(mutex_);
  // The source's piece holding the mapped granule at `at`; the granule itself when the source's
  // answer breaks its contract.
  Region piece_at(std::uintptr_t at) const GPUMEM_REQUIRES(mutex_);
  // Whether a mapped piece lies wholly in [begin, end) (granule boundaries).
  bool holds_mapped_piece(std::uintptr_t begin, std::uintptr_t end) const GPUMEM_REQUIRES(mutex_);
  // Where unmap_idle() looks for idle granules.
  enum class IdleScan : std::uint8_t {
    candidates,  // the free chunks noted since the last scan (all chunks if the list overflowed)
    all,         // every chunk of the region
  };
  // Resizable source: unmaps idle granules outside [keep_begin, keep_end), every one or until `want`
  // bytes are unmapped; returns the bytes.
  std::size_t unmap_idle(IdleScan scan, std::uintptr_t keep_begin = 0, std::uintptr_t keep_end = 0,
                         std::size_t want = std::numeric_limits<std::size_t>::max()) GPUMEM_REQUIRES(mutex_);
  // Growth mode, resizable source: how far mapping `needed` more bytes for a request of `rounded`
  // would take what the arena holds past its soft target (ArenaOptions::idle_slack); 0 within it.
  std::size_t beyond_soft_target(std::size_t rounded, std::size_t needed) const GPUMEM_REQUIRES(mutex_);
  // Unmaps idle granules for `want` bytes past the soft target, where the trim credit allows, and
  // charges the calls spent.
  void trim_to_soft_target(std::size_t want, std::uintptr_t keep_begin, std::uintptr_t keep_end)
      GPUMEM_REQUIRES(mutex_);
  // A free chunk of at least `rounded` bytes, needing no memory mapped, to serve in place of
  // `best` (which needs some), or kNoChunk.
  detail::ChunkHandle mapped_alternative(detail::ChunkHandle best, std::size_t rounded) const
      GPUMEM_REQUIRES(mutex_);
  // Unmaps the idle granules of the free chunk `node` outside the kept granules; false if the source
  // refused part way (what it gave back is counted in `released`).
  bool unmap_idle_in(detail::ChunkHandle node, std::uintptr_t kept_from, std::uintptr_t kept_to,
                     std::size_t& released) GPUMEM_REQUIRES(mutex_);
  // Resizable source: `handle`, a free chunk, may hold mapped idle granules: notes it for the next
  // unmap_idle(IdleScan::candidates).
  void note_idle_candidate(detail::ChunkHandle handle) noexcept GPUMEM_REQUIRES(mutex_);
  // Records [begin, end) as unmapped (merging with neighbours); the capacity is secured by the caller.
  void note_unmapped(std::uintptr_t begin, std::uintptr_t end) GPUMEM_REQUIRES(mutex_);
  // Whether carve() would split a free chunk of `size` for `rounded` bytes.
  bool splits(std::size_t size, std::size_t rounded) const noexcept;
  // Records a region just reserved: its free chunk, its record, the counters.
  void adopt_region(const Region& region) GPUMEM_REQUIRES(mutex_);
  // Room for `count` more chunk records (ChunkStore::reserve), following the records should they
  // move; false when host memory runs out.
  bool reserve_records(std::size_t count) GPUMEM_REQUIRES(mutex_);
  // ArenaOptions::fences_before_growth_above and _below_use: whether `request`, needing more memory,
  // should wait for the fences instead (never where the caller said FencedMemory::grow_instead).
  bool fences_first(const Request& request) const noexcept GPUMEM_REQUIRES(mutex_);
  // Whether handing out free chunk `handle` for `rounded` bytes needs granules mapped (resizable).
  bool needs_mapping(detail::ChunkHandle handle, std::size_t rounded) const GPUMEM_REQUIRES(mutex_);
  // Whether the next region is still part of the preallocation (preallocating, and less than
  // preallocation_target() reserved so far).
  bool preallocating() const noexcept GPUMEM_REQUIRES(mutex_);
  // Room for one more RegionRecord without allocating; false when host memory runs out.
  bool reserve_region_record() GPUMEM_REQUIRES(mutex_);
  // source_.reserve, with a throwing source taken as a refusal.
  Status reserve_region(std::size_t bytes, Region& out) GPUMEM_REQUIRES(mutex_);
  // source_.release, with a throwing source taken as a refusal (the region is then kept).
  bool release_region(const Region& region) GPUMEM_REQUIRES(mutex_);
  std::size_t release_free_regions_locked() GPUMEM_REQUIRES(mutex_);
  const RegionRecord* region_containing(std::uintptr_t ptr) const GPUMEM_REQUIRES(mutex_);
  detail::ChunkHandle chunk_containing(const RegionRecord& region, std::uintptr_t ptr) const
      GPUMEM_REQUIRES(mutex_);
  Status classify_bad_free(std::uintptr_t ptr) const GPUMEM_REQUIRES(mutex_);
  ArenaStats stats_locked() const GPUMEM_REQUIRES(mutex_);
  bool validate_locked() const GPUMEM_REQUIRES(mutex_);
  // Resizable source: the idle_candidates_ invariant (for validate_locked()).
  bool idle_candidates_complete() const GPUMEM_REQUIRES(mutex_);
  // validate_locked() for small arenas, true otherwise: keeps debug builds usable.
  bool debug_check() const GPUMEM_REQUIRES(mutex_);

  RegionSource& source_;
  const ArenaOptions options_;
  FenceOracle* const oracle_;
  const bool options_valid_;

  mutable Mutex mutex_;
  detail::ChunkStore chunks_ GPUMEM_GUARDED_BY(mutex_);
  detail::FreeIndex free_ GPUMEM_GUARDED_BY(mutex_);
  detail::FenceQueues fenced_ GPUMEM_GUARDED_BY(mutex_);
  std::vector<RegionRecord> regions_ GPUMEM_GUARDED_BY(mutex_);  // sorted by base, disjoint
  std::size_t next_region_bytes_ GPUMEM_GUARDED_BY(mutex_) = 0;   // preallocation: size of the next region
  // RegionSource::resize_granule(), read once: 0 for a source of fixed-size regions.
  const std::size_t resize_granule_;
  // Resizable source: the base of the chunk at the region's end (an address, not a handle, so it
  // survives the record table's rehashing); 0 while no region is held or the source is not resizable.
  // Invariant (validate): regions_.size() <= 1 and tail_base_ names the last chunk of regions_[0].
  std::uintptr_t tail_base_ GPUMEM_GUARDED_BY(mutex_) = 0;
  // Resizable source: the unmapped ranges of regions_[0], sorted, disjoint and not adjacent; each is
  // whole granules inside one free chunk (validate). Their total is counters_.bytes_unmapped.
  std::vector<Region> unmapped_ GPUMEM_GUARDED_BY(mutex_);
  // Resizable source: bases of free chunks that may hold mapped idle granules, so that unmapping them
  // costs in proportion to the chunks freed since, not to every chunk. Invariant (validate): every
  // free chunk with a mapped whole granule has its base here, unless idle_scan_all_ is set (the list
  // overflowed or could not grow: the next scan walks every chunk). Entries may be stale.
  std::vector<std::uintptr_t> idle_candidates_ GPUMEM_GUARDED_BY(mutex_);
  // The driver calls trimming to the soft target may still spend (ArenaOptions::trim_*), as of
  // allocation number trim_credited_at_.
  double trim_credit_ GPUMEM_GUARDED_BY(mutex_) = 0.0;
  double idle_slack_ GPUMEM_GUARDED_BY(mutex_) = 0.0;  // options_.idle_slack, widened as credit runs out
  std::uint64_t trim_credited_at_ GPUMEM_GUARDED_BY(mutex_) = 0;
  bool idle_scan_all_ GPUMEM_GUARDED_BY(mutex_) = false;
  // Lending source (RegionSource::lends(), read once; false for any other).
  const bool lends_;
  // A granule's memory mapped twice: at `lender`, the start of an in-use chunk of one granule that no
  // caller holds, and at `borrower`, a granule of the region mapped by RegionSource::lend.
  struct Loan {
    std::uintptr_t borrower = 0;
    std::uintptr_t lender = 0;
  };
  // Invariants (validate): sorted by borrower, apart; each borrower a mapped granule of the region,
  // each lender the start of an in-use chunk of one granule; lenders_ holds exactly their lenders,
  // sorted; loans_.size() granules are counters_.bytes_lent; ended_loans_ is empty between public calls.
  std::vector<Loan> loans_ GPUMEM_GUARDED_BY(mutex_);
  std::vector<std::uintptr_t> lenders_ GPUMEM_GUARDED_BY(mutex_);
  // Lenders whose loans ended in this call (capacity for every loan secured when it was made).
  std::vector<std::uintptr_t> ended_loans_ GPUMEM_GUARDED_BY(mutex_);
  std::vector<std::uintptr_t> loan_plan_ GPUMEM_GUARDED_BY(mutex_);  // plan_loans()'s answer
  // Lending source: the source refused new memory during this allocate() call (reset at its end),
  // so map_under() lends at once rather than ask again (a shared GPU's refusal may have waited).
  bool source_refused_ GPUMEM_GUARDED_BY(mutex_) = false;
  ArenaStats counters_ GPUMEM_GUARDED_BY(mutex_);  // all but the computed fields of stats()
};

}  // namespace gpumem
