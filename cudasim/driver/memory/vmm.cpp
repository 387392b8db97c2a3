// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, ...),
// after the "Virtual Memory Management" section of cuda.h.
//
// A reservation is host address space mapped PROT_NONE. A physical allocation is a range of its
// device's backing file (one memfd per device, sparse: a range costs RAM only once touched, and a
// freed range is punched out and reused), charged to its device like cuMemAlloc memory. So the
// process holds one descriptor per device, however many allocations it makes, as a real driver
// holds none per allocation. cuMemMap maps (part of) the range MAP_SHARED over the reservation,
// still PROT_NONE, and cuMemSetAccess opens it (PROT_READ / PROT_READ|PROT_WRITE). While some
// device may access a mapping it is a live AllocKind::Vmm allocation for every other call (copies,
// sets, pointer queries); unmapped or inaccessible address space is not. A deferred-mapping array
// that cuMemMapArrayAsync backs with an allocation sees it through a view of its own (an ArrayView,
// mapped like a cuMemMap but at an address no pointer query knows).
//
// A process under a file-size limit (ulimit -f) would see a memfd's growth refused, which no real
// driver's memory is subject to: there a device's backing is shared anonymous memory instead (the
// same sparse pages, not counted as file size; a range is mapped by duplicating it with mremap).
//
// Exporting (cuMemExportToShareableHandle) needs a file that is that allocation alone, so that
// another process can map it without trusting any offset: the first export moves the allocation
// into a memfd of its own (its bytes copied, every mapping of it remapped in place, once no stream
// has work queued), sealed against resizing, and hands out a new descriptor of that file at each
// export. A real driver holds no descriptor per allocation, exported or imported, so neither does
// this one where the kernel lets it: such a file is held by a mapping of it (PROT_NONE, address
// space only), mapped elsewhere by duplicating that mapping, and opened again for an export through
// /proc/self/map_files (which needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN); without that
// privilege the file keeps its descriptor, one per exported or imported allocation.
//
// Reference counting, as cuMemRelease documents: a handle holds references (cuMemCreate or
// cuMemImportFromShareableHandle: 1, cuMemRetainAllocationHandle: +1, cuMemRelease: -1) and is
// alive while it has references or mappings (array views included); the physical memory is freed
// (its charge given back) when no handle of it is alive. An import of memory this process knows
// makes a new handle of the same physical allocation (one charge); memory from another process is
// charged to that process.
#include "faults.h"
#include "memfd_name.h"
#include "state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

using namespace cudasim;

namespace cudasim {

// A memfd holding physical memory: a device's backing file (ranges handed out by VmmState), or a
// file that is one allocation (exported or imported). Closed with its last user.
// Invariant: exactly one of `fd` (a memfd) and `anonymous` is set. `anonymous` is a shared mapping
// of `anonymous_bytes` that other mappings duplicate (mremap): a device's backing under a file-size
// limit (shared anonymous memory, `shared`), or a file of one allocation held without a descriptor
// (a PROT_NONE mapping of the whole file, `held`).
struct BackingFile {
  int fd = -1;
  bool shared = false;  // a device's backing file, holding many allocations
  bool held = false;    // a file of one allocation, held by `anonymous` alone
  char* anonymous = nullptr;
  std::uint64_t anonymous_bytes = 0;
  BackingFile(int descriptor, bool is_shared) : fd(descriptor), shared(is_shared) {}
  BackingFile(char* region, std::uint64_t bytes, bool is_shared)
      : shared(is_shared), held(!is_shared), anonymous(region), anonymous_bytes(bytes) {}
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;
  ~BackingFile() {
    if (anonymous != nullptr) munmap(anonymous, anonymous_bytes);
    if (fd >= 0) close(fd);
  }
};

// A device's backing file and the ranges of it not in use (by offset; adjacent ones merged).
struct DeviceBacking {
  std::shared_ptr<BackingFile> file;
  std::uint64_t length = 0;
  std::map<std::uint64_t, std::uint64_t> free_ranges;
};

// Invariant: `file` is set while the object lives (the last handle drops it); the allocation is
// bytes [offset, offset + size) of it; `charged` bytes are part of the device's committed memory
// until then.
struct Physical {
  int device = 0;
  std::size_t size = 0;
  std::shared_ptr<BackingFile> file;
  std::uint64_t offset = 0;
  CUmemAllocationProp prop{};
  std::uint64_t charged = 0;   // 0 for memory another process allocated
  std::uint64_t block_id = 0;  // CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID
  int live_handles = 0;
};

// Invariant: in VmmState::handles while refs > 0 or mappings > 0; usable by the program (map,
// export, release, query) only while refs > 0.
struct Handle {
  std::shared_ptr<Physical> physical;
  std::uint64_t refs = 0;
  std::uint64_t mappings = 0;
};

struct Reservation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  int device = 0;  // the device its reserved_va_bytes are reported under
};

// One cuMemMap: [base, base + size) shows physical bytes [offset, offset + size) of `handle`.
struct VaMapping {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::size_t offset = 0;
  CUmemGenericAllocationHandle handle = 0;
  std::shared_ptr<Physical> physical;
  std::vector<unsigned long long> access;  // CUmemAccess_flags per device ordinal
  std::uint64_t buffer_id = 0;
};

// Host memory showing an allocation's bytes to a deferred-mapping array (cuMemMapArrayAsync): a
// mapping that no pointer reaches (no reservation holds it), readable and writable, counted in its
// handle's mappings until nothing holds `view` any more (the array, queued copies, graph nodes).
struct ArrayView {
  VaMapping mapping;
  std::weak_ptr<unsigned char> view;
};

struct VmmState {
  std::map<std::uintptr_t, Reservation> reservations;  // by base
  std::map<std::uintptr_t, VaMapping> mappings;        // by base
  std::vector<ArrayView> array_views;
  std::unordered_map<CUmemGenericAllocationHandle, Handle> handles;
  // Physical allocations with a file of their own, by its identity, to recognise imports of them.
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Physical>> by_file;
  std::vector<DeviceBacking> backings;  // by device ordinal, each created by its first cuMemCreate
};

}  // namespace cudasim

namespace {

constexpr std::size_t kGranularity = kLargePage;  // minimum and recommended, as on current GPUs
// Files that are one allocation (what an export hands out): "cudasim-vmm-device-<ordinal>".
constexpr char kMemfdPrefix[] = "cudasim-vmm-device-";
// A device's backing file, never handed out: "cudasim-vmm-backing-<ordinal>".
constexpr char kBackingPrefix[] = "cudasim-vmm-backing-";

// Process-wide and not reset by fork, so a child's new handles never repeat its parent's.
std::atomic<CUmemGenericAllocationHandle> g_last_handle{0};
std::atomic<std::uint64_t> g_last_block_id{0};

VmmState& vmm(State& st) {
  if (!st.vmm) st.vmm = std::make_shared<VmmState>();
  return *st.vmm;
}

std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

bool is_multiple(std::uint64_t value, std::uint64_t of) { return value % of == 0; }

int host_protection(const VaMapping& m) {
  unsigned long long widest = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  for (unsigned long long flags : m.access) widest |= flags;
  if (widest == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return PROT_READ | PROT_WRITE;
  if (widest == CU_MEM_ACCESS_FLAGS_PROT_READ) return PROT_READ;
  return PROT_NONE;
}

const Reservation* find_reservation(VmmState& v, std::uintptr_t ptr) {
  auto it = v.reservations.upper_bound(ptr);
  if (it == v.reservations.begin()) return nullptr;
  --it;
  return ptr - it->second.base < it->second.size ? &it->second : nullptr;
}

VaMapping* find_mapping(VmmState& v, std::uintptr_t ptr) {
  auto it = v.mappings.upper_bound(ptr);
  if (it == v.mappings.begin()) return nullptr;
  --it;
  return ptr - it->second.base < it->second.size ? &it->second : nullptr;
}

// The mappings that exactly tile [ptr, ptr + size) (whole mappings, no gap); empty when none do.
std::vector<VaMapping*> whole_mappings(VmmState& v, std::uintptr_t ptr, std::size_t size) {
  std::vector<VaMapping*> out;
  if (size == 0) return out;
  std::uintptr_t at = ptr;
  const std::uintptr_t end = ptr + size;
  while (at < end) {
    auto it = v.mappings.find(at);
    if (it == v.mappings.end() || it->second.size > end - at) return {};
    out.push_back(&it->second);
    at += it->second.size;
  }
  return out;
}

// A device location (CU_MEM_LOCATION_TYPE_DEVICE with a valid ordinal); `bad_device` is returned
// for an unknown ordinal, CUDA_ERROR_INVALID_VALUE for any other location type.
CUresult check_device_location(const State& st, const CUmemLocation& location, CUresult bad_device) {
  if (location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  return valid_device(st, location.id) ? CUDA_SUCCESS : bad_device;
}

// The checks cuMemCreate and cuMemGetAllocationGranularity share: pinned memory on a device. Host
// locations are valid in CUDA but not simulated (CUDA_ERROR_NOT_SUPPORTED).
CUresult check_properties(const State& st, const CUmemAllocationProp& prop, CUresult bad_device) {
  if (prop.type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop.location.type == CU_MEM_LOCATION_TYPE_HOST || prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    return CUDA_ERROR_NOT_SUPPORTED;
  return check_device_location(st, prop.location, bad_device);
}

// Anonymous backing spans this many times the device's memory: address space only, so that freed
// ranges scattered through it still leave room for any allocation the device's memory admits.
constexpr std::uint64_t kAnonymousBackingSpan = 4;

// A device's backing: a memfd, or shared anonymous memory when a file-size limit would refuse a
// memfd's growth. Null when neither can be had.
std::shared_ptr<BackingFile> new_backing(State& st, int device) {
  rlimit file_size{};
  if (getrlimit(RLIMIT_FSIZE, &file_size) == 0 && file_size.rlim_cur == RLIM_INFINITY) {
    const int fd = memfd_create((kBackingPrefix + std::to_string(device)).c_str(), MFD_CLOEXEC);
    return fd < 0 ? nullptr : std::make_shared<BackingFile>(fd, true);
  }
  const std::uint64_t total = st.device(device).total;
  const std::uint64_t bytes = total > UINT64_MAX / kAnonymousBackingSpan ? total : total * kAnonymousBackingSpan;
  void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return nullptr;
  madvise(region, bytes, MADV_DONTFORK);  // a forked child does not share its parent's device memory
  return std::make_shared<BackingFile>(static_cast<char*>(region), bytes, true);
}

// Maps bytes [offset, offset + size) of `file` at `at` (MAP_FIXED), with protection `protection`.
bool map_backing(const BackingFile& file, std::uint64_t offset, std::uintptr_t at, std::size_t size,
                 int protection) {
  void* placed = nullptr;
  if (file.anonymous != nullptr) {
    // Duplicates the pages (old size 0 on a shared mapping), over whatever `at` held.
    placed = mremap(file.anonymous + offset, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(at));
    if (placed != MAP_FAILED && mprotect(placed, size, protection) != 0) return false;
  } else {
    placed = mmap(reinterpret_cast<void*>(at), size, protection, MAP_SHARED | MAP_FIXED, file.fd,
                  static_cast<off_t>(offset));
  }
  return placed != MAP_FAILED;
}

// A new descriptor of `file`, a file of one allocation (what an export hands out: not close-on-exec,
// as a duplicate would be); -1 when none can be had.
int reopen_allocation_file(const BackingFile& file) {
  if (!file.held) return file.fd < 0 ? -1 : dup(file.fd);
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", reinterpret_cast<unsigned long>(file.anonymous),
                reinterpret_cast<unsigned long>(file.anonymous + file.anonymous_bytes));
  return open(path, O_RDWR);
}

// The file of one allocation `fd` names (`bytes` long), kept as this driver keeps it: held by a
// mapping, with no descriptor, where the file can be opened again through that mapping (as an export
// needs); else by a close-on-exec duplicate of `fd`. `fd` stays the caller's. Null when neither works.
std::shared_ptr<BackingFile> keep_allocation_file(int fd, std::uint64_t bytes) {
  void* held = mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  if (held != MAP_FAILED) {
    madvise(held, bytes, MADV_DONTFORK);  // a forked child does not share its parent's device memory
    auto file = std::make_shared<BackingFile>(static_cast<char*>(held), bytes, false);
    struct stat wanted {}, found {};
    const int reopened = reopen_allocation_file(*file);
    const bool same = reopened >= 0 && fstat(fd, &wanted) == 0 && fstat(reopened, &found) == 0 &&
                      wanted.st_dev == found.st_dev && wanted.st_ino == found.st_ino;
    if (reopened >= 0) close(reopened);
    if (same) return file;
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  return own < 0 ? nullptr : std::make_shared<BackingFile>(own, false);
}

// Takes `bytes` (a multiple of the granularity) of the device's backing file: a free range, else
// the file grows. False when no descriptor or file space can be had.
bool take_backing_range(State& st, int device, std::uint64_t bytes, std::shared_ptr<BackingFile>* file,
                        std::uint64_t* offset) {
  VmmState& v = vmm(st);
  if (v.backings.size() < st.devices.size()) v.backings.resize(st.devices.size());
  DeviceBacking& b = v.backings[static_cast<std::size_t>(device)];
  if (!b.file) {
    b.file = new_backing(st, device);
    if (!b.file) return false;
    b.length = 0;
  }
  for (auto it = b.free_ranges.begin(); it != b.free_ranges.end(); ++it) {  // first fit
    if (it->second < bytes) continue;
    *offset = it->first;
    if (it->second > bytes) b.free_ranges[it->first + bytes] = it->second - bytes;
    b.free_ranges.erase(it);
    *file = b.file;
    return true;
  }
  if (b.length > static_cast<std::uint64_t>(INT64_MAX) - bytes) return false;
  if (b.file->anonymous != nullptr ? b.length + bytes > b.file->anonymous_bytes
                                   : !size_memory_file(b.file->fd, b.length + bytes)) {
    return false;
  }
  *offset = b.length;
  b.length += bytes;
  *file = b.file;
  return true;
}

// Empties a range of the device's backing file (its RAM goes back to the host) for reuse.
void give_backing_range(State& st, int device, std::uint64_t offset, std::uint64_t bytes) {
  DeviceBacking& b = vmm(st).backings[static_cast<std::size_t>(device)];
  if (b.file->anonymous != nullptr) {
    madvise(b.file->anonymous + offset, bytes, MADV_REMOVE);
  } else {
    fallocate(b.file->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(bytes));
  }
  auto next = b.free_ranges.lower_bound(offset);
  if (next != b.free_ranges.end() && next->first == offset + bytes) {  // merge with the range after
    bytes += next->second;
    next = b.free_ranges.erase(next);
  }
  if (next != b.free_ranges.begin()) {  // and with the one before
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      previous->second += bytes;
      return;
    }
  }
  b.free_ranges[offset] = bytes;
}

// Gives the physical memory back once its last handle is gone.
void drop_physical(State& st, Physical& p) {
  if (--p.live_handles > 0) return;
  if (p.file->shared) give_backing_range(st, p.device, p.offset, p.size);
  p.file.reset();
  if (p.charged > 0) {
    Device& dev = st.device(p.device);
    give_device_memory(dev, p.charged);
    dev.stats.vmm_bytes -= p.charged;
    owe_latency(st.config.free_latency_us);
  }
}

// Forgets the handle once it has neither references nor mappings.
void maybe_forget_handle(State& st, CUmemGenericAllocationHandle value) {
  VmmState& v = vmm(st);
  auto it = v.handles.find(value);
  if (it == v.handles.end() || it->second.refs > 0 || it->second.mappings > 0) return;
  std::shared_ptr<Physical> physical = std::move(it->second.physical);
  v.handles.erase(it);
  drop_physical(st, *physical);
}

// A handle the program may use (created or imported and not yet released); null otherwise.
Handle* usable_handle(State& st, CUmemGenericAllocationHandle value) {
  if (!st.vmm) return nullptr;
  auto it = st.vmm->handles.find(value);
  return it != st.vmm->handles.end() && it->second.refs > 0 ? &it->second : nullptr;
}

CUmemGenericAllocationHandle new_handle(State& st, std::shared_ptr<Physical> physical) {
  const CUmemGenericAllocationHandle value = ++g_last_handle;
  ++physical->live_handles;
  vmm(st).handles[value] = Handle{std::move(physical), 1, 0};
  return value;
}

// Keeps the live-allocation table in step with a mapping's access: accessible mappings are live
// AllocKind::Vmm allocations, inaccessible ones are not.
void sync_allocation(State& st, const VaMapping& m) {
  if (host_protection(m) == PROT_NONE) {
    st.allocations.erase(m.base);
    return;
  }
  st.allocations[m.base] = Allocation{m.base, m.size, 0, m.physical->device, nullptr, AllocKind::Vmm, nullptr,
                                      m.buffer_id};
}

// True when no stream of any live context has work queued or running, so nothing touches device
// memory while the caller keeps State::mu (submitting work needs it). Needs State::mu.
bool all_streams_idle(State& st) {
  for (CUctx_st* ctx : st.contexts) {
    for (auto& stream : context_streams(ctx)) {
      if (!stream->reached(stream->last_submitted())) return false;
    }
  }
  return true;
}

// Copies the touched parts of bytes [from, from + bytes) of `src` to `to` (holes stay holes).
bool copy_data(int src, std::uint64_t from, std::uint64_t bytes, char* to) {
  const std::uint64_t end = from + bytes;
  std::uint64_t at = from;
  while (at < end) {
    const off_t data = lseek(src, static_cast<off_t>(at), SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // nothing but holes after `at`
    if (static_cast<std::uint64_t>(data) >= end) return true;
    const off_t hole = lseek(src, data, SEEK_HOLE);
    if (hole < 0) return false;
    const std::uint64_t stop = std::min(static_cast<std::uint64_t>(hole), end);
    for (auto pos = static_cast<std::uint64_t>(data); pos < stop;) {
      const ssize_t n = pread(src, to + (pos - from), stop - pos, static_cast<off_t>(pos));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      pos += static_cast<std::uint64_t>(n);
    }
    at = stop;
  }
  return true;
}

// Maps bytes [offset, offset + m.size) of `file` over the mapping `m`, with its protection.
bool map_over(const VaMapping& m, const BackingFile& file, std::uint64_t offset) {
  if (!map_backing(file, offset, m.base, m.size, host_protection(m))) return false;
  madvise(reinterpret_cast<void*>(m.base), m.size, MADV_DONTFORK);  // as cuMemMap made it
  return true;
}

// Moves a physical allocation out of its device's backing file into a memfd of its own, sealed
// against resizing (so an importer may trust its size): bytes copied, every mapping of it remapped
// in place. Needs State::mu with every stream idle (nothing may write the memory meanwhile). False,
// with nothing changed, when the kernel refuses.
bool move_to_own_file(State& st, const std::shared_ptr<Physical>& physical) {
  Physical& p = *physical;
  // Named by the device's number, which an importing process may see under another ordinal.
  const std::string name = kMemfdPrefix + std::to_string(st.device(p.device).physical);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return false;
  auto own = std::make_shared<BackingFile>(fd, false);
  struct stat info {};
  if (!size_memory_file(fd, p.size) || fstat(fd, &info) != 0) return false;
  void* copy = mmap(nullptr, p.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (copy == MAP_FAILED) return false;
  // Anonymous backing has no holes to find: all of it is copied (RAM for the whole allocation).
  const bool copied = p.file->anonymous != nullptr
                          ? (std::memcpy(copy, p.file->anonymous + p.offset, p.size), true)
                          : copy_data(p.file->fd, p.offset, p.size, static_cast<char*>(copy));
  munmap(copy, p.size);
  if (!copied || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return false;
  std::shared_ptr<BackingFile> kept = keep_allocation_file(fd, p.size);  // without a descriptor where it can be
  if (!kept) return false;
  own = std::move(kept);
  VmmState& v = vmm(st);
  std::vector<VaMapping*> targets;
  for (auto& [base, m] : v.mappings) {
    if (m.physical == physical) targets.push_back(&m);
  }
  // Array views still held move too (held here meanwhile, so none is unmapped under the move).
  std::vector<std::shared_ptr<unsigned char>> held;
  for (ArrayView& a : v.array_views) {
    if (a.mapping.physical != physical) continue;
    if (std::shared_ptr<unsigned char> view = a.view.lock()) {
      held.push_back(std::move(view));
      targets.push_back(&a.mapping);
    }
  }
  std::vector<VaMapping*> moved;
  for (VaMapping* m : targets) {
    if (!map_over(*m, *own, m->offset)) {  // put back what moved (a failed MAP_FIXED may have unmapped `m`)
      map_over(*m, *p.file, p.offset + m->offset);
      for (VaMapping* back : moved) map_over(*back, *p.file, p.offset + back->offset);
      return false;
    }
    moved.push_back(m);
  }
  give_backing_range(st, p.device, p.offset, p.size);
  p.file = std::move(own);
  p.offset = 0;
  v.by_file[{info.st_dev, info.st_ino}] = physical;
  return true;
}

// The checks of cuMemExportToShareableHandle; the handle's physical allocation in *out.
CUresult check_export(State& st, const void* shareable, CUmemGenericAllocationHandle handle,
                      CUmemAllocationHandleType type, unsigned long long flags, std::shared_ptr<Physical>* out) {
  const Handle* h = usable_handle(st, handle);
  if (shareable == nullptr || h == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (type) {
    case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: break;
    case CU_MEM_HANDLE_TYPE_WIN32:
    case CU_MEM_HANDLE_TYPE_WIN32_KMT:
    case CU_MEM_HANDLE_TYPE_FABRIC: return CUDA_ERROR_NOT_SUPPORTED;  // not on this platform
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  // Only a handle type requested when the allocation was created can be exported.
  if ((h->physical->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  *out = h->physical;
  return CUDA_SUCCESS;
}

// Maps fresh PROT_NONE address space of `size` bytes aligned to `alignment`; at `hint` when that
// is suitably aligned and free. Null when the address space is exhausted.
void* reserve_address_space(std::size_t size, std::size_t alignment, std::uintptr_t hint) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (hint != 0 && is_multiple(hint, alignment)) {
    void* at = mmap(reinterpret_cast<void*>(hint), size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (at == reinterpret_cast<void*>(hint)) return at;
    if (at != MAP_FAILED) munmap(at, size);  // a kernel without MAP_FIXED_NOREPLACE took it as a hint
  }
  if (size > SIZE_MAX - alignment) return nullptr;
  void* raw = mmap(nullptr, size + alignment, PROT_NONE, flags, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(start, alignment);
  if (aligned > start) munmap(raw, aligned - start);
  const std::size_t tail = start + size + alignment - (aligned + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  return reinterpret_cast<void*>(aligned);
}

// Puts plain reserved (PROT_NONE, empty) address space back over [base, base + size).
void restore_reservation(std::uintptr_t base, std::size_t size) {
  mmap(reinterpret_cast<void*>(base), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
       -1, 0);
}

CUresult create(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                unsigned long long flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  if (handle == nullptr || prop == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_properties(st, *prop, CUDA_ERROR_INVALID_DEVICE); rc != CUDA_SUCCESS) return rc;
  const auto types = static_cast<unsigned>(prop->requestedHandleTypes);
  if (types != CU_MEM_HANDLE_TYPE_NONE && types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;  // Win32 and fabric handles do not exist here
  if (prop->win32HandleMetaData != nullptr) return CUDA_ERROR_INVALID_VALUE;  // "required to be zero"
  if (size == 0 || !is_multiple(size, kGranularity)) return CUDA_ERROR_INVALID_VALUE;
  Device& dev = st.device(prop->location.id);
  if (!supports_vmm(st.config, dev.physical)) return CUDA_ERROR_NOT_SUPPORTED;  // CUDASIM_VMM
  vmm_sweep_array_views(st);  // memory arrays no longer show is free for this one
  owe_latency(st.config.alloc_latency_us);
  owe_latency(st.config.latency, TimedCall::mem_create);
  if (!take_device_memory(st, dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto physical = std::make_shared<Physical>();
  if (!take_backing_range(st, prop->location.id, size, &physical->file, &physical->offset)) {
    give_device_memory(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  physical->device = prop->location.id;
  physical->size = size;
  physical->prop = *prop;
  physical->charged = size;
  physical->block_id = ++g_last_block_id;
  dev.stats.vmm_creates++;
  dev.stats.vmm_bytes += size;
  dev.stats.vmm_peak_bytes = std::max(dev.stats.vmm_peak_bytes, dev.stats.vmm_bytes);
  *handle = new_handle(st, std::move(physical));
  return CUDA_SUCCESS;
}

// The synchronous calls (cuMemUnmap, cuMemSetAccess) validate, wait for queued work, then act
// under the lock again, validating anew.
template <typename Validate>
CUresult validated_then_synchronized(Validate validate) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = validate(l.st); rc != CUDA_SUCCESS) return rc;
  }
  wait_for_all_queued_work();
  return CUDA_SUCCESS;
}

}  // namespace

namespace cudasim {

CUresult vmm_map_array(State& st, CUmemGenericAllocationHandle handle, std::uint64_t offset, std::uint64_t bytes,
                       int device, std::shared_ptr<unsigned char>* view) {
  Handle* h = usable_handle(st, handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<Physical>& physical = h->physical;
  if (physical->device != device || bytes == 0 || !is_multiple(offset, kGranularity) || offset > physical->size ||
      bytes > physical->size - offset)
    return CUDA_ERROR_INVALID_VALUE;
  void* at = reserve_address_space(bytes, page_size(), 0);
  if (at == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  VaMapping m;
  m.base = reinterpret_cast<std::uintptr_t>(at);
  m.size = bytes;
  m.offset = offset;
  m.handle = handle;
  m.physical = physical;
  m.access.assign(st.devices.size(), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (!map_over(m, *physical->file, physical->offset + offset)) {
    munmap(at, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Unmapping needs no lock: the handle's count drops at the next sweep, which sees the view gone.
  *view = std::shared_ptr<unsigned char>(static_cast<unsigned char*>(at),
                                         [bytes](unsigned char* p) { munmap(p, bytes); });
  ++h->mappings;
  vmm(st).array_views.push_back(ArrayView{std::move(m), *view});
  return CUDA_SUCCESS;
}

void vmm_sweep_array_views(State& st) {
  if (!st.vmm) return;
  auto& views = st.vmm->array_views;
  for (auto it = views.begin(); it != views.end();) {
    if (!it->view.expired()) {
      ++it;
      continue;
    }
    const CUmemGenericAllocationHandle handle = it->mapping.handle;
    it = views.erase(it);
    --st.vmm->handles.at(handle).mappings;
    maybe_forget_handle(st, handle);
  }
}

bool vmm_range_writable(State& st, std::uintptr_t ptr, std::size_t bytes) {
  if (!st.vmm || bytes == 0) return true;
  VmmState& v = *st.vmm;
  auto it = v.mappings.upper_bound(ptr);
  if (it != v.mappings.begin()) --it;
  for (; it != v.mappings.end() && it->second.base < ptr + bytes; ++it) {
    const VaMapping& m = it->second;
    if (m.base + m.size > ptr && (host_protection(m) & PROT_WRITE) == 0) return false;
  }
  return true;
}

bool vmm_inaccessible(State& st, std::uintptr_t ptr, std::size_t bytes) {
  if (!st.vmm || bytes == 0) return false;
  VmmState& v = *st.vmm;
  auto it = v.reservations.upper_bound(ptr);
  if (it != v.reservations.begin()) --it;
  bool touches = false;
  for (; it != v.reservations.end() && it->second.base < ptr + bytes; ++it) {
    if (it->second.base + it->second.size > ptr) touches = true;
  }
  return touches && find_allocation(st, ptr, bytes) == nullptr;
}

bool vmm_pointer_attribute(State& st, void* data, CUpointer_attribute attribute, CUdeviceptr ptr, CUresult* rc) {
  if (!st.vmm) return false;
  VmmState& v = *st.vmm;
  const Reservation* r = find_reservation(v, ptr);
  if (r == nullptr) return false;
  *rc = CUDA_SUCCESS;
  const VaMapping* m = find_mapping(v, ptr);
  // The reserved range, as documented for the range attributes, and whether memory backs ptr.
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = r->base; return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = r->size; return true;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<int*>(data) = m != nullptr ? 1 : 0; return true;
    default: break;
  }
  if (m == nullptr) {
    *rc = CUDA_ERROR_INVALID_VALUE;  // address space without memory behind it
    return true;
  }
  const Physical& p = *m->physical;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:  // owned by no context: its device's primary one, as for pool memory
      *static_cast<CUcontext*>(data) = st.device(p.device).primary;
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<CUmemorytype*>(data) = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<int*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *static_cast<int*>(data) = 0; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = p.device; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = m->buffer_id; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *static_cast<unsigned long long*>(data) = p.block_id; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *static_cast<CUmemoryPool*>(data) = nullptr; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *static_cast<size_t*>(data) = m->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *static_cast<CUdeviceptr*>(data) = m->base; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = static_cast<unsigned long long>(p.prop.requestedHandleTypes);
      break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {  // for the device of the current context
      CUctx_st* ctx = nullptr;
      *rc = current_context(st, &ctx);
      if (*rc == CUDA_SUCCESS)
        *static_cast<CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS*>(data) =
            static_cast<CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS>(m->access[static_cast<std::size_t>(context_device(ctx))]);
      break;
    }
    default: *rc = CUDA_ERROR_INVALID_VALUE; break;
  }
  return true;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                      CUmemAllocationGranularity_flags option) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  // CUDA_ERROR_INVALID_DEVICE is not among this call's documented results.
  if (CUresult rc = check_properties(l.st, *prop, CUDA_ERROR_INVALID_VALUE); rc != CUDA_SUCCESS) return rc;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                            unsigned long long flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  const std::size_t page = page_size();
  if (ptr == nullptr || flags != 0 || size == 0 || !is_multiple(size, page) || !is_multiple(addr, page))
    return CUDA_ERROR_INVALID_VALUE;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;  // a power of two, or 0
  void* base = reserve_address_space(size, std::max(alignment, kGranularity), addr);
  if (base == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  CUctx_st* ctx = nullptr;
  const int device = current_context(st, &ctx) == CUDA_SUCCESS ? context_device(ctx) : 0;
  const auto at = reinterpret_cast<std::uintptr_t>(base);
  vmm(st).reservations[at] = Reservation{at, size, device};
  st.device(device).stats.vmm_reserved_va_bytes += size;
  *ptr = at;
  owe_latency(l.st.config.latency, TimedCall::address_reserve);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  if (!st.vmm) return CUDA_ERROR_INVALID_VALUE;
  VmmState& v = *st.vmm;
  auto it = v.reservations.find(ptr);
  if (it == v.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  auto mapped = v.mappings.lower_bound(ptr);
  if (mapped != v.mappings.end() && mapped->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // unmap first
  munmap(reinterpret_cast<void*>(ptr), size);
  st.device(it->second.device).stats.vmm_reserved_va_bytes -= size;
  v.reservations.erase(it);
  owe_latency(l.st.config.latency, TimedCall::address_free);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                    unsigned long long flags) {
  CUDASIM_FAULT_POINT("cuMemCreate");
  return create(handle, size, prop, flags);
}

CUDASIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  Handle* h = usable_handle(l.st, handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  --h->refs;
  l.st.device(h->physical->device).stats.vmm_releases++;
  maybe_forget_handle(l.st, handle);
  vmm_sweep_array_views(l.st);  // memory an array no longer shows goes back now, not later
  owe_latency(l.st.config.latency, TimedCall::mem_release);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                 unsigned long long flags) {
  CUDASIM_FAULT_POINT("cuMemMap");
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  Handle* h = usable_handle(st, handle);
  if (h == nullptr || flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!is_multiple(ptr, kGranularity) || !is_multiple(size, kGranularity) || !is_multiple(offset, kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<Physical>& physical = h->physical;
  if (offset > physical->size || size > physical->size - offset) return CUDA_ERROR_INVALID_VALUE;
  VmmState& v = vmm(st);
  const Reservation* r = find_reservation(v, ptr);
  if (r == nullptr || size > r->base + r->size - ptr) return CUDA_ERROR_INVALID_VALUE;  // not reserved
  auto next = v.mappings.lower_bound(ptr);
  if (next != v.mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // mapped
  if (find_mapping(v, ptr) != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!map_backing(*physical->file, physical->offset + offset, ptr, size, PROT_NONE)) {
    restore_reservation(ptr, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // A forked child does not inherit the mapping: the parent's device memory is not the child's.
  madvise(reinterpret_cast<void*>(ptr), size, MADV_DONTFORK);
  VaMapping m;
  m.base = ptr;
  m.size = size;
  m.offset = offset;
  m.handle = handle;
  m.physical = physical;
  m.access.assign(st.devices.size(), CU_MEM_ACCESS_FLAGS_PROT_NONE);
  m.buffer_id = ++st.last_buffer_id;
  ++h->mappings;
  st.device(physical->device).stats.vmm_maps++;
  v.mappings[ptr] = std::move(m);
  owe_latency(l.st.config.latency, TimedCall::mem_map);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto validate = [&](State& st) {
    return st.vmm && !whole_mappings(*st.vmm, ptr, size).empty() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  };
  if (CUresult rc = validated_then_synchronized(validate); rc != CUDA_SUCCESS) return rc;
  Locked l;
  State& st = l.st;
  if (CUresult rc = validate(st); rc != CUDA_SUCCESS) return rc;
  VmmState& v = *st.vmm;
  for (VaMapping* m : whole_mappings(v, ptr, size)) {
    const std::uintptr_t base = m->base;
    const CUmemGenericAllocationHandle handle = m->handle;
    st.allocations.erase(base);
    restore_reservation(base, m->size);
    st.device(m->physical->device).stats.vmm_unmaps++;
    v.mappings.erase(base);
    --v.handles.at(handle).mappings;
    maybe_forget_handle(st, handle);
  }
  vmm_sweep_array_views(st);
  owe_latency(l.st.config.latency, TimedCall::mem_unmap);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  auto validate = [&](State& st) -> CUresult {
    if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    for (std::size_t i = 0; i < count; ++i) {
      if (CUresult rc = check_device_location(st, desc[i].location, CUDA_ERROR_INVALID_DEVICE); rc != CUDA_SUCCESS)
        return rc;
      const auto flags = desc[i].flags;
      if (flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
          flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    }
    // A fully mapped range made of whole mappings.
    return st.vmm && !whole_mappings(*st.vmm, ptr, size).empty() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  };
  if (CUresult rc = validated_then_synchronized(validate); rc != CUDA_SUCCESS) return rc;
  Locked l;
  State& st = l.st;
  if (CUresult rc = validate(st); rc != CUDA_SUCCESS) return rc;
  for (VaMapping* m : whole_mappings(*st.vmm, ptr, size)) {
    for (std::size_t i = 0; i < count; ++i) m->access[static_cast<std::size_t>(desc[i].location.id)] = desc[i].flags;
    mprotect(reinterpret_cast<void*>(m->base), m->size, host_protection(*m));
    sync_allocation(st, *m);
  }
  owe_latency(l.st.config.latency, TimedCall::mem_set_access);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device_location(l.st, *location, CUDA_ERROR_INVALID_DEVICE); rc != CUDA_SUCCESS) return rc;
  const VaMapping* m = l.st.vmm ? find_mapping(*l.st.vmm, ptr) : nullptr;
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = m->access[static_cast<std::size_t>(location->id)];
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                               CUmemGenericAllocationHandle handle) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  const Handle* h = usable_handle(l.st, handle);
  if (prop == nullptr || h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = h->physical->prop;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr || !l.st.vmm) return CUDA_ERROR_INVALID_VALUE;
  const VaMapping* m = find_mapping(*l.st.vmm, reinterpret_cast<std::uintptr_t>(addr));
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;  // not mapped
  ++l.st.vmm->handles.at(m->handle).refs;
  *handle = m->handle;
  owe_latency(l.st.config.latency, TimedCall::retain_allocation_handle);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                     CUmemAllocationHandleType handleType, unsigned long long flags) {
  // Memory still in its device's backing file first moves to a file of its own, once no stream has
  // work queued (nothing may write it while its bytes are copied); checked anew after each wait.
  for (;;) {
    {
      Locked l;
      if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
      std::shared_ptr<Physical> physical;
      if (CUresult rc = check_export(l.st, shareableHandle, handle, handleType, flags, &physical); rc != CUDA_SUCCESS)
        return rc;
      if (physical->file->shared && all_streams_idle(l.st) && !move_to_own_file(l.st, physical))
        return CUDA_ERROR_INVALID_VALUE;
      if (!physical->file->shared) {
        const int fd = reopen_allocation_file(*physical->file);
        if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
        *static_cast<int*>(shareableHandle) = fd;
        return CUDA_SUCCESS;
      }
    }
    wait_for_all_queued_work();
  }
}

CUDASIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                       CUmemAllocationHandleType shHandleType) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  State& st = l.st;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (shHandleType) {
    case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: break;
    case CU_MEM_HANDLE_TYPE_WIN32:
    case CU_MEM_HANDLE_TYPE_WIN32_KMT:
    case CU_MEM_HANDLE_TYPE_FABRIC: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  // For a file descriptor, the handle is the descriptor's value itself (passed as a pointer).
  const auto fd = static_cast<int>(reinterpret_cast<std::intptr_t>(osHandle));
  struct stat info {};
  if (fd < 0 || fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) return CUDA_ERROR_INVALID_VALUE;
  VmmState& v = vmm(st);
  auto known = v.by_file.find({info.st_dev, info.st_ino});
  if (known != v.by_file.end()) {
    if (std::shared_ptr<Physical> physical = known->second.lock(); physical && physical->file) {
      *handle = new_handle(st, std::move(physical));  // the same memory: no second charge
      return CUDA_SUCCESS;
    }
    v.by_file.erase(known);
  }
  // Exported by a cudasim driver: named so, a whole number of granules, sealed against shrinking
  // (so mapping any part of its size can never fault).
  const int number = memfd_device(fd, kMemfdPrefix);
  const int seals = fcntl(fd, F_GET_SEALS);
  if (number < 0 || info.st_size <= 0 || !is_multiple(static_cast<std::uint64_t>(info.st_size), kGranularity) ||
      seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  const int device = ordinal_of_physical(st, number);
  if (device < 0) return CUDA_ERROR_NOT_SUPPORTED;  // a device this process does not see
  std::shared_ptr<BackingFile> file = keep_allocation_file(fd, static_cast<std::uint64_t>(info.st_size));
  if (!file) return CUDA_ERROR_INVALID_VALUE;
  auto physical = std::make_shared<Physical>();
  physical->device = device;
  physical->size = static_cast<std::size_t>(info.st_size);
  physical->file = std::move(file);
  physical->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  physical->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  physical->prop.location = CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
  physical->block_id = ++g_last_block_id;
  v.by_file[{info.st_dev, info.st_ino}] = physical;
  *handle = new_handle(st, std::move(physical));
  return CUDA_SUCCESS;
}
