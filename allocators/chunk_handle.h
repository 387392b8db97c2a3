// The 32-bit handle that names a chunk record (and the value type of the address maps).
#pragma once

#include <cstdint>

namespace gpumem::detail {

// Index of a record in the ChunkStore; 0 is "no chunk" (slot 0 is never used).
using ChunkHandle = std::uint32_t;
inline constexpr ChunkHandle kNoChunk = 0;

}  // namespace gpumem::detail
