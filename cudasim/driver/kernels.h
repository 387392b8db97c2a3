// Modules, libraries and the functions and kernels they hold (kernels.cpp), and what programs may
// set per function (functions.cpp).
#pragma once

#include "device_limits.h"
#include "state.h"

#include <map>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace cudasim {

// What cuFuncSetAttribute / cuKernelSetAttribute and cuFuncSetCacheConfig may change (one setting for
// every device: a kernel's per-device attributes are kept once).
struct FunctionSettings {
  int max_dynamic_shared = kMaxSharedBytesPerBlock;  // the launch limit for dynamic shared memory
  int preferred_carveout = -1;                       // -1: no preference
  int required_cluster[3] = {0, 0, 0};
  int non_portable_cluster_allowed = 0;
  int cluster_scheduling_policy = 0;
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  CUsharedconfig shared_config = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;  // cuFuncSetSharedMemConfig (kept only)
  // The deprecated execution control (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSet*), which
  // cuLaunch, cuLaunchGrid and cuLaunchGridAsync launch with.
  unsigned block_shape[3] = {0, 0, 0};
  unsigned shared_size = 0;
  std::vector<unsigned char> params;  // cuParamSetSize bytes, written by cuParamSeti/f/v
};

// The most bytes of parameters the deprecated execution control takes (the driver's 4 KiB limit).
inline constexpr std::size_t kMaxLegacyParamBytes = 4096;

}  // namespace cudasim

namespace cudasim {

// A variable an image declares in global or constant memory (globals.cpp): a PTX `.global` or
// `.const` definition, or an object symbol of a cubin's .nv.global / .nv.constant sections.
struct GlobalDecl {
  std::string name;
  std::size_t size = 0;
  std::size_t align = 1;
  bool managed = false;  // PTX `.attribute(.managed)`: cuLibraryGetManaged's
  std::string initial;   // `size` bytes the image gives, or empty: zero-filled
};
using GlobalDecls = std::shared_ptr<const std::vector<GlobalDecl>>;

// The device memory given to one global: an allocation flagged module_global, recognised as still
// live by its buffer id (the memory goes with its context when that is destroyed first).
struct GlobalStorage {
  CUdeviceptr address = 0;
  std::uint64_t buffer_id = 0;
};
using GlobalStorages = std::map<std::string, GlobalStorage>;

}  // namespace cudasim

// Invariant: a library stays loaded until cuLibraryUnload; its kernels are valid exactly as long.
struct CUlib_st {
  std::string image;
  std::map<std::string, CUkern_st*> kernels;
  std::map<CUctx_st*, CUmod_st*> modules;  // cuLibraryGetModule's, per context (live while in KernelState)
  cudasim::GlobalDecls globals;            // what the image declares
  cudasim::GlobalStorages managed;         // its managed globals: one for every context
};
struct CUkern_st {
  CUlib_st* library = nullptr;
  std::string name;
  cudasim::FunctionSettings settings;
};
// Invariant: a module belongs to the context current when it was loaded and is unloaded with it.
struct CUmod_st {
  CUctx_st* ctx = nullptr;
  std::string image;
  std::map<std::string, CUfunc_st*> functions;
  cudasim::GlobalDecls globals;     // what the image declares
  cudasim::GlobalStorages storage;  // the globals asked for so far, in ctx; freed by the unload
};
struct CUfunc_st {
  CUmod_st* module = nullptr;
  std::string name;
  cudasim::FunctionSettings settings;
  // Lazy loading (cuFuncIsLoaded): a handle from cuModuleEnumerateFunctions is loaded by cuFuncLoad
  // or its first launch; one from cuModuleGetFunction, or any in eager mode, is loaded at once.
  bool loaded = true;
};
// A pending JIT link (linker.cpp): the inputs added so far, and the image cuLinkComplete made.
struct CUlinkState_st {
  std::string inputs;  // each accepted input's bytes, NUL-separated
  int input_count = 0;
  std::string output;  // empty until cuLinkComplete
  // The caller's option slots the driver writes back into (valid while the link lives, as cuda.h
  // requires of output options); null when not given.
  char* info_log = nullptr;
  char* error_log = nullptr;
  void** info_log_size = nullptr;
  void** error_log_size = nullptr;
  void** wall_time = nullptr;
};

namespace cudasim {

// Loaded modules and libraries, and the handles they gave out. Objects are never freed (a stale
// handle must be recognised as stale, not reused memory) but stay owned here: unloading only
// removes them from the live sets.
struct KernelState {
  std::unordered_set<CUlib_st*> libraries;
  std::unordered_set<CUkern_st*> kernels;
  std::unordered_set<CUmod_st*> modules;
  std::unordered_set<CUfunc_st*> functions;
  std::unordered_set<CUlinkState_st*> links;
  std::vector<std::unique_ptr<CUlib_st>> made_libraries;
  std::vector<std::unique_ptr<CUkern_st>> made_kernels;
  std::vector<std::unique_ptr<CUmod_st>> made_modules;
  std::vector<std::unique_ptr<CUfunc_st>> made_functions;
  std::vector<std::unique_ptr<CUlinkState_st>> made_links;
  bool warned = false;
  // CUDA_MODULE_LOADING, read when the first module or library call creates this state.
  CUmoduleLoadingMode loading_mode = CU_MODULE_LAZY_LOADING;

  // Takes ownership of a new object and adds it to `live`.
  template <typename T>
  T* keep(std::vector<std::unique_ptr<T>>& made, std::unordered_set<T*>& live, T* object) {
    made.emplace_back(object);
    live.insert(object);
    return object;
  }
  CUlib_st* keep(CUlib_st* library) { return keep(made_libraries, libraries, library); }
  CUkern_st* keep(CUkern_st* kernel) { return keep(made_kernels, kernels, kernel); }
  CUmod_st* keep(CUmod_st* module) { return keep(made_modules, modules, module); }
  CUfunc_st* keep(CUfunc_st* function) { return keep(made_functions, functions, function); }
  CUlinkState_st* keep(CUlinkState_st* link) { return keep(made_links, links, link); }
};

inline constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;  // a fat binary's own header
inline constexpr std::size_t kMaxImageBytes = std::size_t{1} << 31;
inline constexpr std::size_t kUnboundedImage = std::numeric_limits<std::size_t>::max();

// The bytes of a loadable image (a fat binary, or nvcc's wrapper of one when unbounded; a 64-bit ELF
// cubin; PTX text), at most `limit` of them (kUnboundedImage: an image in memory, whose headers give
// its length); nullopt when it is none of those.
std::optional<std::string> image_bytes(const void* image, std::size_t limit);
// The whole file at `path` (CUDA_ERROR_FILE_NOT_FOUND when it cannot be read, CUDA_ERROR_INVALID_IMAGE
// over kMaxImageBytes), NUL-terminated after its bytes. Takes no lock.
CUresult read_image_file(const char* path, std::string* out);

// The globals `image` declares (globals.cpp), each name once: its PTX text, the symbol table of its
// ELF cubin, and those of the PTX texts and cubins a fat binary or linked image holds.
GlobalDecls image_globals(const std::string& image);
// Frees the memory of every global in `storage` still live, and forgets them. Needs State::mu.
void free_globals(State& st, GlobalStorages& storage);
// The module of `library` in context `ctx` (kernels.cpp), made on first request. Needs State::mu.
CUmod_st* library_module(KernelState& ks, CUlib_st* library, CUctx_st* ctx);

// Whether `c` may be part of a PTX identifier.
inline bool identifier_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$';
}

// Blocks of `block_size` threads, `dynamic_shared` bytes each, that one multiprocessor holds
// (functions.cpp's occupancy model).
int resident_blocks(const FunctionSettings& settings, int block_size, std::size_t dynamic_shared);

// The loaded modules and libraries of the process, created on first use. Needs State::mu.
KernelState& kernels(State& st);
// Says once per process, on stderr, that kernels complete without running device code (a launch, or
// a graph launch with kernel nodes). Needs State::mu.
void warn_kernels_do_not_run(State& st);

}  // namespace cudasim

