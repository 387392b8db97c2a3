// Fetching another process's file descriptor (pidfd_getfd, else /proc/<pid>/fd).
#include "ipc/remote_descriptor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace gpumem::shim::ipc {

int fetch_descriptor(pid_t pid, int fd, std::string& why) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    const int fetched = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));  // close-on-exec
    close(pidfd);
    if (fetched >= 0) return fetched;
  }
#endif
  const int reopened = open(fmt::format("/proc/{}/fd/{}", pid, fd).c_str(), O_RDWR | O_CLOEXEC);
  if (reopened >= 0) return reopened;
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
