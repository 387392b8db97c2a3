// What texture and surface objects (texture_objects.cpp) ask of CUDA arrays (arrays.cpp): the shape
// of a live array or mipmapped array and the bytes of an array format. All need State::mu held.
#pragma once

#include "state.h"

#include <optional>

namespace cudasim {

// The creation descriptor of a live array (a mipmapped array's level included); false for a
// handle that is no live array.
bool live_array_descriptor(State& st, CUarray array, CUDA_ARRAY3D_DESCRIPTOR* desc);
// The creation descriptor and level count of a live mipmapped array; false for an unknown handle.
bool live_mipmapped_array_descriptor(State& st, CUmipmappedArray array, CUDA_ARRAY3D_DESCRIPTOR* desc,
                                     unsigned* levels);
// Bytes per channel of an array format: nullopt for a value that is no CUarray_format, 0 for one
// cuda.h lists that the simulator has no layout for (packed normalised, block-compressed, YUV).
std::optional<unsigned> format_channel_bytes(CUarray_format format);

}  // namespace cudasim
