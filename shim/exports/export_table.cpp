// The export table of IPC handles: publishing and withdrawing blocks (exporter), reading a slot (importer).
#include "exports/export_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <iterator>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/fork_safe_lock.h"
#include "exports/descriptor_service.h"

namespace gpumem::shim::ipc {
namespace {

constexpr std::uint32_t kSlots = 4096;
// Names the slot layout too: processes of another gpumem version find no table they can read.
constexpr std::array<char, 16> kTableMagic = {'g', 'p', 'u', 'm', 'e', 'm', '-', 'i',
                                              'p', 'c', '-', 't', 'a', 'b', 'l', '7'};

// Written by the exporter under ProcessLock::export_table, read by importers in other processes
// without a lock: the sequence is odd while a write is under way, so a reader that saw it change
// reads again.
struct SharedSlot {
  std::atomic<std::uint64_t> sequence;
  std::uint64_t generation;  // bumped at each publish in this slot
  std::uint64_t live;        // 1 while the block is exported and allocated
  ExportedBlock block;
};
struct SharedTable {
  std::array<char, 16> magic;
  std::uint64_t process_number;
  std::uint32_t slots;
  std::uint32_t unused;
  SharedSlot slot[kSlots];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "readers in other processes need lock-free atomics");

// What this process keeps of a live VMM block's slot: the pieces the descriptor service exports.
struct VmmRecord {
  const VmmPieceSource* source = nullptr;
  std::vector<VmmPieceRef> pieces;
};

// This process's table. Invariant: `table` is mapped and `fd` open for `pid`; a forked child closes
// its inherited copy (forget_parents_exports) and makes its own at its first export. Every live VMM
// slot has its record in vmm_of, and only those.
struct Exporter {
  pid_t pid = 0;
  int fd = -1;
  SharedTable* table = nullptr;
  std::unordered_map<std::uintptr_t, std::uint32_t> slot_of;  // block base -> slot
  std::unordered_map<std::uint32_t, VmmRecord> vmm_of;         // slot -> its VMM block's pieces
  std::vector<std::uint32_t> free_slots;
  std::uint32_t next_unused = 0;
};

Exporter* g_exporter = nullptr;          // leaked: nothing runs at exit
std::atomic<std::size_t> g_published{0};  // live slots, so withdraw() costs one load when none

std::uint64_t random_number() {
  std::uint64_t value = 0;
  if (getrandom(&value, sizeof value, 0) != static_cast<ssize_t>(sizeof value)) {
    value = static_cast<std::uint64_t>(getpid()) << 32 ^ static_cast<std::uint64_t>(time(nullptr));
  }
  return value;
}

// In a forked child (its only thread, no lock held): the parent's table and descriptor service are
// not this process's to write or keep open. Their bookkeeping stays behind (leaked: never read).
void forget_parents_exports() noexcept {
  forget_parents_service();
  Exporter* inherited = g_exporter;
  if (inherited == nullptr) return;
  if (inherited->table != nullptr) munmap(inherited->table, sizeof(SharedTable));
  if (inherited->fd >= 0) close(inherited->fd);
  g_exporter = nullptr;
  g_published.store(0, std::memory_order_relaxed);
}

// Needs ProcessLock::export_table. Null when no table can be made (no memfd, no memory).
Exporter* exporter_for_this_process() {
  const pid_t pid = getpid();
  if (g_exporter != nullptr && g_exporter->pid == pid) return g_exporter;
  const int fd = memfd_create("gpumem-ipc-exports", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return nullptr;
  void* mapped = MAP_FAILED;
  if (ftruncate(fd, sizeof(SharedTable)) == 0) {
    // Any process of the user can open the table through /proc: sealed, none can shrink it under
    // this process's mapping (a write past its end would be SIGBUS here).
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    mapped = mmap(nullptr, sizeof(SharedTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  auto* exporter = mapped == MAP_FAILED ? nullptr : new (std::nothrow) Exporter;
  if (exporter == nullptr) {
    if (mapped != MAP_FAILED) munmap(mapped, sizeof(SharedTable));
    close(fd);
    return nullptr;
  }
  auto* table = static_cast<SharedTable*>(mapped);  // zero-filled by ftruncate
  table->magic = kTableMagic;
  table->process_number = random_number();
  table->slots = kSlots;
  exporter->pid = pid;
  exporter->fd = fd;
  exporter->table = table;
  g_exporter = exporter;
  g_published.store(0, std::memory_order_relaxed);
  reset_in_forked_child(forget_parents_exports);  // lock-free; a full list only leaves the child's copy open
  return exporter;
}

// Gives back a table made for an export that then failed, before any slot was written in it.
// Needs ProcessLock::export_table.
void discard_exporter(Exporter* exporter) noexcept {
  munmap(exporter->table, sizeof(SharedTable));
  close(exporter->fd);
  delete exporter;
  g_exporter = nullptr;
}

void write_slot(SharedSlot& slot, bool live, const ExportedBlock* block) {
  const std::uint64_t sequence = slot.sequence.load(std::memory_order_relaxed);
  slot.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  if (block != nullptr) {
    ++slot.generation;
    slot.block = *block;
  }
  slot.live = live ? 1 : 0;
  slot.sequence.store(sequence + 2, std::memory_order_release);
}

}  // namespace

PublishResult publish(std::uintptr_t block_base, const ExportedBlock& block, VmmExport* vmm, Token& token,
                      std::string& why) {
  const bool is_vmm = block.vmm.piece_count > 0;
  if (is_vmm && (vmm == nullptr || vmm->source == nullptr || vmm->pieces.size() != block.vmm.piece_count)) {
    return PublishResult::no_table;  // a caller's mistake: nothing could serve the pieces
  }
  const auto lock = lock_fork_safely(ProcessLock::export_table);
  const bool had_table = g_exporter != nullptr && g_exporter->pid == getpid();
  Exporter* exporter = exporter_for_this_process();
  if (exporter == nullptr) return PublishResult::no_table;
  if (is_vmm && !ensure_descriptor_service(exporter->table->process_number, why)) {
    if (!had_table) discard_exporter(exporter);  // the failure leaves the process as it was
    return PublishResult::no_service;
  }
  std::uint32_t index = 0;
  if (auto found = exporter->slot_of.find(block_base); found != exporter->slot_of.end()) {
    index = found->second;  // exported again: the same handle, as the driver gives
  } else {
    try {
      if (is_vmm) exporter->vmm_of.reserve(exporter->vmm_of.size() + 1);
      exporter->slot_of.reserve(exporter->slot_of.size() + 1);
    } catch (...) {
      return PublishResult::no_table;
    }
    if (!exporter->free_slots.empty()) {
      index = exporter->free_slots.back();
      exporter->free_slots.pop_back();
    } else if (exporter->next_unused < kSlots) {
      index = exporter->next_unused++;
    } else {
      return PublishResult::table_full;
    }
    // Recorded before the slot is live, so a request that finds the slot finds its pieces.
    if (is_vmm) exporter->vmm_of.emplace(index, VmmRecord{vmm->source, std::move(vmm->pieces)});  // room reserved
    write_slot(exporter->table->slot[index], true, &block);
    exporter->slot_of.emplace(block_base, index);  // room reserved above
    g_published.fetch_add(1, std::memory_order_relaxed);
  }
  token = Token{};
  token.process_number = exporter->table->process_number;
  token.generation = exporter->table->slot[index].generation;
  token.pid = exporter->pid;
  token.table_fd = exporter->fd;
  token.slot = index;
  return PublishResult::published;
}

namespace {

// Needs ProcessLock::export_table. Marks the slot of `entry` dead and frees it; the entry after it.
std::unordered_map<std::uintptr_t, std::uint32_t>::iterator withdraw_entry(
    Exporter& exporter, std::unordered_map<std::uintptr_t, std::uint32_t>::iterator entry) {
  const std::uint32_t index = entry->second;
  write_slot(exporter.table->slot[index], false, nullptr);
  exporter.vmm_of.erase(index);  // the descriptor service finds the slot dead from now on
  const auto next = exporter.slot_of.erase(entry);
  g_published.fetch_sub(1, std::memory_order_relaxed);
  exporter.free_slots.push_back(index);  // may throw: the slot is then never reused
  return next;
}

// This process's exporter, under ProcessLock::export_table; null when it has none (or only its parent's).
Exporter* own_exporter() {
  Exporter* exporter = g_exporter;
  return exporter == nullptr || exporter->pid != getpid() ? nullptr : exporter;
}

}  // namespace

void withdraw(std::uintptr_t block_base) noexcept {
  if (g_published.load(std::memory_order_relaxed) == 0) return;
  try {
    const auto lock = lock_fork_safely(ProcessLock::export_table);
    Exporter* exporter = own_exporter();
    if (exporter == nullptr) return;
    if (auto found = exporter->slot_of.find(block_base); found != exporter->slot_of.end()) {
      withdraw_entry(*exporter, found);
    }
  } catch (...) {
  }
}

void withdraw_range(std::uintptr_t begin, std::uintptr_t end) noexcept {
  if (g_published.load(std::memory_order_relaxed) == 0) return;
  try {
    const auto lock = lock_fork_safely(ProcessLock::export_table);
    Exporter* exporter = own_exporter();
    if (exporter == nullptr) return;
    for (auto entry = exporter->slot_of.begin(); entry != exporter->slot_of.end();) {
      entry = entry->first >= begin && entry->first < end ? withdraw_entry(*exporter, entry) : std::next(entry);
    }
  } catch (...) {
  }
}

bool has_exports() noexcept { return g_published.load(std::memory_order_relaxed) > 0; }

VmmLookup vmm_pieces_for(std::uint64_t process_number, std::uint32_t slot, std::uint64_t generation,
                         std::uint32_t first, std::uint32_t count, const VmmPieceSource*& source,
                         std::vector<VmmPieceRef>& refs) {
  const auto lock = lock_fork_safely(ProcessLock::export_table);
  Exporter* exporter = own_exporter();
  if (exporter == nullptr || exporter->table->process_number != process_number || slot >= kSlots) {
    return VmmLookup::bad_request;
  }
  const SharedSlot& shared = exporter->table->slot[slot];
  const auto record = exporter->vmm_of.find(slot);
  if (shared.live != 1 || shared.generation != generation || record == exporter->vmm_of.end()) return VmmLookup::freed;
  const std::vector<VmmPieceRef>& pieces = record->second.pieces;
  if (count == 0 || first >= pieces.size() || count > pieces.size() - first) return VmmLookup::bad_request;
  refs.assign(pieces.begin() + first, pieces.begin() + first + count);
  source = record->second.source;
  return VmmLookup::found;
}

bool exported_here(const Token& token) {
  const auto lock = lock_fork_safely(ProcessLock::export_table);
  return g_exporter != nullptr && g_exporter->pid == getpid() && token.pid == g_exporter->pid &&
         token.process_number == g_exporter->table->process_number;
}

namespace {

// What the importer reads of a table, with pread into its own memory: nothing of the exporter's file
// is ever mapped here, so a table truncated (or rewritten) while it is read fails the read, never
// raises SIGBUS in this process.
bool read_at(int fd, void* into, std::size_t size, std::size_t offset) {
  auto* bytes = static_cast<char*>(into);
  while (size > 0) {
    const ssize_t got = pread(fd, bytes, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<std::size_t>(got);
    offset += static_cast<std::size_t>(got);
  }
  return true;
}

// The exporter's table, opened read-only without blocking and without side effects: only a memfd of
// exactly a table's size is opened at all (a FIFO would block an open, a device could be a terminal).
int open_table(const Token& token, std::string& why) {
  const std::string path = fmt::format("/proc/{}/fd/{}", token.pid, token.table_fd);
  struct stat info {};
  const bool found = stat(path.c_str(), &info) == 0;  // the file the descriptor names, not opened
  const int error = errno;
  if (!found) {
    struct stat process {};
    if (stat(fmt::format("/proc/{}", token.pid).c_str(), &process) != 0) {
      why = fmt::format("the exporting process {} has exited", token.pid);
    } else if (error == EACCES || error == EPERM) {
      why = fmt::format("process {} belongs to another user (or forbids reading its descriptors): only "
                        "processes of the same user may open its handles", token.pid);
    } else {
      why = fmt::format("process {} no longer exports this handle", token.pid);
    }
    return -1;
  }
  const auto not_a_table = [&](std::string_view what) {
    why = fmt::format("process {}'s descriptor {} is {}, not a gpumem export table (a stale or forged handle)",
                      token.pid, token.table_fd, what);
    return -1;
  };
  if (!S_ISREG(info.st_mode)) return not_a_table(S_ISFIFO(info.st_mode) ? "a FIFO" : "not a regular file");
  if (static_cast<std::uint64_t>(info.st_size) != sizeof(SharedTable)) return not_a_table("of another size");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    why = fmt::format("process {} no longer exports this handle", token.pid);
    return -1;
  }
  // The same checks on what was opened (the descriptor may have been replaced meanwhile); a memfd is
  // the one kind of regular file that answers F_GET_SEALS.
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || fcntl(fd, F_GET_SEALS) < 0) {
    close(fd);
    return not_a_table("not a memfd");
  }
  return fd;
}

// Whether what a slot says of a block is possible, whoever wrote it; `why` when not.
bool plausible(const Token& token, const ExportedBlock& block, std::string& why) {
  const auto refuse = [&](std::string_view what) {
    why = fmt::format("process {}'s export table describes the block impossibly ({}): a corrupt or forged "
                      "handle", token.pid, what);
    return false;
  };
  if (block.size == 0) return refuse("no size");
  if (block.vmm.piece_count > 0) {
    // The stretches themselves are checked as the descriptor service sends them (ipc/vmm_blocks.cpp).
    return block.vmm.piece_count <= kMaxVmmPieces || refuse("too many mappings");
  }
  if (block.pool_fd < -1) return refuse("a bad pool descriptor");
  if (block.pool_fd < 0 && block.offset > UINT64_MAX - block.size) return refuse("an offset past any region");
  return true;
}

}  // namespace

bool read_exported(const Token& token, ExportedBlock& block, std::string& why) {
  if (token.pid <= 0 || token.table_fd < 0 || token.slot >= kSlots) {
    why = fmt::format("the handle names no export table (pid {}, descriptor {}, slot {}): a forged or corrupt "
                      "handle", token.pid, token.table_fd, token.slot);
    return false;
  }
  const int fd = open_table(token, why);
  if (fd < 0) return false;
  const auto stale = [&] {
    why = fmt::format("the handle names an export table process {} no longer has (a stale handle)", token.pid);
    return false;
  };
  const auto changed = [&] {
    why = fmt::format("process {}'s export table changed size while it was read (a stale or forged handle)",
                      token.pid);
    return false;
  };
  const auto finish = [&](bool found) {
    close(fd);
    return found;
  };
  std::array<char, 16> magic{};
  std::uint64_t process_number = 0;
  if (!read_at(fd, magic.data(), magic.size(), offsetof(SharedTable, magic)) ||
      !read_at(fd, &process_number, sizeof process_number, offsetof(SharedTable, process_number))) {
    return finish(changed());
  }
  if (magic != kTableMagic || process_number != token.process_number) return finish(stale());
  // The slot as a seqlock reader sees it: its sequence, then its contents, then its sequence again,
  // each its own read; an odd or changed sequence means a write was under way.
  const std::size_t at = offsetof(SharedTable, slot) + std::size_t{token.slot} * sizeof(SharedSlot);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::uint64_t before = 0, after = 0, generation = 0, live = 0;
    if (!read_at(fd, &before, sizeof before, at + offsetof(SharedSlot, sequence))) return finish(changed());
    if (before % 2 != 0) continue;
    if (!read_at(fd, &generation, sizeof generation, at + offsetof(SharedSlot, generation)) ||
        !read_at(fd, &live, sizeof live, at + offsetof(SharedSlot, live)) ||
        !read_at(fd, &block, sizeof block, at + offsetof(SharedSlot, block)) ||
        !read_at(fd, &after, sizeof after, at + offsetof(SharedSlot, sequence))) {
      return finish(changed());
    }
    if (after != before) continue;
    if (live != 1 || generation != token.generation) {
      why = fmt::format("process {} has freed the block this handle exported", token.pid);
      return finish(false);
    }
    return finish(plausible(token, block, why));
  }
  why = fmt::format("process {} kept rewriting the export table", token.pid);
  return finish(false);
}

}  // namespace gpumem::shim::ipc
