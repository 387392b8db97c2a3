// Asking an exporter's descriptor service for a VMM block's piece descriptors (descriptor_client.h).
#include "ipc/descriptor_client.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "exports/descriptor_protocol.h"

namespace gpumem::shim::ipc {
namespace {

constexpr int kBusyRetryMs = 20;

std::int64_t now_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1000000;
}

std::string reason_of(ReplyStatus status, const DescriptorReply& reply, const Token& token) {
  switch (status) {
    case ReplyStatus::freed:
      return fmt::format("process {} has freed the block this handle exported", token.pid);
    case ReplyStatus::bad_request:
      return fmt::format("process {}'s descriptor service refused the request (a stale or forged handle)", token.pid);
    case ReplyStatus::not_permitted:
      return fmt::format("process {} refused this process its memory: only root and processes of its own user and "
                         "group may open its handles, while it is dumpable", token.pid);
    case ReplyStatus::busy:
      return fmt::format("process {}'s descriptor service stayed busy for {} s", token.pid, kServiceReplyMs / 1000);
    case ReplyStatus::refused:
      return fmt::format("process {} could not export the block's memory (error {}; it may be out of descriptors)",
                         token.pid, reply.driver_error);
    case ReplyStatus::exiting:
      return fmt::format("the exporting process {} is exiting", token.pid);
    case ReplyStatus::ok:
      break;
  }
  return fmt::format("process {}'s descriptor service sent an impossible reply (a forged or corrupt handle)",
                     token.pid);
}

}  // namespace

DescriptorClient::~DescriptorClient() { close_connection(); }

void DescriptorClient::close_connection() noexcept {
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
}

bool DescriptorClient::connect(const Token& token, std::string& why) {
  token_ = token;
  return open_connection(why);
}

bool DescriptorClient::open_connection(std::string& why) {
  close_connection();
  socket_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (socket_ < 0) {
    why = fmt::format("cannot reach process {}: no socket ({})", token_.pid, std::strerror(errno));
    return false;
  }
  // Every wait on the service ends: a stopped or hostile exporter costs this process kServiceReplyMs.
  const timeval limit{kServiceReplyMs / 1000, (kServiceReplyMs % 1000) * 1000};
  setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  setsockopt(socket_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  sockaddr_un address{};
  const socklen_t length = service_address(token_.pid, token_.process_number, address);
  int connected = -1;
  do {
    connected = ::connect(socket_, reinterpret_cast<const sockaddr*>(&address), length);
  } while (connected != 0 && errno == EINTR);
  if (connected != 0) {
    const int error = errno;
    close_connection();
    if (kill(token_.pid, 0) != 0 && errno == ESRCH) {
      why = fmt::format("the exporting process {} has exited", token_.pid);
    } else if (error == ECONNREFUSED || error == ENOENT) {
      why = fmt::format("process {} has no descriptor service for this handle (it runs in another network "
                        "namespace, or the handle is stale or forged)", token_.pid);
    } else if (error == EAGAIN || error == ETIMEDOUT) {
      why = fmt::format("process {}'s descriptor service did not accept a connection within {} s", token_.pid,
                        kServiceReplyMs / 1000);
    } else {
      why = fmt::format("cannot reach process {}'s descriptor service ({})", token_.pid, std::strerror(error));
    }
    return false;
  }
  // Anyone can bind a name in the abstract namespace: the process listening must be the exporter.
  ucred peer{};
  socklen_t peer_length = sizeof peer;
  if (getsockopt(socket_, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 || peer.pid != token_.pid) {
    why = fmt::format("the descriptor service named after process {} is process {}'s (a forged or stale handle)",
                      token_.pid, peer.pid);
    close_connection();
    return false;
  }
  return true;
}

bool DescriptorClient::fetch(std::uint32_t first, std::uint32_t count, std::span<VmmStretch> stretches,
                             std::span<int> fds, bool& too_few_descriptors, std::string& why) {
  too_few_descriptors = false;
  if (count == 0 || count > kBatchPieces || stretches.size() < count || fds.size() < count) {
    why = "a request for no descriptors";
    return false;
  }
  const std::int64_t deadline = now_ms() + kServiceReplyMs;
  for (;;) {
    if (socket_ < 0 && !open_connection(why)) return false;
    DescriptorRequest request;
    request.process_number = token_.process_number;
    request.generation = token_.generation;
    request.slot = token_.slot;
    request.first = first;
    request.count = count;
    ssize_t sent = -1;
    do {
      sent = send(socket_, &request, sizeof request, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent != static_cast<ssize_t>(sizeof request) && sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      why = fmt::format("process {}'s descriptor service took no request within {} s", token_.pid,
                        kServiceReplyMs / 1000);
      close_connection();
      return false;
    }
    // A service that turned the connection away (busy, not permitted) closed it after saying why: the
    // request cannot go, but its word is still there to read.
    const int receive_flags = MSG_CMSG_CLOEXEC | (sent == static_cast<ssize_t>(sizeof request) ? 0 : MSG_DONTWAIT);
    DescriptorReply reply;
    char extra = 0;
    iovec parts[2] = {{&reply, sizeof reply}, {&extra, 1}};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kBatchPieces)];
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = 2;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    ssize_t got = -1;
    do {
      got = recvmsg(socket_, &message, receive_flags);
    } while (got < 0 && errno == EINTR);
    const int error = got < 0 ? errno : 0;
    // Every descriptor that arrived is this process's now, whatever the reply says: kept in order,
    // closed unless the reply is right.
    std::array<int, kBatchPieces> received;
    std::size_t received_count = 0;
    bool more_than_fit = false;
    if (got >= 0) {
      for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t carried = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < carried; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
          if (received_count < received.size()) {
            received[received_count++] = fd;
          } else {
            close(fd);
            more_than_fit = true;
          }
        }
      }
    }
    const auto refuse = [&](std::string reason) {
      for (std::size_t i = 0; i < received_count; ++i) close(received[i]);
      close_connection();
      why = std::move(reason);
      return false;
    };
    if (got < 0 && (receive_flags & MSG_DONTWAIT) != 0) {
      return refuse(fmt::format("process {} closed the connection to its descriptor service", token_.pid));
    }
    if (got < 0) {
      return refuse(error == EAGAIN || error == EWOULDBLOCK
                        ? fmt::format("process {} did not answer within {} s (stopped, or too busy)", token_.pid,
                                      kServiceReplyMs / 1000)
                        : fmt::format("process {}'s descriptor service failed ({})", token_.pid,
                                      std::strerror(error)));
    }
    if (got == 0) return refuse(fmt::format("process {} closed the connection to its descriptor service", token_.pid));
    if ((message.msg_flags & MSG_CTRUNC) != 0) {
      too_few_descriptors = true;
      return refuse(fmt::format("could not take {} descriptors from process {} (this process is short of "
                                "descriptors, or the reply carried more than asked for)", count, token_.pid));
    }
    if (got != static_cast<ssize_t>(sizeof reply) || (message.msg_flags & MSG_TRUNC) != 0 ||
        reply.magic != kReplyMagic || more_than_fit) {
      return refuse(reason_of(static_cast<ReplyStatus>(~0u), reply, token_));
    }
    if (reply.status == ReplyStatus::busy && now_ms() < deadline) {
      refuse(std::string());
      timespec pause{0, kBusyRetryMs * 1000000L};
      nanosleep(&pause, nullptr);
      continue;
    }
    if (reply.status != ReplyStatus::ok) return refuse(reason_of(reply.status, reply, token_));
    if (reply.first != first || reply.count != count || received_count != count) {
      return refuse(fmt::format("process {}'s descriptor service sent {} descriptors and {} mappings for {} asked "
                                "for (a forged or corrupt handle)", token_.pid, received_count, reply.count, count));
    }
    for (std::uint32_t i = 0; i < count; ++i) {
      stretches[i] = reply.stretches[i];
      fds[i] = received[i];
    }
    return true;
  }
}

}  // namespace gpumem::shim::ipc
