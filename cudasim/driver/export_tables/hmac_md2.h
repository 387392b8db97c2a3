// MD2 (RFC 1319) and HMAC (RFC 2104) over it: the keyed digest NVIDIA's runtime checks the
// driver's integrity-check answer against (integrity_check.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace cudasim::export_tables {

using Md2Digest = std::array<std::uint8_t, 16>;

// The MD2 digest of bytes fed in pieces.
class Md2 {
 public:
  void update(const void* data, std::size_t size);
  Md2Digest finish();

 private:
  void add(std::uint8_t byte);
  void compress();
  std::array<std::uint8_t, 48> state_{};
  std::array<std::uint8_t, 16> block_{};
  std::array<std::uint8_t, 16> checksum_{};
  std::uint8_t last_checksum_ = 0;
  std::size_t filled_ = 0;
};

// HMAC-MD2 with a 16-byte key (MD2's block size): the inner digest is fed the message in pieces.
class HmacMd2 {
 public:
  explicit HmacMd2(const Md2Digest& key);
  void update(const void* data, std::size_t size) { inner_.update(data, size); }
  Md2Digest finish();

 private:
  Md2Digest key_;
  Md2 inner_;
};

}  // namespace cudasim::export_tables
