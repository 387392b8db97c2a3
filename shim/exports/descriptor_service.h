// The exporter's descriptor service (docs/ipc.md, protocol in descriptor_protocol.h): one thread per
// process, started at its first VMM export, that answers importers' requests for the descriptors of
// an exported block's pieces. Each piece is exported when asked for (VmmPieceSource::export_pieces),
// sent and closed at once, so the process holds no descriptor per piece or per block: the listening
// socket, at most kMaxPeers connections and, while one reply is being sent, kBatchPieces descriptors.
//
// The thread blocks every signal, never takes the arena's lock, and holds a source's piece lock only
// while the driver exports the pieces of one batch; it talks to peers without blocking (a stopped or
// hostile importer costs it a connection until kPeerIdleMs have passed, nothing more). Only peers
// that could read this process's descriptors anyway are served: root, or the same user (real,
// effective and saved ids, user and group) while this process is dumpable. A forked child closes the
// inherited socket and connections and starts its own service at its first export. At exit the
// thread makes no new driver call; when it finds itself the process's last thread it ends, so it never
// keeps a process alive whose other threads all ended.
#pragma once

#include <cstdint>
#include <string>

namespace gpumem::shim::ipc {

// Starts this process's service for its export table `process_number`, unless it runs already.
// Needs ProcessLock::export_table. False with `why` (one line's end) when it cannot be started.
bool ensure_descriptor_service(std::uint64_t process_number, std::string& why);

// In a forked child (its only thread, no lock held): closes the parent's socket and connections.
void forget_parents_service() noexcept;

}  // namespace gpumem::shim::ipc
