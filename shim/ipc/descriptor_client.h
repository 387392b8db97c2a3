// The importer's side of the descriptor protocol (exports/descriptor_protocol.h, docs/ipc.md): one
// connection to the exporter's descriptor service for one import, asking for a VMM block's
// stretches and their descriptors a batch at a time. Everything the service sends is checked; a
// service that does not answer within kServiceReplyMs is given up on. Holds its socket and, between
// fetch() and the caller closing them, one batch's descriptors: never one per piece.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "exports/ipc_token.h"
#include "exports/vmm_span.h"

namespace gpumem::shim::ipc {

class DescriptorClient {
 public:
  DescriptorClient() = default;
  ~DescriptorClient();
  DescriptorClient(const DescriptorClient&) = delete;
  DescriptorClient& operator=(const DescriptorClient&) = delete;

  // Connects to the service of the exporter `token` names, and checks that the process listening is
  // that one. False with `why` (one line) when it cannot be reached.
  bool connect(const Token& token, std::string& why);

  // Stretches [first, first + count) of the block and their descriptors (close-on-exec, one per
  // stretch: the caller closes each). `count` is 1 to kBatchPieces. False with `why` on failure, no
  // descriptor left open; `too_few_descriptors` then says whether this process could not take them
  // all (asking for fewer may work).
  bool fetch(std::uint32_t first, std::uint32_t count, std::span<VmmStretch> stretches, std::span<int> fds,
             bool& too_few_descriptors, std::string& why);

 private:
  // A connection of its own, checked; false with `why`. Retried while the service is busy.
  bool open_connection(std::string& why);
  void close_connection() noexcept;

  int socket_ = -1;
  Token token_{};
};

}  // namespace gpumem::shim::ipc
