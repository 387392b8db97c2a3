// A copy of a descriptor another process holds: how an importer reaches a stream-ordered pool an
// exporter shares as a POSIX descriptor (docs/ipc.md; a VMM arena's pieces come through the
// exporter's descriptor service instead, descriptor_client.h).
#pragma once

#include <sys/types.h>

#include <string>

namespace gpumem::shim::ipc {

// A close-on-exec descriptor of the file process `pid` holds as `fd`; -1 with `why` (one line) when
// it cannot be had or cannot be memory (a FIFO, a socket, a directory, a block device: a stale or
// forged handle). pidfd_getfd duplicates any kind of descriptor but needs ptrace access (which Yama
// may restrict to ancestors); reopening /proc/<pid>/fd/<fd> needs only the same user, and serves
// regular files (anything else is refused before it is opened; the open never blocks).
int fetch_descriptor(pid_t pid, int fd, std::string& why);

// What kind of file `fd` is when it cannot be memory a driver shares (a FIFO, a socket, a directory,
// a block device, or unreadable); null when it may be.
const char* not_shared_memory(int fd);

}  // namespace gpumem::shim::ipc
