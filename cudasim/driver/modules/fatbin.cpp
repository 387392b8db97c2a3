// Compressed fat-binary entries decompressed (see fatbin.h). Only the entries the device would load
// are decompressed: NVIDIA's libraries carry every architecture's cubins, about ten times their
// compressed size in all (cuBLAS: 44 MiB of fat binaries, 418 MiB decompressed), of which the
// simulated sm_90 device needs a tenth.
#include "fatbin.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace cudasim {
namespace {

template <typename T>
T read_at(std::string_view bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

template <typename T>
void write_at(std::string& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// One entry of the fat binary, as its header describes it (offsets into the fat binary).
struct Entry {
  std::size_t offset = 0;
  std::uint32_t header_bytes = 0;
  std::uint64_t padded_bytes = 0;  // header_bytes + padded_bytes <= the bytes left in the fat binary
  std::uint32_t payload_bytes = 0;  // <= padded_bytes
  std::uint16_t kind = 0;
  std::uint32_t arch = 0;
  std::uint64_t flags = 0;
  bool compressed() const { return (flags & (fatbin_entry::kZstd | fatbin_entry::kLz4)) != 0; }
};

constexpr std::uint64_t align8(std::uint64_t n) { return (n + 7) & ~std::uint64_t{7}; }

// The entries of `fatbin`; false when a header points outside it (the body is no sequence of entries).
bool read_entries(std::string_view fatbin, std::vector<Entry>& entries) {
  using namespace fatbin_entry;
  std::size_t at = read_at<std::uint16_t>(fatbin, 6);
  while (at < fatbin.size()) {
    const std::size_t left = fatbin.size() - at;
    if (left < kMinHeader) break;  // trailing padding
    Entry e;
    e.offset = at;
    e.header_bytes = read_at<std::uint32_t>(fatbin, at + kHeaderBytes);
    if (e.header_bytes == 0) break;  // zeros after the last entry
    e.padded_bytes = read_at<std::uint64_t>(fatbin, at + kPaddedBytes);
    e.payload_bytes = read_at<std::uint32_t>(fatbin, at + kPayloadBytes);
    e.kind = read_at<std::uint16_t>(fatbin, at + kKind);
    e.arch = read_at<std::uint32_t>(fatbin, at + kArch);
    e.flags = read_at<std::uint64_t>(fatbin, at + kFlags);
    if (e.header_bytes < kMinHeader || e.header_bytes > left || e.padded_bytes > left - e.header_bytes ||
        e.payload_bytes > e.padded_bytes)
      return false;
    entries.push_back(e);
    at += e.header_bytes + e.padded_bytes;
  }
  return true;
}

// Which entries the device loads: its own architecture's cubins, else the newest PTX it can
// compile, else (no code for it) every entry.
std::vector<bool> device_entries(const std::vector<Entry>& entries, unsigned arch) {
  std::vector<bool> chosen(entries.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i].kind == fatbin_entry::kElf && entries[i].arch == arch) chosen[i] = any = true;
  if (any) return chosen;
  std::uint32_t newest_ptx = 0;
  for (const Entry& e : entries)
    if (e.kind == fatbin_entry::kPtx && e.arch <= arch) newest_ptx = std::max(newest_ptx, e.arch);
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i].kind == fatbin_entry::kPtx && newest_ptx != 0 && entries[i].arch == newest_ptx)
      chosen[i] = any = true;
  if (!any) chosen.assign(entries.size(), true);
  return chosen;
}

// Appends the decompressed payload of `e` (a Zstandard frame of the size its header gives), or
// says why not.
bool append_decompressed(std::string_view fatbin, const Entry& e, std::size_t max_bytes, std::string& out,
                         std::string& error) {
  const std::string where = "fat-binary entry at offset " + std::to_string(e.offset);
  const std::uint64_t size = read_at<std::uint64_t>(fatbin, e.offset + fatbin_entry::kUncompressedBytes);
  if (size > INT32_MAX || size > max_bytes || out.size() > max_bytes - size) {
    error = where + " decompresses to " + std::to_string(size) + " bytes, over the image limit";
    return false;
  }
  const std::string_view payload = fatbin.substr(e.offset + e.header_bytes, e.payload_bytes);
  const std::size_t start = out.size();
  out.resize(start + size);
  if ((e.flags & fatbin_entry::kZstd) != 0) {
    const std::size_t got = ZSTD_decompress(out.data() + start, size, payload.data(), payload.size());
    if (ZSTD_isError(got) != 0 || got != size) {
      error = where + " is not a Zstandard frame of " + std::to_string(size) + " bytes (" +
              (ZSTD_isError(got) != 0 ? ZSTD_getErrorName(got) : std::to_string(got) + " bytes") + ")";
      return false;
    }
    return true;
  }
  // The older compression: one LZ4 block.
  const int got = LZ4_decompress_safe(payload.data(), out.data() + start, static_cast<int>(payload.size()),
                                      static_cast<int>(size));
  if (got < 0 || static_cast<std::uint64_t>(got) != size) {
    error = where + " is not an LZ4 block of " + std::to_string(size) + " bytes";
    return false;
  }
  return true;
}

}  // namespace

FatbinExpansion expand_fatbin(std::string_view fatbin, unsigned arch, std::size_t max_bytes) {
  FatbinExpansion result;
  std::vector<Entry> entries;
  // A body that is no sequence of entries (hand-made images: a string table or PTX text right
  // after the header) is kept as it is and searched whole, as before entries were read.
  if (!read_entries(fatbin, entries)) {
    result.image.assign(fatbin);
    return result;
  }
  if (std::none_of(entries.begin(), entries.end(), [](const Entry& e) { return e.compressed(); })) {
    result.image.assign(fatbin);
    return result;
  }
  const std::vector<bool> chosen = device_entries(entries, arch);
  std::string& out = result.image;
  const std::size_t header = read_at<std::uint16_t>(fatbin, 6);
  out.assign(fatbin.substr(0, header));
  std::size_t copied_to = header;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (!e.compressed() || !chosen[i]) {
      if (e.compressed()) ++result.left_compressed;
      continue;
    }
    out.append(fatbin.substr(copied_to, e.offset - copied_to));
    const std::size_t entry_header = out.size();
    out.append(fatbin.substr(e.offset, e.header_bytes));
    if (!append_decompressed(fatbin, e, max_bytes, out, result.error)) return result;
    const std::uint64_t size = out.size() - entry_header - e.header_bytes;
    out.append(align8(size) - size, '\0');
    write_at<std::uint64_t>(out, entry_header + fatbin_entry::kFlags,
                            e.flags & ~(fatbin_entry::kZstd | fatbin_entry::kLz4));
    write_at<std::uint64_t>(out, entry_header + fatbin_entry::kPaddedBytes, align8(size));
    write_at<std::uint32_t>(out, entry_header + fatbin_entry::kPayloadBytes, static_cast<std::uint32_t>(size));
    write_at<std::uint64_t>(out, entry_header + fatbin_entry::kUncompressedBytes, 0);
    copied_to = e.offset + e.header_bytes + e.padded_bytes;
    ++result.decompressed;
  }
  out.append(fatbin.substr(copied_to));
  if (out.size() > max_bytes) {
    result.error = "the decompressed fat binary is over the image limit";
    return result;
  }
  write_at<std::uint64_t>(out, 8, out.size() - header);
  return result;
}

}  // namespace cudasim
