// The pieces of a VMM arena's block as a slot names them: checking them, and the list of a block over
// more pieces than a slot holds.
#include "exports/vmm_span.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace gpumem::shim::ipc {
namespace {

constexpr int kListSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;

}  // namespace

bool plausible_pieces(std::span<const VmmPiece> pieces, std::uint64_t offset, std::uint64_t size, std::string& what) {
  std::uint64_t total = 0;
  for (const VmmPiece& piece : pieces) {
    if (piece.fd < 0 || piece.size == 0 || piece.size > UINT64_MAX - total || piece.offset > UINT64_MAX - piece.size) {
      what = "a bad mapping";
      return false;
    }
    total += piece.size;
  }
  if (pieces.empty() || offset >= total || size > total - offset) {
    what = fmt::format("{} bytes at offset {} of {} bytes of mappings", size, offset, total);
    return false;
  }
  return true;
}

int make_piece_list(std::span<const VmmPiece> pieces) noexcept {
  const int fd = memfd_create("gpumem-ipc-pieces", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  const auto* bytes = reinterpret_cast<const char*>(pieces.data());
  std::size_t left = pieces.size_bytes();
  while (left > 0) {
    const ssize_t written = write(fd, bytes, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      close(fd);
      return -1;
    }
    bytes += written;
    left -= static_cast<std::size_t>(written);
  }
  if (fcntl(fd, F_ADD_SEALS, kListSeals) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool read_piece_list(int fd, std::uint32_t count, std::vector<VmmPiece>& pieces, std::string& what) {
  struct stat info {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || seals < 0 || (seals & kListSeals) != kListSeals) {
    what = "its list of mappings is not a sealed memfd";
    return false;
  }
  if (count == 0 || count > kMaxVmmPieces ||
      static_cast<std::uint64_t>(info.st_size) != std::uint64_t{count} * sizeof(VmmPiece)) {
    what = fmt::format("its list of mappings holds {} bytes, not {} mappings", info.st_size, count);
    return false;
  }
  pieces.resize(count);
  auto* bytes = reinterpret_cast<char*>(pieces.data());
  std::size_t left = pieces.size() * sizeof(VmmPiece);
  for (off_t at = 0; left > 0;) {
    const ssize_t got = pread(fd, bytes, left, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      what = "its list of mappings could not be read";
      return false;
    }
    bytes += got;
    at += got;
    left -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace gpumem::shim::ipc
