// What the IPC examples need to hand a file descriptor to another process: a Unix socket pair, the
// program started again as its own child holding one end, and messages that carry a descriptor
// (SCM_RIGHTS), which is how POSIX file descriptor handles of CUDA memory travel between processes.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "common.h"

namespace examples {

struct ChildProcess {
  int socket = -1;  // the parent's end
  pid_t pid = -1;
};

// Starts this program again as `PROGRAM --child SOCKET`, SOCKET being the number of the child's end.
// A fresh process image, not a bare fork: CUDA cannot be used in a child forked after it started.
inline ChildProcess start_child() {
  int ends[2];
  // Sequenced packets keep each message whole, so one receive is one message. Close-on-exec, so
  // neither end leaks into other programs; the child clears it on its own end.
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) fail("socketpair failed: %s", std::strerror(errno));
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) fail("fork failed: %s", std::strerror(errno));
  if (pid == 0) {
    close(ends[0]);
    if (fcntl(ends[1], F_SETFD, 0) != 0) _exit(127);
    const std::string socket_text = std::to_string(ends[1]);
    const char* args[] = {"/proc/self/exe", "--child", socket_text.c_str(), nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(args));
    _exit(127);
  }
  close(ends[1]);
  return {ends[0], pid};
}

// The child's end of the socket, from the arguments start_child gave it; -1 when not a child.
inline int child_socket(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--child") != 0) return -1;
  char* end = nullptr;
  const long socket = argc == 3 ? std::strtol(argv[2], &end, 10) : -1;
  if (argc != 3 || end == argv[2] || *end != '\0' || socket < 0) fail("--child takes one socket descriptor number");
  return static_cast<int>(socket);
}

// Waits for the child to end, which must be with status 0.
inline void wait_for_child(ChildProcess& child) {
  close(child.socket);
  int status = 0;
  if (waitpid(child.pid, &status, 0) != child.pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail("the child process failed (status %d)", status);
  }
}

// Sends `size` bytes as one message, with descriptor `fd` when it is not -1.
inline void send_message(int socket, const void* data, std::size_t size, int fd) {
  iovec data_part{const_cast<void*>(data), size};
  msghdr message{};
  message.msg_iov = &data_part;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd != -1) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  }
  if (sendmsg(socket, &message, MSG_NOSIGNAL) != static_cast<ssize_t>(size)) {
    fail("sending a message of %zu bytes failed: %s", size, std::strerror(errno));
  }
}

// Receives one message of exactly `size` bytes; returns the descriptor that came with it, or -1.
inline int receive_message(int socket, void* data, std::size_t size) {
  iovec data_part{data, size};
  msghdr message{};
  message.msg_iov = &data_part;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  const ssize_t received = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  if (received < 0) fail("receiving a message failed: %s", std::strerror(errno));
  if (static_cast<std::size_t>(received) != size || (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    fail("a message of %zu bytes was expected, %zd came", size, received);
  }
  const cmsghdr* header = CMSG_FIRSTHDR(&message);
  if (header == nullptr || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof fd);
  return fd;
}

}  // namespace examples
