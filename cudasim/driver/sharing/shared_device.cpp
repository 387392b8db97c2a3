// Simulated devices shared between processes (CUDASIM_SHARED_DEVICES): the per-device file, its locks
// and the liveness of its slots.
#include "shared_device.h"

#include "cudasim_private.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cudasim {

namespace {

constexpr char kMagic[8] = {'C', 'U', 'D', 'A', 'S', 'I', 'M', 'D'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kSlots = 1024;
constexpr long kSlotLockBase = 4096;  // slot i's owner holds byte kSlotLockBase + i; byte 0 is the file's lock

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t slots;
  std::uint64_t total;
  std::uint64_t spare[5];
};
struct Slot {
  std::int32_t pid;
  std::uint32_t live;
  std::uint64_t used;
};
constexpr std::size_t kFileBytes = sizeof(Header) + kSlots * sizeof(Slot);

// fcntl(fd, cmd) on the one byte at `byte` with a lock of `type` (retried when a signal interrupts
// a wait); the lock's type afterwards (F_OFD_GETLK: F_UNLCK when no one else holds the byte), -1 on
// failure.
int byte_lock(int fd, int cmd, short type, long byte) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = byte;
  lock.l_len = 1;
  while (fcntl(fd, cmd, &lock) != 0) {
    if (errno != EINTR) return -1;
  }
  return lock.l_type;
}

// Every attached device of this process, for the fork handler.
std::array<std::atomic<SharedDevice*>, 64> g_attached{};

}  // namespace

struct SharedDevice {
  int fd = -1;
  Header* header = nullptr;
  Slot* slots = nullptr;
  std::uint32_t own = 0;

  void lock() { byte_lock(fd, F_OFD_SETLKW, F_WRLCK, 0); }
  void unlock() { byte_lock(fd, F_OFD_SETLK, F_UNLCK, 0); }
  // Drops the slots whose owner is gone (nobody holds their byte); under the lock.
  void sweep() {
    for (std::uint32_t i = 0; i < kSlots; ++i) {
      if (i == own || slots[i].live == 0) continue;
      if (byte_lock(fd, F_OFD_GETLK, F_WRLCK, kSlotLockBase + static_cast<long>(i)) == F_UNLCK) slots[i] = Slot{};
    }
  }
  std::uint64_t used_locked() const {
    std::uint64_t used = 0;
    for (std::uint32_t i = 0; i < kSlots; ++i) {
      if (slots[i].live != 0) used += slots[i].used;
    }
    return used;
  }
};

std::string default_shared_devices_dir() {
  struct stat st {};
  const bool shm = lstat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);
  return std::string(shm ? "/dev/shm" : "/tmp") + "/cudasim-" + std::to_string(geteuid());
}

SharedDevice* attach_shared_device(const std::string& dir, int physical, std::uint64_t total) {
  const auto fail = [&](const char* what, int fd) -> SharedDevice* {
    std::fprintf(stderr, "cudasim: CUDASIM_SHARED_DEVICES: device %d in \"%s\": %s\n", physical, dir.c_str(), what);
    if (fd >= 0) close(fd);
    return nullptr;
  };
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return fail(std::strerror(errno), -1);
  unsigned char uuid[16];
  cudasim_device_uuid(physical, uuid);
  char name[64] = "/cudasim-";
  for (int i = 0; i < 16; ++i) std::snprintf(name + 9 + 2 * i, 3, "%02x", uuid[i]);
  std::strcat(name, ".device");
  const std::string path = dir + name;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(std::strerror(errno), -1);
  auto* device = new SharedDevice();  // leaked, as the driver's state
  device->fd = fd;
  device->lock();
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    delete device;
    return fail("the device file is not a regular file", fd);
  }
  if (static_cast<std::size_t>(st.st_size) < kFileBytes && ftruncate(fd, static_cast<off_t>(kFileBytes)) != 0) {
    delete device;
    return fail(std::strerror(errno), fd);
  }
  void* map = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    delete device;
    return fail(std::strerror(errno), fd);
  }
  device->header = static_cast<Header*>(map);
  device->slots = reinterpret_cast<Slot*>(static_cast<char*>(map) + sizeof(Header));
  device->own = kSlots;  // none yet: the sweep looks at every slot
  Header& header = *device->header;
  const bool valid = std::memcmp(header.magic, kMagic, sizeof kMagic) == 0 && header.version == kVersion &&
                     header.slots == kSlots;
  device->sweep();
  if (!valid || header.total != total) {
    // Another size's (or no) device file: taken over only when no process uses it.
    for (std::uint32_t i = 0; valid && i < kSlots; ++i) {
      if (device->slots[i].live != 0) {
        munmap(map, kFileBytes);
        delete device;
        return fail("the device file is another size's, and processes use it", fd);
      }
    }
    std::memset(map, 0, kFileBytes);
    header.version = kVersion;
    header.slots = kSlots;
    header.total = total;
    std::memcpy(header.magic, kMagic, sizeof kMagic);
  }
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    if (device->slots[i].live == 0 && byte_lock(fd, F_OFD_SETLK, F_WRLCK, kSlotLockBase + static_cast<long>(i)) >= 0) {
      device->own = i;
      device->slots[i] = Slot{static_cast<std::int32_t>(getpid()), 1, 0};
      break;
    }
  }
  device->unlock();
  if (device->own == kSlots) {
    munmap(map, kFileBytes);
    delete device;
    return fail("every slot of the device file is taken", fd);
  }
  if (physical >= 0 && physical < 64) g_attached[static_cast<std::size_t>(physical)].store(device);
  return device;
}

bool shared_take(SharedDevice& device, std::uint64_t bytes) {
  device.lock();
  std::uint64_t used = device.used_locked();
  if (bytes > device.header->total || used > device.header->total - bytes) {
    device.sweep();  // the dead's memory is free again
    used = device.used_locked();
  }
  const bool fits = bytes <= device.header->total && used <= device.header->total - bytes;
  if (fits) device.slots[device.own].used += bytes;
  device.unlock();
  return fits;
}

void shared_give(SharedDevice& device, std::uint64_t bytes) {
  device.lock();
  Slot& own = device.slots[device.own];
  own.used = own.used > bytes ? own.used - bytes : 0;
  device.unlock();
}

std::uint64_t shared_used(SharedDevice& device) {
  device.lock();
  device.sweep();
  const std::uint64_t used = device.used_locked();
  device.unlock();
  return used;
}

void drop_shared_devices_in_child() {
  for (std::atomic<SharedDevice*>& entry : g_attached) {
    SharedDevice* device = entry.exchange(nullptr);
    if (device == nullptr) continue;
    munmap(device->header, kFileBytes);
    close(device->fd);  // the parent's descriptor keeps the file's locks
  }
}

}  // namespace cudasim
