// Devices shared by processes through a file (CUDASIM_SHARED_DEVICES), under an exclusive flock.
//
// One slot per live process holds its committed bytes per device.
#include "shared_devices.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cudasim::shared_devices {
namespace {

constexpr int kSlots = 256;
constexpr int kDevices = 64;  // as many as CUDASIM_DEVICES allows
constexpr char kMagic[16] = "cudasim-shared1";

struct Slot {
  std::int32_t pid;  // 0: free
  std::uint32_t unused;
  std::uint64_t committed[kDevices];
};

struct Table {
  char magic[16];
  Slot slots[kSlots];
};

std::string g_path;
int g_fd = -1;
pid_t g_opened_by = 0;  // a forked child opens the file again: flock belongs to the open file
Table* g_table = nullptr;
int g_slot = -1;

bool alive(std::int32_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

class FileLock {
 public:
  FileLock() {
    while (::flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() { ::flock(g_fd, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
};

void close_file() {
  if (g_table != nullptr) ::munmap(g_table, sizeof(Table));
  if (g_fd >= 0) ::close(g_fd);
  g_table = nullptr;
  g_fd = -1;
  g_slot = -1;
}

// Maps the file, made and stamped by the first process (under the lock); false when it is not ours.
bool open_file() {
  close_file();
  g_fd = ::open(g_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (g_fd < 0) return false;
  g_opened_by = ::getpid();
  FileLock lock;
  struct stat info {};
  if (::fstat(g_fd, &info) != 0 || !S_ISREG(info.st_mode)) return false;
  const bool fresh = info.st_size == 0;
  if (fresh && ::ftruncate(g_fd, sizeof(Table)) != 0) return false;
  if (!fresh && info.st_size != static_cast<off_t>(sizeof(Table))) return false;
  void* mapped = ::mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
  if (mapped == MAP_FAILED) return false;
  g_table = static_cast<Table*>(mapped);
  if (fresh) std::memcpy(g_table->magic, kMagic, sizeof kMagic);
  return std::memcmp(g_table->magic, kMagic, sizeof kMagic) == 0;
}

// The file, opened again in a forked child; null without sharing (or when it cannot be had).
Table* table() {
  if (g_path.empty()) return nullptr;
  if (g_table == nullptr || g_opened_by != ::getpid()) {
    if (!open_file()) {
      close_file();
      return nullptr;
    }
  }
  return g_table;
}

// This process's slot, taken (with the lock held) at its first charge: a free one, or one whose
// process is gone. -1 when all are held by live processes.
int own_slot(Table& t) {
  const pid_t me = ::getpid();
  if (g_slot >= 0 && t.slots[g_slot].pid == me) return g_slot;
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = t.slots[i];
    if (slot.pid == 0 || slot.pid == me || !alive(slot.pid)) {
      std::memset(&slot, 0, sizeof slot);
      slot.pid = me;
      g_slot = i;
      return i;
    }
  }
  return -1;
}

std::uint64_t others_locked(const Table& t, int device) {
  std::uint64_t sum = 0;
  const pid_t me = ::getpid();
  for (const Slot& slot : t.slots) {
    if (slot.pid != 0 && slot.pid != me && alive(slot.pid)) sum += slot.committed[device];
  }
  return sum;
}

bool in_range(int device) { return device >= 0 && device < kDevices; }

}  // namespace

bool configure(const std::string& path) {
  g_path = path;
  if (path.empty()) return true;
  if (table() != nullptr) return true;
  std::fprintf(stderr, "cudasim: CUDASIM_SHARED_DEVICES=%s: cannot open it as a shared-device file (%s)\n",
               path.c_str(), errno != 0 ? std::strerror(errno) : "another kind of file");
  g_path.clear();
  return false;
}

bool reserve(int device, std::uint64_t total, std::uint64_t committed, std::uint64_t bytes) {
  Table* t = table();
  if (t == nullptr || !in_range(device)) return true;
  FileLock lock;
  const int slot = own_slot(*t);
  if (slot < 0) return false;  // more live processes than slots: as a full device
  const std::uint64_t taken = committed + others_locked(*t, device);
  if (taken > total || bytes > total - taken) return false;
  t->slots[slot].committed[device] = committed + bytes;
  return true;
}

void publish(int device, std::uint64_t committed) {
  Table* t = table();
  if (t == nullptr || !in_range(device)) return;
  FileLock lock;
  const int slot = own_slot(*t);
  if (slot >= 0) t->slots[slot].committed[device] = committed;
}

std::uint64_t others(int device) {
  Table* t = table();
  if (t == nullptr || !in_range(device)) return 0;
  FileLock lock;
  return others_locked(*t, device);
}

}  // namespace cudasim::shared_devices
