// Compressed fat-binary entries (driver/modules/fatbin.cpp, compiled in): the device's own entries are
// decompressed in place, others are kept byte for byte, and a damaged compressed entry is refused
// with one line saying why. Images are built here with the same Zstandard and LZ4 libraries.
#include <catch2/catch.hpp>
#include <lz4.h>
#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../driver/fatbin.h"

namespace {

using namespace cudasim;

template <typename T>
void put(std::string& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}
template <typename T>
T get(const std::string& bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

enum class Packing { Plain, Zstd, Lz4 };

// One entry: a 64-byte header and the payload, padded to 8 bytes.
std::string entry(std::uint16_t kind, std::uint32_t arch, const std::string& payload, Packing packing) {
  std::string stored = payload;
  std::uint64_t flags = 0x11;
  if (packing == Packing::Zstd) {
    stored.resize(ZSTD_compressBound(payload.size()));
    stored.resize(ZSTD_compress(stored.data(), stored.size(), payload.data(), payload.size(), 3));
    flags |= fatbin_entry::kZstd;
  } else if (packing == Packing::Lz4) {
    stored.resize(LZ4_compressBound(static_cast<int>(payload.size())));
    stored.resize(LZ4_compress_default(payload.data(), stored.data(), static_cast<int>(payload.size()),
                                       static_cast<int>(stored.size())));
    flags |= fatbin_entry::kLz4;
  }
  const std::uint64_t padded = (stored.size() + 7) / 8 * 8;
  std::string header(fatbin_entry::kMinHeader, '\0');
  put<std::uint16_t>(header, fatbin_entry::kKind, kind);
  put<std::uint32_t>(header, fatbin_entry::kHeaderBytes, fatbin_entry::kMinHeader);
  put<std::uint64_t>(header, fatbin_entry::kPaddedBytes, padded);
  put<std::uint32_t>(header, fatbin_entry::kPayloadBytes, static_cast<std::uint32_t>(stored.size()));
  put<std::uint32_t>(header, fatbin_entry::kArch, arch);
  put<std::uint64_t>(header, fatbin_entry::kFlags, flags);
  put<std::uint64_t>(header, fatbin_entry::kUncompressedBytes, packing == Packing::Plain ? 0 : payload.size());
  return header + stored + std::string(padded - stored.size(), '\0');
}

std::string fatbin(const std::vector<std::string>& entries) {
  std::string image(16, '\0');
  put<std::uint32_t>(image, 0, 0xBA55ED50);
  put<std::uint16_t>(image, 4, 1);
  put<std::uint16_t>(image, 6, 16);
  for (const std::string& e : entries) image += e;
  put<std::uint64_t>(image, 8, image.size() - 16);
  return image;
}

// A payload that names a kernel the way a cubin's string table does. Its runs of one character
// compress to far fewer bytes, so the whole payload is found only where it was decompressed (a
// short name alone may be stored as it is inside a compressed one).
std::string cubin_named(const std::string& kernel) {
  return std::string("\x7f" "ELF", 4) + std::string(200, 'x') + '\0' + kernel + '\0' + std::string(300, 'y');
}
std::string ptx_named(const std::string& kernel) {
  return ".version 8.0" + std::string(200, ' ') + ".entry " + kernel + std::string(300, '\n');
}
bool holds(const std::string& image, const std::string& payload) { return image.find(payload) != std::string::npos; }

constexpr std::size_t kLimit = std::size_t{1} << 30;

}  // namespace

TEST_CASE("fatbin: the device's compressed cubins are decompressed, others kept", "[driver][fatbin]") {
  const std::string other = entry(2, 80, cubin_named("kernel_sm80"), Packing::Zstd);
  const std::string image = fatbin({other, entry(2, 90, cubin_named("kernel_sm90"), Packing::Zstd),
                                    entry(1, 90, ptx_named("ptx_only"), Packing::Zstd)});
  const FatbinExpansion expanded = expand_fatbin(image, 90, kLimit);
  REQUIRE(expanded.error.empty());
  CHECK(expanded.decompressed == 1);
  CHECK(expanded.left_compressed == 2);
  CHECK(holds(expanded.image, cubin_named("kernel_sm90")));
  CHECK_FALSE(holds(expanded.image, cubin_named("kernel_sm80")));
  CHECK_FALSE(holds(expanded.image, ptx_named("ptx_only")));
  // The other architecture's entry is where it was, byte for byte; the header's size is the new one.
  CHECK(expanded.image.compare(16, other.size(), other) == 0);
  CHECK(get<std::uint64_t>(expanded.image, 8) == expanded.image.size() - 16);
  // The decompressed entry says so: no compression flag, its payload's own size.
  const std::size_t second = 16 + other.size();
  CHECK((get<std::uint64_t>(expanded.image, second + fatbin_entry::kFlags) & fatbin_entry::kZstd) == 0);
  CHECK(get<std::uint32_t>(expanded.image, second + fatbin_entry::kPayloadBytes) == cubin_named("kernel_sm90").size());
}

TEST_CASE("fatbin: without the device's cubin, the newest PTX it can compile is decompressed (LZ4 too)", "[driver][fatbin]") {
  const std::string image = fatbin({entry(2, 100, cubin_named("kernel_sm100"), Packing::Lz4),
                                    entry(1, 75, ptx_named("old_ptx"), Packing::Lz4),
                                    entry(1, 86, ptx_named("new_ptx"), Packing::Lz4)});
  const FatbinExpansion expanded = expand_fatbin(image, 90, kLimit);
  REQUIRE(expanded.error.empty());
  CHECK(expanded.decompressed == 1);
  CHECK(holds(expanded.image, ptx_named("new_ptx")));
  CHECK_FALSE(holds(expanded.image, ptx_named("old_ptx")));
  CHECK_FALSE(holds(expanded.image, cubin_named("kernel_sm100")));
}

TEST_CASE("fatbin: with no code for the device every entry is decompressed", "[driver][fatbin]") {
  const std::string image = fatbin({entry(2, 100, cubin_named("a100"), Packing::Zstd),
                                    entry(2, 120, cubin_named("a120"), Packing::Lz4)});
  const FatbinExpansion expanded = expand_fatbin(image, 90, kLimit);
  REQUIRE(expanded.error.empty());
  CHECK(expanded.decompressed == 2);
  CHECK(holds(expanded.image, cubin_named("a100")));
  CHECK(holds(expanded.image, cubin_named("a120")));
}

TEST_CASE("fatbin: an image with nothing compressed is returned as it is", "[driver][fatbin]") {
  const std::string image = fatbin({entry(2, 90, cubin_named("plain"), Packing::Plain)});
  const FatbinExpansion expanded = expand_fatbin(image, 90, kLimit);
  REQUIRE(expanded.error.empty());
  CHECK(expanded.image == image);
  CHECK(expanded.decompressed == 0);
}

TEST_CASE("fatbin: damaged entries are refused with the reason", "[driver][fatbin]") {
  SECTION("a payload that is not what its flag says") {
    std::string bad = entry(2, 90, cubin_named("k"), Packing::Zstd);
    bad[fatbin_entry::kMinHeader] ^= 0x55;  // the Zstandard frame's magic
    const FatbinExpansion expanded = expand_fatbin(fatbin({bad}), 90, kLimit);
    CHECK_THAT(expanded.error, Catch::Contains("fat-binary entry at offset 16 is not a Zstandard frame"));
  }
  SECTION("an uncompressed size that does not match the payload") {
    std::string bad = entry(2, 90, cubin_named("k"), Packing::Lz4);
    put<std::uint64_t>(bad, fatbin_entry::kUncompressedBytes, 3);
    CHECK_THAT(expand_fatbin(fatbin({bad}), 90, kLimit).error, Catch::Contains("is not an LZ4 block of 3 bytes"));
  }
  SECTION("sizes past the end of the image: no entries, the image kept as it is") {
    std::string bad = entry(2, 90, cubin_named("k"), Packing::Zstd);
    put<std::uint64_t>(bad, fatbin_entry::kPaddedBytes, std::uint64_t{1} << 40);
    const FatbinExpansion expanded = expand_fatbin(fatbin({bad}), 90, kLimit);
    CHECK(expanded.error.empty());
    CHECK(expanded.image == fatbin({bad}));
    CHECK(expanded.decompressed == 0);
  }
  SECTION("more than the image limit once decompressed") {
    const std::string big = entry(2, 90, std::string(1 << 20, 'z'), Packing::Zstd);
    CHECK_THAT(expand_fatbin(fatbin({big}), 90, 4096).error, Catch::Contains("over the image limit"));
  }
}
