// Opening and writing the shim's output files (%p, %h, %r, %l expanded): writes no signal can turn fatal.
#include "base/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "policy/process_policy.h"

namespace gpumem::shim::observe {

PathFields this_process_fields() {
  PathFields fields;
  fields.pid = static_cast<long>(::getpid());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "unknown-host");
  fields.host = host;
  const PolicyResult& result = process_policy();
  if (result.policy) {
    fields.rank = result.policy->ranks.rank.value.value_or(0);
    fields.local_rank = result.policy->ranks.local_rank.value.value_or(0);
  }
  return fields;
}

std::string path_component(std::string_view value) {
  // Any UTS namespace may name its host "..", "a/b" or worse: an expansion never adds a folder nor
  // climbs out of one, and never writes a control character into a file name.
  std::string component;
  bool dots_only = true;
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    component += c == '/' || byte < 0x20 || byte == 0x7f ? '_' : c;
    dots_only = dots_only && c == '.';
  }
  if (dots_only) component.assign(std::max<std::size_t>(component.size(), 1), '_');  // "", ".", ".."
  return component;
}

std::string expand_path(std::string_view pattern, const PathFields& fields) {
  std::string path;
  path.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char field = pattern[i + 1];
      switch (field) {
        case 'p': path += std::to_string(fields.pid); break;
        case 'r': path += std::to_string(fields.rank); break;
        case 'l': path += std::to_string(fields.local_rank); break;
        case '%': path += '%'; break;
        case 'h':
          path += path_component(fields.host);
          break;
        default: path += '%'; continue;
      }
      ++i;
      continue;
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

namespace {

// The descriptor a name of this process's standard output or error stands for; -1 for other names.
// Those names are symbolic links (/dev/stderr -> /proc/self/fd/2) to whatever the stream is: a
// terminal, a pipe, a file the shell opened (which must not be truncated).
int standard_stream(std::string_view path) noexcept {
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    const char digit = static_cast<char>('0' + fd);
    const std::string_view named = fd == STDOUT_FILENO ? "/dev/stdout" : "/dev/stderr";
    if (path == named || (path.size() == 9 && path.substr(0, 8) == "/dev/fd/" && path[8] == digit) ||
        (path.size() == 15 && path.substr(0, 14) == "/proc/self/fd/" && path[14] == digit)) {
      return fd;
    }
  }
  return -1;
}

const char* refused_kind(mode_t mode) noexcept {
  if (S_ISREG(mode) || S_ISCHR(mode)) return nullptr;
  if (S_ISDIR(mode)) return "not a regular file (a directory)";
  if (S_ISFIFO(mode) || S_ISSOCK(mode)) return "not a regular file (a FIFO or socket)";
  return "not a regular file or character device";
}

}  // namespace

int open_output_file(const std::string& path, std::string& why, OpenMode mode) noexcept {
  try {
    if (const int stream = standard_stream(path); stream >= 0) {
      const int fd = ::fcntl(stream, F_DUPFD_CLOEXEC, 3);
      if (fd < 0) why = "cannot write to \"" + path + "\": " + std::strerror(errno);
      return fd;
    }
    // O_NONBLOCK: opening a FIFO without a reader fails at once (ENXIO) instead of waiting for one.
    // No O_TRUNC yet: a FIFO or device must not be truncated before it is refused. O_NOCTTY: a
    // terminal is written to, never made the process's controlling terminal.
    const int append = mode == OpenMode::append ? O_APPEND : 0;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | append,
                          0644);
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
    const char* refused = ::fstat(fd, &info) != 0 ? "cannot be examined" : refused_kind(info.st_mode);
    if (refused != nullptr) {
      ::close(fd);
      why = "cannot write to \"" + path + "\": " + refused;
      return -1;
    }
    if (S_ISREG(info.st_mode) && mode == OpenMode::truncate && ::ftruncate(fd, 0) != 0) {
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

bool write_output(int fd, const char* data, std::size_t size, std::size_t* written) noexcept {
  // Block SIGPIPE and SIGXFSZ on this thread for the write; whichever the write raised (EPIPE, EFBIG)
  // and was not already pending is taken back before unblocking, so the program never sees it.
  sigset_t ours;
  sigset_t old_mask;
  sigset_t pending;
  sigemptyset(&ours);
  sigaddset(&ours, SIGPIPE);
  sigaddset(&ours, SIGXFSZ);
  sigemptyset(&pending);
  sigpending(&pending);
  const bool pipe_was_pending = sigismember(&pending, SIGPIPE) == 1;
  const bool size_was_pending = sigismember(&pending, SIGXFSZ) == 1;
  if (pthread_sigmask(SIG_BLOCK, &ours, &old_mask) != 0) return false;
  std::size_t done = 0;
  bool ok = true;
  while (done < size) {
    const ssize_t count = ::write(fd, data + done, size - done);
    if (count < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    done += static_cast<std::size_t>(count);
  }
  const int error = errno;
  if (!ok) {
    sigset_t raised;
    sigemptyset(&raised);
    if (error == EPIPE && !pipe_was_pending) sigaddset(&raised, SIGPIPE);
    if (error == EFBIG && !size_was_pending) sigaddset(&raised, SIGXFSZ);
    const timespec no_wait{};
    if (sigismember(&raised, SIGPIPE) == 1 || sigismember(&raised, SIGXFSZ) == 1) {
      while (sigtimedwait(&raised, nullptr, &no_wait) < 0 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (written != nullptr) *written = done;
  errno = error;
  return ok;
}

}  // namespace gpumem::shim::observe
