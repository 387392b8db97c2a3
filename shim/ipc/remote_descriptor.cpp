// Fetching a descriptor another process holds (a pool's, a VMM piece's), as nothing but memory.
#include "ipc/remote_descriptor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include <fmt/format.h>

namespace gpumem::shim::ipc {
namespace {

// What kind of file a mode is, when it cannot be memory a driver shares: a FIFO or socket (reading
// could block, opening a FIFO blocks), a directory, a block device. Null for what may be.
const char* not_memory(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  return nullptr;
}

int refuse(pid_t pid, int fd, std::string_view what, std::string& why) {
  why = fmt::format("process {}'s descriptor {} is {}, not memory it shares (a stale or forged handle)", pid, fd,
                    what);
  return -1;
}

}  // namespace

const char* not_shared_memory(int fd) {
  struct stat info {};
  return fstat(fd, &info) != 0 ? "unreadable" : not_memory(info.st_mode);
}

int fetch_descriptor(pid_t pid, int fd, std::string& why) {
  if (pid <= 0 || fd < 0) {
    why = fmt::format("the handle names no descriptor (pid {}, descriptor {}): a forged or corrupt handle", pid, fd);
    return -1;
  }
  struct stat info {};
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    const int fetched = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));  // close-on-exec
    close(pidfd);
    if (fetched >= 0) {
      // A duplicate: nothing was opened. What it is decides whether the driver may be given it.
      const char* what = fstat(fetched, &info) != 0 ? "unreadable" : not_memory(info.st_mode);
      if (what == nullptr) return fetched;
      close(fetched);
      return refuse(pid, fd, what, why);
    }
  }
#endif
  // Reopening serves regular files only (a memfd); anything else is refused before it is opened, and
  // the open never blocks nor takes a terminal.
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  if (stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    const char* what = not_memory(info.st_mode);
    return refuse(pid, fd, what != nullptr ? what : "not a regular file", why);
  }
  const int reopened = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (reopened >= 0) {
    if (fstat(reopened, &info) == 0 && S_ISREG(info.st_mode)) {
      fcntl(reopened, F_SETFL, fcntl(reopened, F_GETFL) & ~O_NONBLOCK);
      return reopened;
    }
    close(reopened);
    return refuse(pid, fd, "not a regular file", why);
  }
  const int error = errno;
  if (kill(pid, 0) != 0 && errno == ESRCH) {
    why = fmt::format("the exporting process {} has exited", pid);
  } else if (error == EACCES || error == EPERM) {
    why = fmt::format("process {} belongs to another user (or forbids reading its descriptors): only processes "
                      "of the same user may open its handles", pid);
  } else {
    why = fmt::format("process {} no longer holds the descriptor {} its handle names", pid, fd);
  }
  return -1;
}

}  // namespace gpumem::shim::ipc
