// Compressed fat-binary entries. NVIDIA's libraries (cuBLAS, cuBLASLt, cuFFT, cuSPARSE, cuSOLVER,
// cuDNN, NCCL) ship fat binaries whose entries hold Zstandard frames (flag 0x8000; cuFFT's plans
// load some holding LZ4 blocks, flag 0x2000), which hide the names of their kernels and globals.
// The simulator decompresses the entries its sm_90 device would load, so that names are found in
// them as in an uncompressed image.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cudasim {

// A fat binary's entry header (public reverse-engineering of the format): the fields read here, at
// their byte offsets. An entry is its header (`header_bytes` long) then `payload_bytes` of payload,
// padded to `padded_bytes`.
namespace fatbin_entry {
inline constexpr std::size_t kKind = 0;             // u16: 1 PTX, 2 ELF cubin
inline constexpr std::size_t kHeaderBytes = 4;      // u32
inline constexpr std::size_t kPaddedBytes = 8;      // u64
inline constexpr std::size_t kPayloadBytes = 16;    // u32
inline constexpr std::size_t kArch = 28;            // u32: the SM version (90: sm_90)
inline constexpr std::size_t kFlags = 40;           // u64
inline constexpr std::size_t kUncompressedBytes = 56;  // u64, when compressed
inline constexpr std::size_t kMinHeader = 64;
inline constexpr std::uint16_t kPtx = 1;
inline constexpr std::uint16_t kElf = 2;
inline constexpr std::uint64_t kLz4 = 0x2000;   // one LZ4 block (the older compression)
inline constexpr std::uint64_t kZstd = 0x8000;  // one Zstandard frame
}  // namespace fatbin_entry

// What expanding a fat binary found.
struct FatbinExpansion {
  std::string image;            // the fat binary, the device's entries decompressed in place
  std::size_t decompressed = 0;  // entries decompressed
  std::size_t left_compressed = 0;  // compressed entries for other architectures, left as they are
  std::string error;            // when not empty: why the image cannot be read (one line)
};

// `fatbin` (a whole fat binary: its 16-byte header and its entries) with each compressed entry the
// device (compute capability `arch`, e.g. 90) would load replaced by its decompressed payload, the
// compression flag cleared and the sizes updated. The device loads its own architecture's cubins;
// without one, the PTX of the highest architecture not above its own; without either, every entry
// is decompressed (the simulator runs no code, so names are all it needs). Entries that are not
// compressed are kept byte for byte, and so is a body that is no sequence of entries. `error` is
// set for a compressed payload that does not decompress to the size its header gives, or a result
// over `max_bytes`.
FatbinExpansion expand_fatbin(std::string_view fatbin, unsigned arch, std::size_t max_bytes);

}  // namespace cudasim
