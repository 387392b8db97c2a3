// The descriptor protocol (docs/ipc.md): how an importer gets the descriptors of a VMM block's pieces
// from the exporter, a small batch at a time, so neither process ever holds one per piece.
//
// The exporter's descriptor service (descriptor_service.h) listens on a Unix-domain socket of type
// SOCK_SEQPACKET in the abstract namespace, named after the exporter's pid and its export table's
// random number. The importer connects, checks with SO_PEERCRED that the process listening is the
// one its handle names, and sends one request at a time; each reply carries the stretches asked for
// and, with SCM_RIGHTS, one descriptor per stretch. Every message has exactly the size of its struct;
// anything else ends the connection. Both sides check everything the other sends.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "exports/vmm_span.h"

namespace gpumem::shim::ipc {

// The most descriptors one reply carries: what either process holds for one batch.
inline constexpr std::uint32_t kBatchPieces = 16;
// The importer waits this long for the service to accept, take a request or answer it.
inline constexpr int kServiceReplyMs = 5000;
// The service closes a connection that has sent no request for this long (a stopped importer).
inline constexpr int kPeerIdleMs = 5000;
// Connections the service holds at once; more are answered `busy` and closed.
inline constexpr std::size_t kMaxPeers = 8;

inline constexpr std::array<char, 8> kRequestMagic = {'g', 'p', 'u', 'm', 'e', 'm', 'Q', '1'};
inline constexpr std::array<char, 8> kReplyMagic = {'g', 'p', 'u', 'm', 'e', 'm', 'R', '1'};

struct DescriptorRequest {
  std::array<char, 8> magic = kRequestMagic;
  std::uint64_t process_number = 0;  // the exporter's table (Token::process_number)
  std::uint64_t generation = 0;      // of the slot, as the handle names it
  std::uint32_t slot = 0;
  std::uint32_t first = 0;  // the first stretch wanted
  std::uint32_t count = 0;  // how many: 1 to kBatchPieces
  std::uint32_t unused = 0;
};

enum class ReplyStatus : std::uint32_t {
  ok,             // `count` stretches follow, each with its descriptor
  freed,          // the slot is not live with that generation (the block was freed), or a piece is gone
  bad_request,    // a request of the wrong size or magic, another table's, a slot or range that does not exist
  not_permitted,  // the peer may not read this process's memory (another user; see docs/ipc.md)
  busy,           // kMaxPeers connections are open already
  refused,        // the driver refused to export a piece (driver_error), or the exporter is out of descriptors
  exiting,        // the exporting process is exiting
};

struct DescriptorReply {
  std::array<char, 8> magic = kReplyMagic;
  ReplyStatus status = ReplyStatus::ok;
  std::int32_t driver_error = 0;  // `refused`: the driver's error
  std::uint32_t first = 0;        // as requested
  std::uint32_t count = 0;        // stretches[0, count) are valid, one descriptor each, in order
  VmmStretch stretches[kBatchPieces];
};
static_assert(sizeof(DescriptorRequest) == 40 && sizeof(DescriptorReply) == 24 + 16 * kBatchPieces,
              "the layouts docs/ipc.md and tests/integration/test_ipc.py describe");

// The service's address: "\0gpumem-ipc-<pid>-<table number in hex>" in the abstract namespace.
inline socklen_t service_address(pid_t pid, std::uint64_t process_number, sockaddr_un& address) {
  std::memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  const int length = std::snprintf(address.sun_path + 1, sizeof address.sun_path - 1, "gpumem-ipc-%d-%016llx",
                                   static_cast<int>(pid), static_cast<unsigned long long>(process_number));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<std::size_t>(length));
}

}  // namespace gpumem::shim::ipc
