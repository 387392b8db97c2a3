// The handle gpumem gives for a block inside a pooled region (docs/ipc.md): 64 bytes in
// CUipcMemHandle::reserved that name an entry of the exporting process's export table. Only a process
// running gpumem resolves it; the driver refuses it as a handle of its own.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

namespace gpumem::shim::ipc {

// Chosen so that no driver handle starts with it by accident.
inline constexpr std::array<char, 16> kTokenMagic = {'g', 'p', 'u', 'm', 'e', 'm', '-', 'i',
                                                     'p', 'c', '-', 't', 'o', 'k', 'n', '1'};

struct Token {
  std::array<char, 16> magic = kTokenMagic;
  std::uint64_t process_number = 0;  // the exporter's export table (random, so a reused pid finds nothing)
  std::uint64_t generation = 0;      // of the slot when this block was published
  std::int32_t pid = 0;              // the exporting process
  std::int32_t table_fd = -1;        // its export table's descriptor, opened through /proc/<pid>/fd
  std::uint32_t slot = 0;
  std::uint32_t unused = 0;
};
static_assert(sizeof(Token) <= sizeof(CUipcMemHandle::reserved));

inline CUipcMemHandle to_handle(const Token& token) noexcept {
  CUipcMemHandle handle;
  std::memset(handle.reserved, 0, sizeof handle.reserved);
  std::memcpy(handle.reserved, &token, sizeof token);
  return handle;
}

// The token in `handle`; nothing when it is not one (a driver's own handle).
inline std::optional<Token> parse_token(const CUipcMemHandle& handle) noexcept {
  Token token;
  std::memcpy(&token, handle.reserved, sizeof token);
  if (token.magic != kTokenMagic) return std::nullopt;
  return token;
}

}  // namespace gpumem::shim::ipc
