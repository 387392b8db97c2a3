// The figures of every simulated device (an sm_90-class part), shared by the attribute queries
// (devices.cpp), launch checks (kernels.cpp), function attributes and occupancy (functions.cpp) and
// context limits (context_settings.cpp) and texture bindings (texture_references.cpp), so they never
// disagree.
#pragma once

#include <cstddef>

namespace cudasim {

constexpr int kComputeCapabilityMajor = 9;
constexpr int kComputeCapabilityMinor = 0;
constexpr unsigned kSmVersion = kComputeCapabilityMajor * 10 + kComputeCapabilityMinor;  // fat-binary entries' arch
constexpr int kMultiprocessors = 132;
constexpr int kWarpSize = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr int kMaxThreadsPerMultiprocessor = 2048;
constexpr int kMaxBlocksPerMultiprocessor = 32;
constexpr int kRegistersPerMultiprocessor = 65536;
constexpr int kRegistersPerBlock = 65536;
constexpr int kRegistersPerThread = 32;  // what every simulated function reports using
// Dynamic shared memory a launch may use by default; a function may opt in to more, up to
// kMaxSharedBytesPerBlockOptin (cuFuncSetAttribute, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
constexpr int kMaxSharedBytesPerBlock = 49152;
constexpr int kMaxSharedBytesPerBlockOptin = 232448;
constexpr int kSharedBytesPerMultiprocessor = 233472;
constexpr int kReservedSharedBytesPerBlock = 1024;  // the system's share of each block
constexpr unsigned kMaxPortableClusterBlocks = 8;   // blocks in a cluster, portable sizes
constexpr unsigned kMaxClusterBlocks = 16;          // with NON_PORTABLE_CLUSTER_SIZE_ALLOWED
constexpr int kL2Bytes = 50 << 20;
constexpr std::size_t kMaxPersistingL2Bytes = kL2Bytes / 4 * 3;
// Texture binding limits (texture_references.cpp and texture_objects.cpp check
// bindings of linear and pitched memory against them; an H100's figures).
constexpr int kTextureAlignment = 512;       // base addresses; cuTexRefSetAddress's byte offset is modulo this
constexpr int kTexturePitchAlignment = 32;   // pitches of 2D bindings
// texels of a 1D binding of linear memory, whatever the format and channels (also
// cuDeviceGetTexture1DLinearMaxWidth)
constexpr int kMaxTexture1DLinearWidth = 1 << 28;
constexpr int kMaxTexture2DLinearWidth = 131072;    // texels
constexpr int kMaxTexture2DLinearHeight = 65000;    // rows
constexpr int kMaxTexture2DLinearPitch = 2097120;   // bytes

}  // namespace cudasim
