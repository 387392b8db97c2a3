// Opening and writing the files the shim writes for the user (log, trace, statistics): never
// blocking, never following a symbolic link, never handed to a program the process execs, never
// ending the program with a signal its writes raise.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpumem::shim::observe {

// What the fields of an output path stand for.
struct PathFields {
  long pid = 0;
  std::string host;  // the host name
  // The launcher's global and local rank (policy/ranks.h); 0 when no launcher gave them (a process
  // started alone is rank 0 of 1).
  unsigned rank = 0;
  unsigned local_rank = 0;
};

// This process's fields: its pid now, its host name, the ranks of the process's policy.
PathFields this_process_fields();

// `pattern` with "%p" replaced by the process id, "%h" by the host name, "%r" by the rank, "%l" by the
// local rank, and "%%" by "%" (as core_pattern spells them); any other "%" stays as it is. The host
// name is made one harmless path component first (path_component).
std::string expand_path(std::string_view pattern, const PathFields& fields);
// `value` as part of one file name: "/" and control characters become "_", and a value of dots alone
// ("", ".", "..") becomes as many "_" (at least one), so no expansion adds or climbs a folder.
std::string path_component(std::string_view value);

// True when `pattern` names a different file in each process ("%p" in it).
bool path_is_per_process(std::string_view pattern);

// What an existing file's contents become.
enum class OpenMode : bool { truncate, append };

// Opens `path` for writing, close-on-exec, never blocking and never following a symbolic link as the
// last component: a regular file is created (0644 before the umask), truncated or appended to
// (O_APPEND); a character device (/dev/null, /dev/full, a terminal) is written as it is, never made
// the controlling terminal; /dev/stdout and /dev/stderr (also as /dev/fd/N or /proc/self/fd/N) are
// this process's own standard output and error, duplicated. Refused: a symbolic link, a FIFO or a
// socket (with or without a reader), a directory, a block device. Returns the descriptor, or -1 with
// `why` set to one line naming the path and the reason.
int open_output_file(const std::string& path, std::string& why, OpenMode mode = OpenMode::truncate) noexcept;

// Writes all of `data` (retrying short writes and EINTR). False on any error, with errno set.
// Async-signal-safe. Raises what a write raises (SIGPIPE, SIGXFSZ): for the shim's own output, use
// write_output.
bool write_all(int fd, const char* data, std::size_t size) noexcept;

// write_all() that never raises SIGPIPE or SIGXFSZ in the process, so that no write of the shim can
// end the program: a pipe whose reader went away fails with EPIPE, a file at the size limit
// (RLIMIT_FSIZE, ulimit -f) with EFBIG. `written`, if given, is set to the bytes written before an
// error (all of them on success). Async-signal-safe.
bool write_output(int fd, const char* data, std::size_t size, std::size_t* written = nullptr) noexcept;

}  // namespace gpumem::shim::observe
