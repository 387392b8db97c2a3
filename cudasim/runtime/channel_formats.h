// The runtime's channel descriptions in the driver's terms and back (array_api.cpp), shared by
// arrays and by texture and surface objects (texture_api.cpp).
#pragma once

#include "api_headers.h"

namespace cudasim::runtime {

// cudaChannelFormatDesc -> the driver's format and channel count: cudaErrorNotSupported for the
// kinds the simulated driver has no layout for, cudaErrorInvalidValue for a description no driver
// format matches.
cudaError_t driver_channel_format(const cudaChannelFormatDesc& desc, CUarray_format* format, unsigned* channels);

// The runtime's channel description of a driver format and channel count.
cudaChannelFormatDesc channel_desc(CUarray_format format, unsigned channels);

}  // namespace cudasim::runtime
