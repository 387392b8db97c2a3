// What nvcc-generated host code calls: fat-binary, function and variable registration at start-up
// (__cudaRegisterFatBinary ... __cudaUnregisterFatBinary), the `<<<>>>` launch path
// (__cudaPushCallConfiguration / __cudaPopCallConfiguration, __cudaGetKernel, __cudaLaunchKernel)
// and cudaLaunchKernel. As NVIDIA's runtime does since CUDA 12, a fat binary is loaded into the
// driver as a context-independent library (cuLibraryLoadData) on the first launch of one of its
// kernels, and a launch is cuLaunchKernel of the library's kernel in the current context. Only the
// fat binaries of whole-program compilation are taken: relocatable device code (-rdc, version 2
// wrappers linked by nvlink) is not.
#include "context.h"
#include "driver_table.h"
#include "error_state.h"
#include "operations.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cudasim::runtime {
namespace {

constexpr int kFatbinWrapperMagic = 0x466243B1;  // __fatBinC_Wrapper_t (fatbinary_section.h)
constexpr int kWholeProgramWrapperVersion = 1;

// One registered fat binary. Invariant: `library` is non-null once loaded; `load_status` keeps the
// outcome of the one load attempt.
struct FatBinary {
  const void* wrapper = nullptr;
  bool valid = false;  // a version-1 wrapper with the fat binary's magic
  bool loaded = false;
  cudaError_t load_status = cudaSuccess;
  CUlibrary library = nullptr;
};

// A registered kernel: its host stub's address names it; `kernel` is set on first use.
struct Function {
  FatBinary* binary = nullptr;
  std::string device_name;
  CUkernel kernel = nullptr;
};

// __managed__ variables: the host-side pointer each one reads through, set by __cudaInitModule.
struct ManagedVariable {
  FatBinary* binary = nullptr;
  void** host_pointer = nullptr;
  std::size_t size = 0;
};

// Registrations happen in static constructors before main, possibly from several shared objects;
// launches from any thread. Never destroyed: programs unregister from atexit handlers.
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<FatBinary>> binaries;
  std::map<const void*, Function> functions;
  std::vector<ManagedVariable> managed;
};

Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// The launch configurations pushed by `<<<>>>` on this thread and not yet popped by the stub. A
// plain array: trivially destructible, so launches from thread-exit or atexit code still work.
struct CallConfiguration {
  dim3 grid, block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
};
constexpr int kMaxPushedConfigurations = 16;
thread_local CallConfiguration t_configurations[kMaxPushedConfigurations];
thread_local int t_pushed = 0;

}  // namespace

cudaError_t kernel_of(const void* host_function, CUkernel* kernel) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.functions.find(host_function);
  if (it == r.functions.end()) return cudaErrorInvalidDeviceFunction;
  Function& function = it->second;
  if (function.kernel != nullptr) {
    *kernel = function.kernel;
    return cudaSuccess;
  }
  FatBinary& binary = *function.binary;
  if (!binary.valid) return cudaErrorInvalidKernelImage;
  if (!binary.loaded) {
    binary.loaded = true;
    binary.load_status = call_driver<&DriverTable::cuLibraryLoadData>(&binary.library, binary.wrapper, nullptr,
                                                                      nullptr, 0u, nullptr, nullptr, 0u);
  }
  if (binary.load_status != cudaSuccess) return binary.load_status;
  const cudaError_t status =
      call_driver<&DriverTable::cuLibraryGetKernel>(&function.kernel, binary.library, function.device_name.c_str());
  if (status != cudaSuccess) return status == cudaErrorSymbolNotFound ? cudaErrorInvalidDeviceFunction : status;
  *kernel = function.kernel;
  return cudaSuccess;
}

const void* host_function_of(CUkernel kernel) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& [stub, function] : r.functions) {
    if (function.kernel == kernel) return stub;
  }
  return kernel;
}

namespace {

// Launch limits every simulated device reports (cudaDevAttrMaxBlockDimX, ...): a launch beyond
// them "requests resources that can never be satisfied" (cudaErrorInvalidConfiguration).
// Dynamic shared memory beyond the default 48 KiB is checked against the kernel's own limit
// (cudaFuncAttributeMaxDynamicSharedMemorySize) by the caller.
bool configuration_valid(dim3 grid, dim3 block) {
  const unsigned grid_limit[3] = {2147483647u, 65535, 65535};
  const unsigned block_limit[3] = {1024, 1024, 64};
  const unsigned g[3] = {grid.x, grid.y, grid.z};
  const unsigned b[3] = {block.x, block.y, block.z};
  std::uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (g[i] == 0 || b[i] == 0 || g[i] > grid_limit[i] || b[i] > block_limit[i]) return false;
    threads *= b[i];
  }
  return threads <= 1024;
}

// Whether the kernel may use `shared_bytes` of dynamic shared memory (48 KiB, or what it opted in to).
bool shared_memory_valid(CUkernel kernel, size_t shared_bytes) {
  constexpr size_t kDefaultDynamicShared = 49152;
  if (shared_bytes <= kDefaultDynamicShared) return true;
  int device = 0, limit = 0;
  return current_device(&device) == cudaSuccess &&
         call_driver<&DriverTable::cuKernelGetAttribute>(&limit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                         kernel, device) == cudaSuccess &&
         shared_bytes <= static_cast<size_t>(limit);
}

}  // namespace

cudaError_t launch_kernel(CUkernel kernel, dim3 grid, dim3 block, void** args, size_t shared_bytes, CUstream stream) {
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  if (!configuration_valid(grid, block) || !shared_memory_valid(kernel, shared_bytes)) return cudaErrorInvalidConfiguration;
  return with_context([&] {
    return call_driver<&DriverTable::cuLaunchKernel>(reinterpret_cast<CUfunction>(kernel), grid.x, grid.y, grid.z,
                                                     block.x, block.y, block.z, static_cast<unsigned>(shared_bytes),
                                                     stream, args, nullptr);
  });
}

cudaError_t launch_host_function(const void* function, dim3 grid, dim3 block, void** args, size_t shared_bytes,
                                 CUstream stream) {
  if (function == nullptr) return cudaErrorInvalidDeviceFunction;
  CUkernel kernel = nullptr;
  if (const cudaError_t status = kernel_of(function, &kernel); status != cudaSuccess) return status;
  return launch_kernel(kernel, grid, block, args, shared_bytes, stream);
}

// The runtime's launch attributes are the driver's, entry for entry.
static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute) &&
              offsetof(cudaLaunchAttribute, val) == offsetof(CUlaunchAttribute, value) &&
              static_cast<int>(cudaLaunchAttributeCooperative) == static_cast<int>(CU_LAUNCH_ATTRIBUTE_COOPERATIVE) &&
              static_cast<int>(cudaLaunchAttributeClusterDimension) ==
                  static_cast<int>(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION));

CUlaunchConfig driver_launch_config(const cudaLaunchConfig_t& config, CUstream stream) {
  CUlaunchConfig out{};
  out.gridDimX = config.gridDim.x, out.gridDimY = config.gridDim.y, out.gridDimZ = config.gridDim.z;
  out.blockDimX = config.blockDim.x, out.blockDimY = config.blockDim.y, out.blockDimZ = config.blockDim.z;
  out.sharedMemBytes = static_cast<unsigned>(config.dynamicSmemBytes);
  out.hStream = stream;
  out.attrs = reinterpret_cast<CUlaunchAttribute*>(config.attrs);
  out.numAttrs = config.numAttrs;
  return out;
}

cudaError_t launch_host_function_ex(const void* function, const cudaLaunchConfig_t* config, void** args,
                                    CUstream stream) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return cudaErrorInvalidValue;
  if (function == nullptr) return cudaErrorInvalidDeviceFunction;
  CUkernel kernel = nullptr;
  if (const cudaError_t status = kernel_of(function, &kernel); status != cudaSuccess) return status;
  if (!configuration_valid(config->gridDim, config->blockDim) || !shared_memory_valid(kernel, config->dynamicSmemBytes))
    return cudaErrorInvalidConfiguration;
  const CUlaunchConfig driver_config = driver_launch_config(*config, stream);
  return with_context([&] {
    return call_driver<&DriverTable::cuLaunchKernelEx>(&driver_config, reinterpret_cast<CUfunction>(kernel), args,
                                                       nullptr);
  });
}

cudaError_t launch_cooperative(const void* function, dim3 grid, dim3 block, void** args, size_t shared_bytes,
                               CUstream stream) {
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  return launch_host_function_ex(function, &config, args, stream);
}

}  // namespace cudasim::runtime

using namespace cudasim::runtime;

// Not declared by the toolkit's headers outside nvcc; the signatures are those of crt/host_runtime.h
// and crt/device_functions.h.
#define CUDASIM_RUNTIME_EXPORT extern "C" __attribute__((visibility("default")))

CUDASIM_RUNTIME_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) {
  Registry& r = registry();
  auto binary = std::make_unique<FatBinary>();
  binary->wrapper = fatCubin;
  if (fatCubin != nullptr) {
    int header[2];
    std::memcpy(header, fatCubin, sizeof header);
    binary->valid = header[0] == kFatbinWrapperMagic && header[1] == kWholeProgramWrapperVersion;
  }
  std::lock_guard lock(r.mutex);
  r.binaries.push_back(std::move(binary));
  return reinterpret_cast<void**>(r.binaries.back().get());
}

CUDASIM_RUNTIME_EXPORT void __cudaRegisterFatBinaryEnd(void** /*fatCubinHandle*/) {}

// Called from an atexit handler the generated code installs: forgets the binary's functions.
// The driver's library is left to process exit (the driver may already be shutting down).
CUDASIM_RUNTIME_EXPORT void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  Registry& r = registry();
  auto* binary = reinterpret_cast<FatBinary*>(fatCubinHandle);
  std::lock_guard lock(r.mutex);
  std::erase_if(r.functions, [binary](const auto& entry) { return entry.second.binary == binary; });
  std::erase_if(r.managed, [binary](const ManagedVariable& v) { return v.binary == binary; });
  forget_binary_variables(fatCubinHandle);
}

CUDASIM_RUNTIME_EXPORT void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* /*deviceFun*/,
                                                   const char* deviceName, int /*thread_limit*/, uint3* /*tid*/,
                                                   uint3* /*bid*/, dim3* /*bDim*/, dim3* /*gDim*/, int* /*wSize*/) {
  if (hostFun == nullptr || deviceName == nullptr) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.functions[hostFun] = Function{reinterpret_cast<FatBinary*>(fatCubinHandle), deviceName, nullptr};
}

// __device__ and __constant__ variables: __cudaRegisterVar is in symbol_api.cpp.

CUDASIM_RUNTIME_EXPORT void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress,
                                                     char* /*deviceAddress*/, const char* /*deviceName*/,
                                                     int /*ext*/, size_t size, int /*constant*/, int /*global*/) {
  if (hostVarPtrAddress == nullptr) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.managed.push_back({reinterpret_cast<FatBinary*>(fatCubinHandle), hostVarPtrAddress, size});
}

// Gives each __managed__ variable of the binary its managed memory (the first access to one calls
// this through the generated code). Returns whether every variable has storage.
CUDASIM_RUNTIME_EXPORT char __cudaInitModule(void** fatCubinHandle) {
  auto* binary = reinterpret_cast<FatBinary*>(fatCubinHandle);
  if (ensure_context() != cudaSuccess) return 0;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  bool ready = true;
  for (ManagedVariable& variable : r.managed) {
    if (variable.binary != binary || *variable.host_pointer != nullptr) continue;
    CUdeviceptr storage = 0;
    if (call_driver<&DriverTable::cuMemAllocManaged>(&storage, variable.size, CU_MEM_ATTACH_GLOBAL) != cudaSuccess) {
      ready = false;
      continue;
    }
    *variable.host_pointer = reinterpret_cast<void*>(storage);
  }
  return ready ? 1 : 0;
}

CUDASIM_RUNTIME_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                            struct CUstream_st* stream) {
  if (t_pushed == kMaxPushedConfigurations) return 1;  // the generated code then skips the launch
  t_configurations[t_pushed++] = CallConfiguration{gridDim, blockDim, sharedMem, stream};
  return 0;
}

CUDASIM_RUNTIME_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                                              void* stream) {
  if (t_pushed == 0) return cudaErrorMissingConfiguration;
  const CallConfiguration& c = t_configurations[--t_pushed];
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared_bytes;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

CUDASIM_RUNTIME_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  if (kernel == nullptr) return api_call([] { return cudaErrorInvalidValue; });
  return api_call([&] { return kernel_of(hostFun, reinterpret_cast<CUkernel*>(kernel)); });
}

CUDASIM_RUNTIME_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                                      size_t sharedMem, cudaStream_t stream) {
  return api_call([&] {
    return launch_kernel(reinterpret_cast<CUkernel>(kernel), gridDim, blockDim, args, sharedMem, stream);
  });
}

CUDASIM_RUNTIME_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                           void** args, size_t sharedMem, cudaStream_t stream) {
  return api_call([&] {
    return launch_kernel(reinterpret_cast<CUkernel>(kernel), gridDim, blockDim, args, sharedMem,
                         per_thread_stream(stream));
  });
}

extern "C" cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                        cudaStream_t stream) {
  return api_call([&] { return launch_host_function(func, gridDim, blockDim, args, sharedMem, stream); });
}

extern "C" cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return api_call([&] {
    return launch_host_function_ex(func, config, args, config != nullptr ? config->stream : nullptr);
  });
}

extern "C" cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                   size_t sharedMem, cudaStream_t stream) {
  return api_call([&] { return launch_cooperative(func, gridDim, blockDim, args, sharedMem, stream); });
}
