// Opening the files the shim writes for the user (trace, statistics): never blocking, never following
// a symbolic link, never handed to a program the process execs.
#pragma once

#include <string>
#include <string_view>

namespace gpumem::shim::observe {

// `pattern` with every "%p" replaced by `pid` and "%%" by "%" (as core_pattern spells them).
std::string expand_path(std::string_view pattern, long pid);

// True when `pattern` names a different file in each process ("%p" in it).
bool path_is_per_process(std::string_view pattern);

// What an existing file's contents become.
enum class OpenMode : bool { truncate, append };

// Opens `path` for writing, created (0644 before the umask), truncated or appended to (O_APPEND),
// with O_CLOEXEC; refuses what is not a regular file (a FIFO, a directory, a device) and a symbolic
// link as the last component, without blocking on a FIFO whether or not it has a reader. Returns
// the descriptor, or -1 with `why` set to one line naming the path and the reason.
int open_output_file(const std::string& path, std::string& why, OpenMode mode = OpenMode::truncate) noexcept;

// Writes all of `data` (retrying short writes and EINTR). False on any error, with errno set.
// Async-signal-safe.
bool write_all(int fd, const char* data, std::size_t size) noexcept;

// write_all() that never raises SIGPIPE in the process (a pipe whose reader went away is EPIPE).
bool write_all_without_sigpipe(int fd, const char* data, std::size_t size) noexcept;

}  // namespace gpumem::shim::observe
