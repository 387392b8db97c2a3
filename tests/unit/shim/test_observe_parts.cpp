// The observability layer's pure parts: the out-of-memory report's rate limit and the output paths.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cerrno>
#include <string>

#include "base/output_file.h"
#include "base/refusal_limiter.h"

using gpumem::shim::observe::RefusalLimiter;

namespace {
constexpr std::uint64_t kSecond = RefusalLimiter::kIntervalNs;
}

TEST_CASE("refusal limiter: one report per size per second, then a count", "[observe]") {
  RefusalLimiter limiter;
  auto first = limiter.refuse(4096, 10 * kSecond);
  CHECK(first.report);
  CHECK(first.suppressed == 0);
  for (int i = 1; i <= 5; ++i) {
    const auto again = limiter.refuse(4096, 10 * kSecond + static_cast<std::uint64_t>(i) * kSecond / 10);
    CHECK_FALSE(again.report);
    CHECK(again.suppressed == static_cast<std::uint64_t>(i));
  }
  // Another size is reported at once, whatever the first one's state.
  CHECK(limiter.refuse(8192, 10 * kSecond + 1).report);
  // A second after the last report: reported, with the refusals it stands for.
  const auto later = limiter.refuse(4096, 11 * kSecond);
  CHECK(later.report);
  CHECK(later.suppressed == 5);
  CHECK_FALSE(limiter.refuse(4096, 11 * kSecond + 1).report);
}

TEST_CASE("refusal limiter: more distinct sizes than it remembers are all reported", "[observe]") {
  RefusalLimiter limiter;
  for (std::size_t size = 1; size <= 3 * RefusalLimiter::kSizes; ++size) {
    CHECK(limiter.refuse(size * 256, kSecond).report);
  }
  // The most recent sizes are still remembered.
  CHECK_FALSE(limiter.refuse(3 * RefusalLimiter::kSizes * 256, kSecond + 1).report);
}

TEST_CASE("output paths: %p is the process id, %% a percent sign", "[observe]") {
  using gpumem::shim::observe::expand_path;
  using gpumem::shim::observe::path_is_per_process;
  using gpumem::shim::observe::PathFields;
  const auto pid = [](long value) { return PathFields{value, "node1", 0, 0}; };
  CHECK(expand_path("/tmp/stats-%p.json", pid(4242)) == "/tmp/stats-4242.json");
  CHECK(expand_path("%p/%p", pid(7)) == "7/7");
  CHECK(expand_path("100%%-%p", pid(1)) == "100%-1");
  CHECK(expand_path("odd%", pid(1)) == "odd%");
  CHECK(expand_path("%x", pid(1)) == "%x");
  CHECK(expand_path("%%%", pid(1)) == "%%");
  CHECK(path_is_per_process("a-%p"));
  CHECK_FALSE(path_is_per_process("a-%%p"));
  CHECK_FALSE(path_is_per_process("plain"));
  CHECK_FALSE(path_is_per_process("a-%r"));  // a forked child has its parent's rank
}

TEST_CASE("output paths: %h the host, %r the rank, %l the local rank", "[observe]") {
  using gpumem::shim::observe::expand_path;
  const gpumem::shim::observe::PathFields fields{99, "gpu-node-3", 13, 1};
  CHECK(expand_path("/job/stats.%h.%r.%l.%p.json", fields) == "/job/stats.gpu-node-3.13.1.99.json");
  CHECK(expand_path("%r%l%%r", fields) == "131%r");
  CHECK(expand_path("%h", {1, "odd/host", 0, 0}) == "odd_host");
  // A host name any UTS namespace may set never climbs out of the folder named, nor adds one.
  CHECK(expand_path("/job/%h/stats.json", {1, "..", 0, 0}) == "/job/__/stats.json");
  CHECK(expand_path("/job/%h/stats.json", {1, ".", 0, 0}) == "/job/_/stats.json");
  CHECK(expand_path("/job/%h/stats.json", {1, "", 0, 0}) == "/job/_/stats.json");
  CHECK(expand_path("/job/%h.%h/x", {1, ".", 0, 0}) == "/job/_._/x");
  CHECK(expand_path("/job/%h", {1, "../../etc/passwd", 0, 0}) == "/job/.._.._etc_passwd");
  CHECK(expand_path("/job/%h", {1, "a\nb\x1b[2J", 0, 0}) == "/job/a_b_[2J");
  CHECK(expand_path("/job/x.%h", {1, "..", 0, 0}) == "/job/x.__");
  CHECK(expand_path("rank%r", {1, "h", 0, 0}) == "rank0");  // no launcher: rank 0 of 1
}

TEST_CASE("output paths: this process's fields", "[observe]") {
  const gpumem::shim::observe::PathFields fields = gpumem::shim::observe::this_process_fields();
  CHECK(fields.pid == static_cast<long>(getpid()));
  CHECK_FALSE(fields.host.empty());
}

TEST_CASE("write_output: a pipe with no reader is EPIPE, and no signal is left", "[observe]") {
  int ends[2];
  REQUIRE(pipe(ends) == 0);
  close(ends[0]);
  CHECK_FALSE(gpumem::shim::observe::write_output(ends[1], "x", 1));
  CHECK(errno == EPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGPIPE) == 0);
  close(ends[1]);
}

TEST_CASE("write_output: at the file-size limit it is EFBIG after what fits, and no SIGXFSZ ends the process",
          "[observe]") {
  char path_template[] = "/tmp/gpumem-unit-fsize-XXXXXX";
  const int fd = mkstemp(path_template);
  REQUIRE(fd >= 0);
  unlink(path_template);
  // In a child: the limit and the signal's default action (ending the process) are the child's.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_DFL);
    const rlimit limit{10, 10};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(10);
    std::size_t written = 0;
    if (gpumem::shim::observe::write_output(fd, "0123456789abcdef", 16, &written)) _exit(11);
    if (errno != EFBIG) _exit(12);
    if (written != 10) _exit(13);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    if (sigismember(&pending, SIGXFSZ) != 0) _exit(14);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));  // not killed by SIGXFSZ
  CHECK(WEXITSTATUS(status) == 0);
  close(fd);
}

TEST_CASE("output files: character devices and the standard streams are written as they are", "[observe]") {
  std::string why;
  for (const char* device : {"/dev/null", "/dev/full"}) {
    const int fd = gpumem::shim::observe::open_output_file(device, why);
    REQUIRE(fd >= 0);
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(gpumem::shim::observe::write_output(fd, "x", 1) == (std::string(device) == "/dev/null"));
    close(fd);
  }
  // /dev/stderr is a symbolic link (to /proc/self/fd/2): it names this process's stderr, duplicated,
  // whatever that is (here possibly a regular file the caller must not see truncated).
  for (const char* name : {"/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"}) {
    const int fd = gpumem::shim::observe::open_output_file(name, why);
    REQUIRE(fd >= 0);
    struct stat ours {}, stderr_info {};
    fstat(fd, &ours);
    fstat(STDERR_FILENO, &stderr_info);
    CHECK(ours.st_ino == stderr_info.st_ino);
    CHECK(ours.st_dev == stderr_info.st_dev);
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    close(fd);
  }
  CHECK(gpumem::shim::observe::open_output_file("/dev/fd/3", why) == -1);  // only the standard streams
}

TEST_CASE("output files: regular files only, no symbolic links, close-on-exec", "[observe]") {
  char folder_template[] = "/tmp/gpumem-unit-XXXXXX";
  const char* folder = mkdtemp(folder_template);
  REQUIRE(folder != nullptr);
  const std::string dir = folder;
  std::string why;

  const std::string file = dir + "/out.csv";
  int fd = gpumem::shim::observe::open_output_file(file, why);
  REQUIRE(fd >= 0);
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  CHECK(gpumem::shim::observe::write_all(fd, "abc", 3));
  close(fd);
  fd = gpumem::shim::observe::open_output_file(file, why);  // truncates
  REQUIRE(fd >= 0);
  struct stat info {};
  fstat(fd, &info);
  CHECK(info.st_size == 0);
  CHECK(gpumem::shim::observe::write_all(fd, "abc", 3));
  close(fd);
  fd = gpumem::shim::observe::open_output_file(file, why, gpumem::shim::observe::OpenMode::append);  // a log
  REQUIRE(fd >= 0);
  CHECK((fcntl(fd, F_GETFL) & O_APPEND) != 0);
  CHECK(gpumem::shim::observe::write_all(fd, "de", 2));
  fstat(fd, &info);
  CHECK(info.st_size == 5);
  close(fd);

  const std::string link = dir + "/link.csv";
  REQUIRE(symlink(file.c_str(), link.c_str()) == 0);
  CHECK(gpumem::shim::observe::open_output_file(link, why) == -1);
  CHECK(why.find("symbolic link") != std::string::npos);

  const std::string fifo = dir + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(gpumem::shim::observe::open_output_file(fifo, why) == -1);  // no reader: at once, not blocked
  CHECK(why.find("not a regular file") != std::string::npos);

  CHECK(gpumem::shim::observe::open_output_file(dir, why) == -1);
  CHECK(why.find("not a regular file") != std::string::npos);

  // A FIFO that has a reader opens, and is refused all the same: a reader that goes away would
  // otherwise raise SIGPIPE, and one that stops reading would block the writer.
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  CHECK(gpumem::shim::observe::open_output_file(fifo, why, gpumem::shim::observe::OpenMode::append) == -1);
  CHECK(why.find("not a regular file") != std::string::npos);
  close(reader);

  unlink(fifo.c_str());
  unlink(link.c_str());
  unlink(file.c_str());
  rmdir(dir.c_str());
}
