// The exporter's descriptor service: a thread answering importers' requests for a VMM block's
// piece descriptors, a batch at a time (descriptor_service.h, descriptor_protocol.h).
#include "exports/descriptor_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "base/background_threads.h"
#include "base/fork_safe_lock.h"
#include "base/log.h"
#include "exports/descriptor_protocol.h"
#include "exports/export_table.h"

namespace gpumem::shim::ipc {
namespace {

constexpr int kListenBacklog = 64;
constexpr int kAcceptPauseMs = 100;  // out of descriptors: accept again after this long
constexpr int kLoneThreadCheckMs = 1000;
constexpr int kExitWaitMs = 2000;  // at exit, the longest wait for a driver call under way

struct Peer {
  int fd = -1;
  std::int64_t idle_deadline_ms = 0;
};

// One process's service. Invariant: `listen_fd` and the peers' descriptors are open in process `pid`
// alone (a forked child closes its copies). The thread changes them under
// ProcessLock::descriptor_service (so fork() never copies a half-made change); it is their only
// writer, and reads them without the lock.
struct Service {
  pid_t pid = 0;
  std::uint64_t process_number = 0;
  int listen_fd = -1;
  std::array<Peer, kMaxPeers> peers{};
  std::int64_t accept_paused_until_ms = 0;
};

Service* g_service = nullptr;  // created under ProcessLock::export_table; leaked (the thread may run at exit)
std::atomic<bool> g_exiting{false};
std::atomic<int> g_driver_calls{0};  // driver calls of the service under way

std::int64_t now_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1000000;
}

// The trust pidfd_getfd and /proc/<pid>/fd rely on (ptrace's "read" access): root, or a peer of this
// process's user and group, every one of its ids the same, while this process is dumpable.
bool may_read_this_process(const ucred& peer) {
  if (peer.uid == 0) return true;
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0) return false;
  return prctl(PR_GET_DUMPABLE) == 1 && peer.uid == ruid && ruid == euid && euid == suid && peer.gid == rgid &&
         rgid == egid && egid == sgid;
}

// Sends `reply` with `fds` attached, never blocking. False when the peer cannot take it now.
bool send_reply(int fd, const DescriptorReply& reply, const int* fds, std::uint32_t count) {
  iovec part{const_cast<DescriptorReply*>(&reply), sizeof reply};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kBatchPieces)] = {};
  if (count > 0) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(header), fds, sizeof(int) * count);
  }
  for (;;) {
    const ssize_t sent = sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    return sent == static_cast<ssize_t>(sizeof reply);
  }
}

void send_status(int fd, ReplyStatus status) {
  DescriptorReply reply;
  reply.status = status;
  send_reply(fd, reply, nullptr, 0);
}

// Whether the peer has closed its end (or failed): its reply could not be delivered.
bool peer_hung_up(int fd) {
  pollfd state{fd, POLLRDHUP, 0};
  return poll(&state, 1, 0) > 0 && (state.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

void close_peer(Peer& peer) {
  if (peer.fd >= 0) close(peer.fd);
  peer = Peer{};
}

// Exports the pieces one request names; the reply, with the descriptors to send in `fds`.
DescriptorReply answer(const Service& service, const DescriptorRequest& request, std::array<int, kBatchPieces>& fds) {
  DescriptorReply reply;
  reply.first = request.first;
  if (request.magic != kRequestMagic || request.process_number != service.process_number || request.count == 0 ||
      request.count > kBatchPieces) {
    reply.status = ReplyStatus::bad_request;
    return reply;
  }
  const VmmPieceSource* source = nullptr;
  std::vector<VmmPieceRef> refs;
  try {
    switch (vmm_pieces_for(request.process_number, request.slot, request.generation, request.first, request.count,
                           source, refs)) {
      case VmmLookup::found:
        break;
      case VmmLookup::freed:
        reply.status = ReplyStatus::freed;
        return reply;
      case VmmLookup::bad_request:
        reply.status = ReplyStatus::bad_request;
        return reply;
    }
  } catch (...) {  // no memory for the list
    reply.status = ReplyStatus::refused;
    reply.driver_error = CUDA_ERROR_OUT_OF_MEMORY;
    return reply;
  }
  // Counted before `exiting` is read: the exit handler, which sets it first, then waits for the count.
  g_driver_calls.fetch_add(1, std::memory_order_seq_cst);
  CUresult exported = CUDA_ERROR_DEINITIALIZED;
  if (!g_exiting.load(std::memory_order_seq_cst)) {
    exported = source->export_pieces(refs, std::span(fds.data(), refs.size()));
  }
  g_driver_calls.fetch_sub(1, std::memory_order_seq_cst);
  if (exported == CUDA_ERROR_DEINITIALIZED) {
    reply.status = ReplyStatus::exiting;
  } else if (exported == CUDA_ERROR_NOT_FOUND) {
    reply.status = ReplyStatus::freed;
  } else if (exported != CUDA_SUCCESS) {
    reply.status = ReplyStatus::refused;
    reply.driver_error = exported;
  } else {
    reply.count = static_cast<std::uint32_t>(refs.size());
    for (std::size_t i = 0; i < refs.size(); ++i) reply.stretches[i] = refs[i].stretch;
  }
  return reply;
}

// One request from `peer`, if one is there: answered, its descriptors closed once sent. A peer that
// sent anything but a request, closed its end or cannot take the reply is let go.
void serve_request(const Service& service, Peer& peer, std::int64_t now) {
  DescriptorRequest request;
  char extra = 0;
  iovec parts[2] = {{&request, sizeof request}, {&extra, 1}};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = 2;
  // No room for control data: descriptors a peer attaches are never installed here (the kernel
  // drops them).
  const ssize_t got = recvmsg(peer.fd, &message, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (got <= 0) return close_peer(peer);
  if (got != static_cast<ssize_t>(sizeof request) || (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    send_status(peer.fd, ReplyStatus::bad_request);
    return close_peer(peer);
  }
  peer.idle_deadline_ms = now + kPeerIdleMs;
  // Exporting a batch of pieces is the costly part: a peer that hung up after its request is let go
  // unanswered (many such peers would otherwise keep the service exporting for nothing).
  if (peer_hung_up(peer.fd)) return close_peer(peer);
  std::array<int, kBatchPieces> fds;
  fds.fill(-1);
  const DescriptorReply reply = answer(service, request, fds);
  const bool sent = send_reply(peer.fd, reply, fds.data(), reply.count);
  for (const int fd : fds) {
    if (fd >= 0) close(fd);  // the peer has its own now
  }
  if (!sent || reply.status == ReplyStatus::bad_request) close_peer(peer);
}

// Takes every connection waiting: a peer that may not read this process is told so and let go, one
// past kMaxPeers is told to come back.
void accept_peers(Service& service, std::int64_t now) {
  for (;;) {
    const int fd = accept4(service.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        service.accept_paused_until_ms = now + kAcceptPauseMs;  // they wait in the backlog meanwhile
      }
      return;
    }
    ucred peer{};
    socklen_t length = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || !may_read_this_process(peer)) {
      log::at(LogLevel::debug, "descriptor service: refused process {} (user {}): it may not read this process",
              peer.pid, peer.uid);
      send_status(fd, ReplyStatus::not_permitted);
      close(fd);
      continue;
    }
    Peer* free_peer = nullptr;
    for (Peer& candidate : service.peers) {
      if (candidate.fd < 0) {
        free_peer = &candidate;
        break;
      }
    }
    if (free_peer == nullptr) {
      send_status(fd, ReplyStatus::busy);
      close(fd);
      continue;
    }
    *free_peer = Peer{fd, now + kPeerIdleMs};
  }
}

void* serve(void* argument) {
  Service& service = *static_cast<Service*>(argument);
  std::array<pollfd, 1 + kMaxPeers> polled;
  std::array<Peer*, 1 + kMaxPeers> polled_peer;
  for (;;) {
    std::int64_t now = now_ms();
    std::size_t count = 0;
    std::int64_t wake = now + kLoneThreadCheckMs;
    if (now >= service.accept_paused_until_ms) {
      polled[count] = pollfd{service.listen_fd, POLLIN, 0};
      polled_peer[count++] = nullptr;
    } else {
      wake = std::min(wake, service.accept_paused_until_ms);
    }
    for (Peer& peer : service.peers) {
      if (peer.fd < 0) continue;
      polled[count] = pollfd{peer.fd, POLLIN, 0};
      polled_peer[count++] = &peer;
      wake = std::min(wake, peer.idle_deadline_ms);
    }
    const int ready = poll(polled.data(), count, static_cast<int>(std::max<std::int64_t>(wake - now, 0)));
    if (ready < 0 && errno != EINTR) {
      std::array<pollfd, 1> pause{};  // cannot happen with valid descriptors; never spin
      poll(pause.data(), 0, kAcceptPauseMs);
      continue;
    }
    now = now_ms();
    bool active = false;
    {
      const auto lock = lock_fork_safely(ProcessLock::descriptor_service);
      for (std::size_t i = 0; ready > 0 && i < count; ++i) {
        if (polled[i].revents == 0) continue;
        active = true;
        if (polled_peer[i] == nullptr) {
          accept_peers(service, now);
        } else if (polled_peer[i]->fd == polled[i].fd) {
          serve_request(service, *polled_peer[i], now);
        }
      }
      for (Peer& peer : service.peers) {
        if (peer.fd >= 0 && now >= peer.idle_deadline_ms) close_peer(peer);  // stopped, or gone quiet
      }
    }
    // Every thread of the program ended (its main thread called pthread_exit): so does this one,
    // so that the process ends as it would have without it.
    if (!active && only_background_threads_left()) return nullptr;
  }
}

// Registered once per process image with atexit: no driver call starts after exit() began, and one
// under way is waited for (briefly), so the driver's own exit handlers never race the service.
void stop_at_exit() {
  g_exiting.store(true, std::memory_order_seq_cst);
  for (int waited = 0; waited < kExitWaitMs && g_driver_calls.load(std::memory_order_seq_cst) > 0; ++waited) {
    usleep(1000);
  }
}

// The listening socket of `process_number`'s service; -1 with `why`.
int listen_on(std::uint64_t process_number, std::string& why) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = fmt::format("no socket ({})", std::strerror(errno));
    return -1;
  }
  sockaddr_un address{};
  const socklen_t length = service_address(getpid(), process_number, address);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 || listen(fd, kListenBacklog) != 0) {
    why = fmt::format("cannot listen on the abstract socket {} ({})", address.sun_path + 1, std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

bool ensure_descriptor_service(std::uint64_t process_number, std::string& why) {
  if (g_service != nullptr && g_service->pid == getpid() && g_service->process_number == process_number) return true;
  auto* service = new (std::nothrow) Service;
  if (service == nullptr) {
    why = "no memory";
    return false;
  }
  service->pid = getpid();
  service->process_number = process_number;
  service->listen_fd = listen_on(process_number, why);
  if (service->listen_fd < 0) {
    delete service;
    return false;
  }
  static const bool exit_handler = std::atexit(stop_at_exit) == 0;
  if (!exit_handler) {
    why = "no exit handler";
    close(service->listen_fd);
    delete service;
    return false;
  }
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 256 * 1024);
  // Started with every signal blocked, which it inherits: the program's handlers never run on it.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread{};
  const int started = pthread_create(&thread, &attributes, serve, service);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  pthread_attr_destroy(&attributes);
  if (started != 0) {
    why = fmt::format("no thread ({})", std::strerror(started));
    close(service->listen_fd);
    delete service;
    return false;
  }
  pthread_setname_np(thread, "gpumem-ipc");  // kBackgroundThreadPrefix
  g_service = service;  // a forked child's inherited one was forgotten (forget_parents_service)
  return true;
}

void forget_parents_service() noexcept {
  Service* inherited = g_service;
  if (inherited == nullptr) return;
  if (inherited->listen_fd >= 0) close(inherited->listen_fd);
  for (Peer& peer : inherited->peers) {
    if (peer.fd >= 0) close(peer.fd);
  }
  g_service = nullptr;  // its thread is the parent's
  g_driver_calls.store(0, std::memory_order_relaxed);
}

}  // namespace gpumem::shim::ipc
