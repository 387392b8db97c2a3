// Function and kernel attributes (cuFuncGetAttribute, cuFuncSetAttribute, cuKernelGetAttribute, ...)
// and occupancy (cuOccupancy*), for module functions and library kernels alike (a CUkernel cast to
// CUfunction is taken wherever a CUfunction is, as cuLaunchKernel takes it).
//
// No device code exists, so every function reports the same resources: kRegistersPerThread
// registers per thread, no static shared, constant or local memory, PTX and binary version 9.0.
// Occupancy follows from them and the device's figures (device_limits.h) with the usual rules:
// warps are allocated whole, and a multiprocessor holds at most kMaxBlocksPerMultiprocessor blocks,
// kMaxThreadsPerMultiprocessor threads, kRegistersPerMultiprocessor registers and
// kSharedBytesPerMultiprocessor bytes of shared memory (each block's dynamic share plus
// kReservedSharedBytesPerBlock).
#include "contexts.h"
#include "device_limits.h"
#include "kernels.h"
#include "state.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

using namespace cudasim;

namespace {

constexpr int kBinaryVersion = 90;  // compute capability 9.0

// The settings of a live module function (of any context) or library kernel, or null. Needs State::mu.
FunctionSettings* settings_of(State& st, const void* handle) {
  KernelState& ks = kernels(st);
  auto* function = static_cast<CUfunc_st*>(const_cast<void*>(handle));
  if (ks.functions.contains(function)) return &function->settings;
  auto* kernel = static_cast<CUkern_st*>(const_cast<void*>(handle));
  if (ks.kernels.contains(kernel)) return &kernel->settings;
  return nullptr;
}

CUresult get_attribute(const FunctionSettings& s, CUfunction_attribute attribute, int* value) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = static_cast<int>(kMaxThreadsPerBlock); break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = kRegistersPerThread; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = kBinaryVersion; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = s.max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = s.preferred_carveout; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *value = s.required_cluster[0]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *value = s.required_cluster[1]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *value = s.required_cluster[2]; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *value = s.non_portable_cluster_allowed; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *value = s.cluster_scheduling_policy; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// The attributes cuFuncSetAttribute documents as settable, each within its documented range.
CUresult set_attribute(FunctionSettings& s, CUfunction_attribute attribute, int value) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:  // no static shared memory to subtract
      if (value < 0 || value > kMaxSharedBytesPerBlockOptin) return CUDA_ERROR_INVALID_VALUE;
      s.max_dynamic_shared = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      s.preferred_carveout = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      if (value < 0) return CUDA_ERROR_INVALID_VALUE;
      s.required_cluster[attribute - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      if (value != 0 && value != 1) return CUDA_ERROR_INVALID_VALUE;
      s.non_portable_cluster_allowed = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT || value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
        return CUDA_ERROR_INVALID_VALUE;
      s.cluster_scheduling_policy = value;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;  // read-only or unknown
  }
}

CUresult set_cache_config(FunctionSettings& s, CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  s.cache_config = config;
  return CUDA_SUCCESS;
}

// The name of a live module function or library kernel (`kernels_only`: library kernels only).
CUresult entry_name(const void* handle, bool kernels_only, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  auto* function = static_cast<CUfunc_st*>(const_cast<void*>(handle));
  auto* kernel = static_cast<CUkern_st*>(const_cast<void*>(handle));
  if (!kernels_only && ks.functions.contains(function)) *name = function->name.c_str();
  else if (ks.kernels.contains(kernel)) *name = kernel->name.c_str();
  else return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

// Locks, checks cuInit and finds the function's settings: `body(settings)` under State::mu, or
// CUDA_ERROR_INVALID_HANDLE for a handle that is no live function or kernel.
template <typename Body>
CUresult with_settings(const void* handle, Body body) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  FunctionSettings* settings = settings_of(l.st, handle);
  if (settings == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return body(*settings);
}

// As with_settings, for the per-device kernel calls, which also check the device.
template <typename Body>
CUresult with_kernel_settings(CUkernel kernel, CUdevice dev, Body body) {
  Locked l;
  if (CUresult rc = device_status(l, dev); rc != CUDA_SUCCESS) return rc;
  FunctionSettings* settings = settings_of(l.st, kernel);
  if (settings == nullptr || !kernels(l.st).kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  return body(*settings);
}

// Blocks of `block_size` threads with `dynamic_shared` bytes each that one multiprocessor holds.
int active_blocks(const FunctionSettings& s, int block_size, std::size_t dynamic_shared) {
  if (block_size > static_cast<int>(kMaxThreadsPerBlock) || dynamic_shared > static_cast<std::size_t>(s.max_dynamic_shared))
    return 0;
  const int warps = (block_size + kWarpSize - 1) / kWarpSize;
  const int by_threads = kMaxThreadsPerMultiprocessor / (warps * kWarpSize);
  const int by_registers = kRegistersPerMultiprocessor / (warps * kWarpSize * kRegistersPerThread);
  const std::size_t per_block = dynamic_shared + kReservedSharedBytesPerBlock;
  const int by_shared = static_cast<int>(kSharedBytesPerMultiprocessor / per_block);
  return std::min({kMaxBlocksPerMultiprocessor, by_threads, by_registers, by_shared});
}

bool valid_occupancy_flags(unsigned flags) {
  return flags == CU_OCCUPANCY_DEFAULT || flags == CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE;
}

CUresult max_active_blocks(int* blocks, CUfunction func, int block_size, size_t dynamic_shared, unsigned flags) {
  if (blocks == nullptr || block_size <= 0 || !valid_occupancy_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  return with_settings(func, [&](const FunctionSettings& s) {
    *blocks = active_blocks(s, block_size, dynamic_shared);
    return CUDA_SUCCESS;
  });
}

// The block size (a multiple of the warp size, or `limit` itself) that keeps the most threads
// resident per multiprocessor, the larger on a tie; the grid that fills every multiprocessor with it.
CUresult max_potential_block_size(int* min_grid, int* block_size, CUfunction func, CUoccupancyB2DSize to_shared,
                                  size_t dynamic_shared, int limit, unsigned flags) {
  if (min_grid == nullptr || block_size == nullptr || limit < 0 || !valid_occupancy_flags(flags))
    return CUDA_ERROR_INVALID_VALUE;
  // The callback is the program's: call it without the lock.
  const int largest = limit == 0 ? static_cast<int>(kMaxThreadsPerBlock) : std::min(limit, static_cast<int>(kMaxThreadsPerBlock));
  std::vector<std::pair<int, std::size_t>> candidates;
  for (int size = largest; size > 0; size = (size - 1) / kWarpSize * kWarpSize) {
    candidates.emplace_back(size, to_shared != nullptr ? to_shared(size) : dynamic_shared);
  }
  return with_settings(func, [&](const FunctionSettings& s) {
    int best_size = 0, best_blocks = 0, best_threads = 0;
    for (const auto& [size, shared] : candidates) {
      const int blocks = active_blocks(s, size, shared);
      if (blocks * size > best_threads) {
        best_threads = blocks * size;
        best_size = size;
        best_blocks = blocks;
      }
    }
    *block_size = best_size;
    *min_grid = best_blocks * kMultiprocessors;
    return CUDA_SUCCESS;
  });
}

}  // namespace

namespace cudasim {

int resident_blocks(const FunctionSettings& settings, int block_size, std::size_t dynamic_shared) {
  return active_blocks(settings, block_size, dynamic_shared);
}

}  // namespace cudasim

// --- attributes ---
CUDASIM_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_settings(hfunc, [&](const FunctionSettings& s) { return get_attribute(s, attrib, pi); });
}

CUDASIM_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return with_settings(hfunc, [&](FunctionSettings& s) { return set_attribute(s, attrib, value); });
}

CUDASIM_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  return with_settings(hfunc, [&](FunctionSettings& s) { return set_cache_config(s, config); });
}

CUDASIM_EXPORT CUresult cuFuncGetName(const char** name, CUfunction hfunc) { return entry_name(hfunc, false, name); }

CUDASIM_EXPORT CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_kernel_settings(kernel, dev, [&](const FunctionSettings& s) { return get_attribute(s, attrib, pi); });
}

CUDASIM_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  return with_kernel_settings(kernel, dev, [&](FunctionSettings& s) { return set_attribute(s, attrib, val); });
}

CUDASIM_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  return with_kernel_settings(kernel, dev, [&](FunctionSettings& s) { return set_cache_config(s, config); });
}

CUDASIM_EXPORT CUresult cuKernelGetName(const char** name, CUkernel hfunc) { return entry_name(hfunc, true, name); }

// The kernel's function in the current context: the kernel itself, which every call taking a
// CUfunction accepts.
CUDASIM_EXPORT CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (!kernels(l.st).kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

// --- the deprecated execution control ---
CUDASIM_EXPORT CUresult cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z) {
  return with_settings(hfunc, [&](FunctionSettings& s) {
    if (x <= 0 || y <= 0 || z <= 0) return CUDA_ERROR_INVALID_VALUE;
    s.block_shape[0] = static_cast<unsigned>(x), s.block_shape[1] = static_cast<unsigned>(y);
    s.block_shape[2] = static_cast<unsigned>(z);
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuFuncSetSharedSize(CUfunction hfunc, unsigned int bytes) {
  return with_settings(hfunc, [&](FunctionSettings& s) {
    s.shared_size = bytes;  // checked against the function's limit at launch, as cuLaunchKernel's
    return CUDA_SUCCESS;
  });
}

// Bank sizes no longer exist on the simulated architecture: the setting is checked and kept only.
CUDASIM_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) {
  return with_settings(hfunc, [&](FunctionSettings& s) {
    if (config != CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE && config != CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE &&
        config != CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
      return CUDA_ERROR_INVALID_VALUE;
    s.shared_config = config;
    return CUDA_SUCCESS;
  });
}

CUDASIM_EXPORT CUresult cuParamSetSize(CUfunction hfunc, unsigned int numbytes) {
  return with_settings(hfunc, [&](FunctionSettings& s) {
    if (numbytes > kMaxLegacyParamBytes) return CUDA_ERROR_INVALID_VALUE;
    s.params.resize(numbytes);
    return CUDA_SUCCESS;
  });
}

namespace {

// Copies `bytes` into the function's parameter buffer at `offset`, within its cuParamSetSize size.
CUresult set_param(CUfunction hfunc, int offset, const void* value, std::size_t bytes) {
  if (value == nullptr && bytes > 0) return CUDA_ERROR_INVALID_VALUE;
  return with_settings(hfunc, [&](FunctionSettings& s) {
    if (offset < 0 || static_cast<std::size_t>(offset) + bytes > s.params.size()) return CUDA_ERROR_INVALID_VALUE;
    if (bytes > 0) std::memcpy(s.params.data() + offset, value, bytes);
    return CUDA_SUCCESS;
  });
}

}  // namespace

CUDASIM_EXPORT CUresult cuParamSeti(CUfunction hfunc, int offset, unsigned int value) {
  return set_param(hfunc, offset, &value, sizeof value);
}
CUDASIM_EXPORT CUresult cuParamSetf(CUfunction hfunc, int offset, float value) {
  return set_param(hfunc, offset, &value, sizeof value);
}
CUDASIM_EXPORT CUresult cuParamSetv(CUfunction hfunc, int offset, void* ptr, unsigned int numbytes) {
  return set_param(hfunc, offset, ptr, numbytes);
}

// --- occupancy ---
CUDASIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                                    size_t dynamicSMemSize) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, CU_OCCUPANCY_DEFAULT);
}

CUDASIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                             int blockSize, size_t dynamicSMemSize,
                                                                             unsigned int flags) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

CUDASIM_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                         CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                         size_t dynamicSMemSize, int blockSizeLimit) {
  return max_potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                  blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}

CUDASIM_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                                  size_t dynamicSMemSize, int blockSizeLimit,
                                                                  unsigned int flags) {
  return max_potential_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                  blockSizeLimit, flags);
}

// Clusters (the launch checks in kernels.cpp): at most kMaxPortableClusterBlocks blocks, or
// kMaxClusterBlocks when the function allows non-portable sizes; a required cluster shape
// (REQUIRED_CLUSTER_WIDTH/HEIGHT/DEPTH) is the only one allowed.
namespace {
unsigned cluster_limit(const FunctionSettings& s) {
  return s.non_portable_cluster_allowed ? kMaxClusterBlocks : kMaxPortableClusterBlocks;
}
unsigned required_cluster_blocks(const FunctionSettings& s) {
  return static_cast<unsigned>(s.required_cluster[0] * s.required_cluster[1] * s.required_cluster[2]);
}
int config_block_threads(const CUlaunchConfig& config) {
  const std::uint64_t threads = std::uint64_t{config.blockDimX} * config.blockDimY * config.blockDimZ;
  return threads > kMaxThreadsPerBlock ? static_cast<int>(kMaxThreadsPerBlock) + 1 : static_cast<int>(threads);
}
}  // namespace

// The largest cluster that launches with this configuration: the required one, else the limit
// (0 when not even one block of the configuration fits a multiprocessor). Its cluster dimensions
// are ignored, as cuda.h says.
CUDASIM_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                                           const CUlaunchConfig* config) {
  if (clusterSize == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_settings(func, [&](const FunctionSettings& s) {
    const int threads = config_block_threads(*config);
    if (threads == 0) return CUDA_ERROR_INVALID_VALUE;
    if (active_blocks(s, threads, config->sharedMemBytes) == 0) *clusterSize = 0;
    else if (const unsigned required = required_cluster_blocks(s); required > 0) *clusterSize = static_cast<int>(required);
    else *clusterSize = static_cast<int>(cluster_limit(s));
    return CUDA_SUCCESS;
  });
}

// Clusters of the configuration's shape (its CLUSTER_DIMENSION attribute, else the function's
// required shape) resident at once: every multiprocessor's blocks, pooled, in whole clusters.
CUDASIM_EXPORT CUresult cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func, const CUlaunchConfig* config) {
  if (numClusters == nullptr || config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  return with_settings(func, [&](const FunctionSettings& s) {
    const int threads = config_block_threads(*config);
    if (threads == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned cluster = required_cluster_blocks(s);
    for (unsigned i = 0; i < config->numAttrs; ++i) {
      const CUlaunchAttribute& a = config->attrs[i];
      if (a.id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
      const unsigned asked = a.value.clusterDim.x * a.value.clusterDim.y * a.value.clusterDim.z;
      const bool matches = required_cluster_blocks(s) == 0 ||
                           (static_cast<int>(a.value.clusterDim.x) == s.required_cluster[0] &&
                            static_cast<int>(a.value.clusterDim.y) == s.required_cluster[1] &&
                            static_cast<int>(a.value.clusterDim.z) == s.required_cluster[2]);
      if (!matches) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
      cluster = asked;
    }
    if (cluster == 0 || cluster > cluster_limit(s)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    const std::uint64_t blocks =
        static_cast<std::uint64_t>(active_blocks(s, threads, config->sharedMemBytes)) * kMultiprocessors;
    *numClusters = static_cast<int>(blocks / cluster);
    return CUDA_SUCCESS;
  });
}

// The most dynamic shared memory each of numBlocks blocks of blockSize threads may use for all of
// them to fit on one multiprocessor together (0 when they cannot).
CUDASIM_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                                int numBlocks, int blockSize) {
  if (dynamicSmemSize == nullptr || numBlocks <= 0 || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  return with_settings(func, [&](const FunctionSettings& s) {
    *dynamicSmemSize = 0;
    if (active_blocks(s, blockSize, 0) < numBlocks) return CUDA_SUCCESS;
    const std::size_t share = static_cast<std::size_t>(kSharedBytesPerMultiprocessor) / static_cast<std::size_t>(numBlocks);
    if (share > kReservedSharedBytesPerBlock)
      *dynamicSmemSize = std::min<std::size_t>(share - kReservedSharedBytesPerBlock, static_cast<std::size_t>(s.max_dynamic_shared));
    return CUDA_SUCCESS;
  });
}
