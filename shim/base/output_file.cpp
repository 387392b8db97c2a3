// Opening the shim's output files: %p expanded, no symbolic links, never blocking, close-on-exec.
#include "base/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpumem::shim::observe {

std::string expand_path(std::string_view pattern, long pid) {
  std::string path;
  path.reserve(pattern.size() + 16);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'p') {
        path += std::to_string(pid);
        ++i;
        continue;
      }
      if (pattern[i + 1] == '%') {
        path += '%';
        ++i;
        continue;
      }
    }
    path += pattern[i];
  }
  return path;
}

bool path_is_per_process(std::string_view pattern) {
  for (std::size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    if (pattern[i + 1] == 'p') return true;
    ++i;  // "%%": a literal percent sign
  }
  return false;
}

int open_output_file(const std::string& path, std::string& why, OpenMode mode) noexcept {
  try {
    // O_NONBLOCK: opening a FIFO without a reader fails at once (ENXIO) instead of waiting for one.
    // No O_TRUNC yet: a FIFO or device must not be truncated before it is refused.
    const int append = mode == OpenMode::append ? O_APPEND : 0;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | append, 0644);
    if (fd < 0) {
      const int error = errno;
      std::string reason = std::strerror(error);
      if (error == ELOOP) reason = "it is a symbolic link, which is not followed";
      if (error == EISDIR) reason = "not a regular file (a directory)";
      if (error == ENXIO) reason = "not a regular file (a FIFO or socket with no reader)";
      why = "cannot open \"" + path + "\": " + reason;
      return -1;
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      why = "cannot write to \"" + path + "\": not a regular file";
      return -1;
    }
    if (mode == OpenMode::truncate && ::ftruncate(fd, 0) != 0) {
      const int error = errno;
      ::close(fd);
      why = "cannot truncate \"" + path + "\": " + std::strerror(error);
      return -1;
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
  } catch (...) {  // no host memory for the message
    why.clear();
    return -1;
  }
}

bool write_all(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

bool write_all_without_sigpipe(int fd, const char* data, std::size_t size) noexcept {
  // Block SIGPIPE on this thread for the write; if the write raised it (EPIPE) and it was not
  // already pending, take it back before unblocking, so the program never sees it.
  sigset_t pipe_only;
  sigset_t old_mask;
  sigset_t pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigemptyset(&pending);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  if (pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask) != 0) return false;
  const bool written = write_all(fd, data, size);
  const int error = errno;
  if (!written && error == EPIPE && !was_pending) {
    const timespec no_wait{};
    while (sigtimedwait(&pipe_only, nullptr, &no_wait) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = error;
  return written;
}

}  // namespace gpumem::shim::observe
