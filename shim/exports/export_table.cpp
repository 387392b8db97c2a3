#include "exports/export_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iterator>
#include <new>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/fork_safe_lock.h"

namespace gpumem::shim::ipc {
namespace {

constexpr std::uint32_t kSlots = 4096;
// Names the slot layout too: processes of another gpumem version find no table they can read.
constexpr std::array<char, 16> kTableMagic = {'g', 'p', 'u', 'm', 'e', 'm', '-', 'i',
                                              'p', 'c', '-', 't', 'a', 'b', 'l', '4'};

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

// This process's table. Invariant: `table` is mapped and `fd` open for `pid`; a forked child, whose
// inherited mapping is still the parent's table, makes its own at its first export.
struct Exporter {
  pid_t pid = 0;
  int fd = -1;
  SharedTable* table = nullptr;
  std::unordered_map<std::uintptr_t, std::uint32_t> slot_of;  // block base -> slot
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

// Needs ProcessLock::export_table. Null when no table can be made (no memfd, no memory).
Exporter* exporter_for_this_process() {
  const pid_t pid = getpid();
  if (g_exporter != nullptr && g_exporter->pid == pid) return g_exporter;
  const int fd = memfd_create("gpumem-ipc-exports", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  void* mapped = MAP_FAILED;
  if (ftruncate(fd, sizeof(SharedTable)) == 0) {
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
  g_exporter = exporter;  // a forked child's inherited one is left as it is: it is the parent's
  g_published.store(0, std::memory_order_relaxed);
  return exporter;
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

PublishResult publish(std::uintptr_t block_base, const ExportedBlock& block, Token& token) {
  const auto lock = lock_fork_safely(ProcessLock::export_table);
  Exporter* exporter = exporter_for_this_process();
  if (exporter == nullptr) return PublishResult::no_table;
  std::uint32_t index = 0;
  if (auto found = exporter->slot_of.find(block_base); found != exporter->slot_of.end()) {
    index = found->second;  // exported again: the same handle, as the driver gives
  } else {
    if (!exporter->free_slots.empty()) {
      index = exporter->free_slots.back();
      exporter->free_slots.pop_back();
    } else if (exporter->next_unused < kSlots) {
      index = exporter->next_unused++;
    } else {
      return PublishResult::table_full;
    }
    write_slot(exporter->table->slot[index], true, &block);
    exporter->slot_of.emplace(block_base, index);
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

bool exported_here(const Token& token) {
  const auto lock = lock_fork_safely(ProcessLock::export_table);
  return g_exporter != nullptr && g_exporter->pid == getpid() && token.pid == g_exporter->pid &&
         token.process_number == g_exporter->table->process_number;
}

bool read_exported(const Token& token, ExportedBlock& block, std::string& why) {
  const std::string path = fmt::format("/proc/{}/fd/{}", token.pid, token.table_fd);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    struct stat process {};
    if (stat(fmt::format("/proc/{}", token.pid).c_str(), &process) != 0) {
      why = fmt::format("the exporting process {} has exited", token.pid);
    } else if (error == EACCES || error == EPERM) {
      why = fmt::format("process {} belongs to another user (or forbids reading its descriptors): only "
                        "processes of the same user may open its handles", token.pid);
    } else {
      why = fmt::format("process {} no longer exports this handle", token.pid);
    }
    return false;
  }
  struct stat info {};
  void* mapped = MAP_FAILED;
  if (fstat(fd, &info) == 0 && static_cast<std::size_t>(info.st_size) >= sizeof(SharedTable)) {
    mapped = mmap(nullptr, sizeof(SharedTable), PROT_READ, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (mapped == MAP_FAILED) {
    why = fmt::format("process {} has no gpumem export table at descriptor {} (a stale handle)", token.pid,
                      token.table_fd);
    return false;
  }
  const auto* table = static_cast<const SharedTable*>(mapped);
  bool found = false;
  if (table->magic != kTableMagic || table->process_number != token.process_number || token.slot >= kSlots) {
    why = fmt::format("the handle names an export table process {} no longer has (a stale handle)", token.pid);
  } else {
    const SharedSlot& slot = table->slot[token.slot];
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const std::uint64_t before = slot.sequence.load(std::memory_order_acquire);
      if (before % 2 != 0) continue;
      const std::uint64_t generation = slot.generation;
      const std::uint64_t live = slot.live;
      std::memcpy(&block, &slot.block, sizeof block);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.sequence.load(std::memory_order_relaxed) != before) continue;
      found = live == 1 && generation == token.generation;
      if (!found) why = fmt::format("process {} has freed the block this handle exported", token.pid);
      break;
    }
    if (!found && why.empty()) why = fmt::format("process {} kept rewriting the export table", token.pid);
  }
  munmap(mapped, sizeof(SharedTable));
  return found;
}

}  // namespace gpumem::shim::ipc
