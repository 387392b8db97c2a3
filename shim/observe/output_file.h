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

// Opens `path` for writing, created (0644 before the umask) or truncated, with O_CLOEXEC; refuses
// what is not a regular file (a FIFO, a directory, a device) and a symbolic link as the last
// component, without blocking on a FIFO that has no reader. Returns the descriptor, or -1 with
// `why` set to one line naming the path and the reason.
int open_output_file(const std::string& path, std::string& why) noexcept;

// Writes all of `data` (retrying short writes and EINTR). False on any error. Async-signal-safe.
bool write_all(int fd, const char* data, std::size_t size) noexcept;

}  // namespace gpumem::shim::observe
