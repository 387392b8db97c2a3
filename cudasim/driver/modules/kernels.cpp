// Modules, libraries and kernel launches. The simulated device runs no device code: an image is
// accepted when it is a fat binary, an ELF cubin or PTX text, a function or kernel is found by its
// name in the image, and a launch is validated like the driver's, then queued on its stream as an
// operation that completes without doing anything (CUDASIM_KERNELS=skip, the default; counted in
// the report, with one warning per process), or refused with CUDA_ERROR_NO_BINARY_FOR_GPU
// (CUDASIM_KERNELS=fail), the error a driver gives for an image with no code for its GPU.
#include "contexts.h"
#include "device_limits.h"
#include "fatbin.h"
#include "kernels.h"
#include "state.h"

#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

using namespace cudasim;

namespace {

constexpr std::uint32_t kFatbinWrapperMagic = 0x466243B1;  // __fatBinC_Wrapper_t (fatbinary_section.h)
constexpr std::size_t kMaxPtxBytes = std::size_t{64} << 20;

template <typename T>
T read_at(const unsigned char* bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes + offset, sizeof value);
  return value;
}

}  // namespace

namespace cudasim {

// Like the driver, it trusts the image's own headers for its length, but never past `limit` (the
// bytes known to be there: a file's size, a linker input's size).
std::optional<std::string> image_bytes(const void* image, std::size_t limit) {
  const auto* bytes = static_cast<const unsigned char*>(image);
  const bool bounded = limit != kUnboundedImage;
  if (limit >= 16) {
    const auto magic = read_at<std::uint32_t>(bytes, 0);
    // The wrapper points at its fat binary: only meaningful in this process's memory, not in a file.
    if (magic == kFatbinWrapperMagic && !bounded) {
      // { int magic; int version; const unsigned long long* data; void* filename_or_fatbins; }
      const auto version = read_at<int>(bytes, 4);
      const auto* data = read_at<const void*>(bytes, 8);
      if (version != 1 || data == nullptr) return std::nullopt;
      return image_bytes(data, kUnboundedImage);
    }
    if (magic == kFatbinMagic) {
      const auto header = read_at<std::uint16_t>(bytes, 6);
      const auto body = read_at<std::uint64_t>(bytes, 8);
      if (header < 16 || body > kMaxImageBytes || header + body > limit) return std::nullopt;
      // NVIDIA's libraries compress their entries: the device's own are decompressed, so that
      // their names are found as in any other image.
      FatbinExpansion expanded = expand_fatbin(
          std::string_view(reinterpret_cast<const char*>(bytes), header + body), kSmVersion, kMaxImageBytes);
      if (!expanded.error.empty()) {
        static std::once_flag said;
        std::call_once(said, [&expanded] {
          std::fprintf(stderr, "cudasim: a fat binary cannot be loaded (CUDA_ERROR_INVALID_IMAGE): %s\n",
                       expanded.error.c_str());
        });
        return std::nullopt;
      }
      return std::move(expanded.image);
    }
  }
  if (limit >= sizeof(Elf64_Ehdr) && std::memcmp(bytes, ELFMAG, SELFMAG) == 0) {
    if (bytes[EI_CLASS] != ELFCLASS64) return std::nullopt;
    const auto elf = read_at<Elf64_Ehdr>(bytes, 0);
    const std::uint64_t sections = elf.e_shoff + std::uint64_t{elf.e_shnum} * elf.e_shentsize;
    const std::uint64_t segments = elf.e_phoff + std::uint64_t{elf.e_phnum} * elf.e_phentsize;
    const std::uint64_t length = std::max<std::uint64_t>({sizeof elf, sections, segments});
    if (length > kMaxImageBytes || length > limit) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(bytes), length);
  }
  // PTX: text that declares its version, up to its NUL (or the end of what is known to be there).
  const std::size_t most = std::min(limit, kMaxPtxBytes);
  const std::size_t length = strnlen(reinterpret_cast<const char*>(bytes), most);
  std::string text(reinterpret_cast<const char*>(bytes), length);
  if (length == kMaxPtxBytes || text.find(".version") == std::string::npos) return std::nullopt;
  return text;
}

}  // namespace cudasim

namespace {

// Whether the image defines an entry point called `name`: as a whole symbol-table string (ELF,
// also inside a fat binary) or as a PTX `.entry` directive.
bool image_defines(const std::string& image, const char* name) {
  const std::string_view wanted(name);
  if (wanted.empty()) return false;
  std::string symbol(1, '\0');
  symbol.append(wanted).push_back('\0');
  if (image.find(symbol) != std::string::npos) return true;
  for (std::size_t at = image.find(".entry"); at != std::string::npos; at = image.find(".entry", at + 1)) {
    std::size_t p = at + 6;
    while (p < image.size() && (image[p] == ' ' || image[p] == '\t' || image[p] == '\n')) ++p;
    if (image.compare(p, wanted.size(), wanted) == 0 &&
        (p + wanted.size() == image.size() || !identifier_char(image[p + wanted.size()])))
      return true;
  }
  return false;
}

// The entry points the image names, in order, each once: PTX `.entry` directives, and the kernels
// of ELF cubins (each has a `.nv.info.<name>` section, whose name is a whole string of the image).
std::vector<std::string> image_entry_names(const std::string& image) {
  std::vector<std::string> names;
  auto add = [&names](std::string name) {
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  };
  for (std::size_t at = image.find(".entry"); at != std::string::npos; at = image.find(".entry", at + 1)) {
    std::size_t p = at + 6;
    if (p < image.size() && identifier_char(image[p])) continue;  // a longer word
    while (p < image.size() && (image[p] == ' ' || image[p] == '\t' || image[p] == '\n')) ++p;
    std::size_t end = p;
    while (end < image.size() && identifier_char(image[end])) ++end;
    add(image.substr(p, end - p));
  }
  const std::string info("\0.nv.info.", 10);
  for (std::size_t at = image.find(info); at != std::string::npos; at = image.find(info, at + 1)) {
    const std::size_t p = at + info.size();
    const std::size_t end = image.find('\0', p);
    if (end != std::string::npos) add(image.substr(p, end - p));
  }
  return names;
}

// The bytes of a PTX parameter type (.u8 .. .b64, .f16, .f32, .f64, ...): its width / 8; 0 if none.
std::size_t ptx_type_bytes(std::string_view type) {
  if (type.size() < 3 || type[0] != '.') return 0;
  const std::string_view bits = type.substr(2);
  if (bits != "8" && bits != "16" && bits != "32" && bits != "64") return 0;
  return static_cast<std::size_t>(std::stoi(std::string(bits))) / 8;
}

// One parameter of a kernel in the device-side layout.
struct ParamSlot {
  std::size_t offset = 0;
  std::size_t size = 0;
};

// The parameter layout of the PTX entry `name` (`.entry name(.param .u64 a, .param .align 8 .b8
// b[16])`): each parameter at the next multiple of its alignment (`.align`, else its type's size).
// Nullopt when the image has no PTX entry of that name or its list does not parse.
std::optional<std::vector<ParamSlot>> ptx_parameters(const std::string& image, const std::string& name) {
  for (std::size_t at = image.find(".entry"); at != std::string::npos; at = image.find(".entry", at + 1)) {
    std::size_t p = at + 6;
    while (p < image.size() && std::isspace(static_cast<unsigned char>(image[p]))) ++p;
    if (image.compare(p, name.size(), name) != 0) continue;
    p += name.size();
    if (p < image.size() && identifier_char(image[p])) continue;
    while (p < image.size() && std::isspace(static_cast<unsigned char>(image[p]))) ++p;
    std::vector<ParamSlot> slots;
    if (p >= image.size() || image[p] != '(') return slots;  // no parameter list
    const std::size_t close = image.find(')', p);
    if (close == std::string::npos) return std::nullopt;
    std::size_t next = 0;
    std::string list = image.substr(p + 1, close - p - 1);
    for (std::size_t start = 0; start <= list.size();) {
      std::size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      std::istringstream words(list.substr(start, comma - start));
      start = comma + 1;
      std::string word;
      std::size_t align = 0, element = 0, count = 1;
      bool any = false;
      while (words >> word) {
        any = true;
        if (word == ".align") {
          words >> align;
        } else if (const std::size_t bytes = ptx_type_bytes(word); bytes > 0 && element == 0) {
          element = bytes;
        } else if (const std::size_t bracket = word.find('['); bracket != std::string::npos) {
          count = std::strtoull(word.c_str() + bracket + 1, nullptr, 10);
        }
      }
      if (!any) continue;
      if (element == 0 || count == 0) return std::nullopt;
      if (align == 0) align = element;
      next = (next + align - 1) / align * align;
      slots.push_back({next, element * count});
      next += element * count;
    }
    return slots;
  }
  return std::nullopt;
}

CUresult param_info(const std::string& image, const std::string& name, std::size_t index, std::size_t* offset,
                    std::size_t* size) {
  if (offset == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<std::vector<ParamSlot>> slots = ptx_parameters(image, name);
  if (!slots) return CUDA_ERROR_NOT_SUPPORTED;  // only PTX declares its parameters readably
  if (index >= slots->size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = (*slots)[index].offset;
  if (size != nullptr) *size = (*slots)[index].size;
  return CUDA_SUCCESS;
}

// The entry point `name` of a loaded module or library: the handle given out before, else a new one
// when the image defines that name. Needs State::mu.
// `load`: whether a new handle starts loaded (CUfunc_st::loaded).
template <typename Owner, typename Entry>
CUresult entry_point(KernelState& ks, Owner* owner, std::map<std::string, Entry*>& entries, const char* name,
                     Entry** out, bool load = true) {
  if (auto it = entries.find(name); it != entries.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  if (!image_defines(owner->image, name)) return CUDA_ERROR_NOT_FOUND;
  Entry* entry = ks.keep(new Entry{owner, name, {}});
  if constexpr (std::is_same_v<Entry, CUfunc_st>) entry->loaded = load || ks.loading_mode == CU_MODULE_EAGER_LOADING;
  entries.emplace(name, entry);
  *out = entry;
  return CUDA_SUCCESS;
}

// `limit`: as for image_bytes.
CUresult load_module(CUmodule* module, const void* image, std::size_t limit = kUnboundedImage) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<std::string> bytes = image_bytes(image, limit);
  if (!bytes) return CUDA_ERROR_INVALID_IMAGE;
  GlobalDecls globals = image_globals(*bytes);
  *module = kernels(l.st).keep(new CUmod_st{ctx, std::move(*bytes), {}, std::move(globals), {}});
  return CUDA_SUCCESS;
}

// Within the device's limits (device_limits.h), and the function's dynamic shared memory limit.
bool launch_shape_valid(const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
                        const FunctionSettings& settings) {
  std::uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0 || grid[i] > kMaxGridDim[i] || block[i] > kMaxBlockDim[i]) return false;
    threads *= block[i];
  }
  return threads <= kMaxThreadsPerBlock && shared_bytes <= static_cast<unsigned>(settings.max_dynamic_shared);
}

// What a launch asks beyond its shape: cuLaunchCooperativeKernel, or cuLaunchKernelEx's attributes.
struct LaunchOptions {
  bool cooperative = false;
  unsigned cluster[3] = {0, 0, 0};  // all 0: no cluster dimension given
};

// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE when a cooperative grid cannot be resident all at once;
// CUDA_ERROR_INVALID_CLUSTER_SIZE for clusters that do not tile the grid or exceed the limit.
CUresult check_launch_options(const LaunchOptions& options, const unsigned grid[3], const unsigned block[3],
                              unsigned shared_bytes, const FunctionSettings& settings) {
  if (options.cooperative) {
    const std::uint64_t blocks = std::uint64_t{grid[0]} * grid[1] * grid[2];
    const int threads = static_cast<int>(block[0] * block[1] * block[2]);
    const std::uint64_t resident =
        std::uint64_t(resident_blocks(settings, threads, shared_bytes)) * static_cast<std::uint64_t>(kMultiprocessors);
    if (blocks > resident) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  const unsigned* cluster = options.cluster;
  if (cluster[0] == 0 && cluster[1] == 0 && cluster[2] == 0) return CUDA_SUCCESS;
  std::uint64_t cluster_blocks = 1;
  for (int i = 0; i < 3; ++i) {
    if (cluster[i] == 0 || grid[i] % cluster[i] != 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    cluster_blocks *= cluster[i];
  }
  const unsigned limit = settings.non_portable_cluster_allowed ? kMaxClusterBlocks : kMaxPortableClusterBlocks;
  return cluster_blocks <= limit ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CLUSTER_SIZE;
}

CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
                CUstream handle, void** params, void** extra, bool per_thread_default,
                const LaunchOptions& options = {}) {
  Locked l;
  State& st = l.st;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(st, &ctx); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(st);
  // A CUkernel cast to CUfunction launches in the current context (context-independent loading).
  auto* function = reinterpret_cast<CUfunc_st*>(f);
  auto* kernel = reinterpret_cast<CUkern_st*>(f);
  const FunctionSettings* settings = nullptr;
  if (ks.functions.contains(function)) {
    if (function->module->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT;
    function->loaded = true;  // a launch finishes loading a lazily loaded function
    settings = &function->settings;
  } else if (ks.kernels.contains(kernel)) {
    settings = &kernel->settings;
  } else {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!launch_shape_valid(grid, block, shared_bytes, *settings)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_launch_options(options, grid, block, shared_bytes, *settings); rc != CUDA_SUCCESS)
    return rc;
  std::shared_ptr<CUstream_st> stream;
  if (CUresult rc = resolve_stream(st, handle, per_thread_default, &stream); rc != CUDA_SUCCESS) return rc;
  if (st.config.kernels == KernelLaunches::Fail) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  bool captured = false;
  CUgraphNode_st* node = nullptr;  // captured: a kernel node, whose parameters are the launch's
  if (CUresult rc = capture_work(st, stream, NodeKind::Kernel, &captured, {}, &node); rc != CUDA_SUCCESS) return rc;
  if (captured) {
    CUDA_KERNEL_NODE_PARAMS& p = node->kernel;
    p.func = f;
    p.gridDimX = grid[0], p.gridDimY = grid[1], p.gridDimZ = grid[2];
    p.blockDimX = block[0], p.blockDimY = block[1], p.blockDimZ = block[2];
    p.sharedMemBytes = shared_bytes;
    p.kernelParams = params;
    p.extra = extra;
    return CUDA_SUCCESS;
  }
  warn_kernels_do_not_run(st);
  st.device(ctx->device).stats.kernel_launches++;
  submit(st, stream, [] {});
  return CUDA_SUCCESS;
}

CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared_bytes, CUstream stream, void** params, void** extra, bool per_thread,
                       const LaunchOptions& options = {}) {
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  return launch(f, grid, block, shared_bytes, stream, params, extra, per_thread, options);
}

CUresult cooperative_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shared_bytes, CUstream stream, void** params, bool per_thread) {
  LaunchOptions options;
  options.cooperative = true;
  return launch_kernel(f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, nullptr, per_thread, options);
}

// cuLaunchKernelEx: the attributes that change what a launch may do are checked (cooperative, cluster
// dimensions); the others are hints or orderings the simulated device has no use for, accepted when
// their id is known. The last of a repeated attribute wins.
CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool per_thread) {
  if (config == nullptr) {
    Locked l;  // initialisation errors come first
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (config->numAttrs > 0 && config->attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  LaunchOptions options;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& attribute = config->attrs[i];
    const int id = static_cast<int>(attribute.id);
    if (id < 0 || id >= static_cast<int>(CU_LAUNCH_ATTRIBUTE_MAX)) return CUDA_ERROR_INVALID_VALUE;
    if (attribute.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) options.cooperative = attribute.value.cooperative != 0;
    if (attribute.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      options.cluster[0] = attribute.value.clusterDim.x;
      options.cluster[1] = attribute.value.clusterDim.y;
      options.cluster[2] = attribute.value.clusterDim.z;
    }
  }
  return launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                       config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra, per_thread, options);
}

}  // namespace

namespace cudasim {

void warn_kernels_do_not_run(State& st) {
  KernelState& ks = kernels(st);
  if (ks.warned) return;
  ks.warned = true;
  std::fprintf(stderr,
               "cudasim: kernels do not run on the simulated device; launches complete without running "
               "device code (CUDASIM_KERNELS=fail refuses them)\n");
}

KernelState& kernels(State& st) {
  if (!st.kernels) {
    st.kernels = std::make_shared<KernelState>();
    // As the driver: EAGER or LAZY (its default since CUDA 12.2); anything else is the default.
    const char* mode = std::getenv("CUDA_MODULE_LOADING");
    if (mode != nullptr && std::strcmp(mode, "EAGER") == 0) st.kernels->loading_mode = CU_MODULE_EAGER_LOADING;
  }
  return *st.kernels;
}

void unload_context_modules(State& st, CUctx_st* ctx) {
  if (!st.kernels) return;
  KernelState& ks = *st.kernels;
  std::erase_if(ks.functions, [ctx](CUfunc_st* f) { return f->module->ctx == ctx; });
  std::erase_if(ks.modules, [ctx](CUmod_st* m) { return m->ctx == ctx; });
}

}  // namespace cudasim

// --- modules (per context) ---
CUDASIM_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    CUctx_st* ctx = nullptr;
    if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
    if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  std::string file;
  if (CUresult rc = read_image_file(fname, &file); rc != CUDA_SUCCESS) return rc;
  return load_module(module, file.data(), file.size());
}
CUDASIM_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) { return load_module(module, image); }
CUDASIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                           CUjit_option* options, void** optionValues) {
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return load_module(module, image);
}
CUDASIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return load_module(module, fatCubin);
}

namespace {

// Before an unload frees globals: work queued on any stream may still copy to or from them. Whether
// `has_globals(ks)` holds, asked with the lock; CUDA_ERROR_INVALID_HANDLE when it answers nullopt.
template <typename HasGlobals>
CUresult wait_before_freeing_globals(HasGlobals has_globals) {
  bool wait = false;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    const std::optional<bool> answer = has_globals(kernels(l.st));
    if (!answer) return CUDA_ERROR_INVALID_HANDLE;
    wait = *answer;
  }
  if (wait) wait_for_all_queued_work();
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  CUresult waited = wait_before_freeing_globals([hmod](KernelState& ks) -> std::optional<bool> {
    if (!ks.modules.contains(hmod)) return std::nullopt;
    return !hmod->storage.empty();
  });
  if (waited != CUDA_SUCCESS) return waited;
  Locked l;
  KernelState& ks = kernels(l.st);
  if (!ks.modules.erase(hmod)) return CUDA_ERROR_INVALID_HANDLE;  // unloaded by another thread meanwhile
  std::erase_if(ks.functions, [hmod](CUfunc_st* f) { return f->module == hmod; });
  free_globals(l.st, hmod->storage);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ks.modules.contains(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  return entry_point(ks, hmod, hmod->functions, name, hfunc);
}

// --- libraries (context-independent, CUDA 12.0) ---
namespace {

// `limit`: as for image_bytes.
CUresult load_library(CUlibrary* library, const void* code, CUjit_option* jitOptions, void** jitOptionsValues,
                      unsigned numJitOptions, CUlibraryOption* libraryOptions, void** libraryOptionValues,
                      unsigned numLibraryOptions, std::size_t limit) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (numJitOptions > 0 && (jitOptions == nullptr || jitOptionsValues == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (numLibraryOptions > 0 && (libraryOptions == nullptr || libraryOptionValues == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  std::optional<std::string> bytes = image_bytes(code, limit);
  if (!bytes) return CUDA_ERROR_INVALID_IMAGE;
  GlobalDecls globals = image_globals(*bytes);
  *library = kernels(l.st).keep(new CUlib_st{std::move(*bytes), {}, {}, std::move(globals), {}});
  return CUDA_SUCCESS;
}

// The live module function or library kernel `f` names, for the queries that take either.
struct Entry {
  CUfunc_st* function = nullptr;
  CUkern_st* kernel = nullptr;
};
Entry entry_of(KernelState& ks, CUfunction f) {
  if (auto* function = reinterpret_cast<CUfunc_st*>(f); ks.functions.contains(function)) return {function, nullptr};
  if (auto* kernel = reinterpret_cast<CUkern_st*>(f); ks.kernels.contains(kernel)) return {nullptr, kernel};
  return {};
}

}  // namespace

CUmod_st* cudasim::library_module(KernelState& ks, CUlib_st* library, CUctx_st* ctx) {
  if (auto it = library->modules.find(ctx); it != library->modules.end() && ks.modules.contains(it->second))
    return it->second;
  CUmod_st* module = ks.keep(new CUmod_st{ctx, library->image, {}, library->globals, {}});
  library->modules[ctx] = module;
  return module;
}

CUDASIM_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                          void** jitOptionsValues, unsigned int numJitOptions,
                                          CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                          unsigned int numLibraryOptions) {
  return load_library(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                      libraryOptionValues, numLibraryOptions, kUnboundedImage);
}

CUDASIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                              void** jitOptionsValues, unsigned int numJitOptions,
                                              CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                              unsigned int numLibraryOptions) {
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (library == nullptr || fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  std::string file;
  if (CUresult rc = read_image_file(fileName, &file); rc != CUDA_SUCCESS) return rc;
  return load_library(library, file.data(), jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                      libraryOptionValues, numLibraryOptions, file.size());
}

CUDASIM_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  CUresult waited = wait_before_freeing_globals([library](KernelState& ks) -> std::optional<bool> {
    if (!ks.libraries.contains(library)) return std::nullopt;
    bool any = !library->managed.empty();
    for (const auto& entry : library->modules)
      any = any || (ks.modules.contains(entry.second) && !entry.second->storage.empty());
    return any;
  });
  if (waited != CUDA_SUCCESS) return waited;
  Locked l;
  KernelState& ks = kernels(l.st);
  if (!ks.libraries.erase(library)) return CUDA_ERROR_INVALID_HANDLE;  // unloaded by another thread meanwhile
  std::erase_if(ks.kernels, [library](CUkern_st* k) { return k->library == library; });
  for (const auto& entry : library->modules) {  // not a structured binding: clang 14 cannot capture one
    CUmod_st* module = entry.second;
    if (!ks.modules.erase(module)) continue;  // gone with its context already
    std::erase_if(ks.functions, [module](CUfunc_st* f) { return f->module == module; });
    free_globals(l.st, module->storage);
  }
  free_globals(l.st, library->managed);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ks.libraries.contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  return entry_point(ks, library, library->kernels, name, pKernel);
}

// --- queries of modules, libraries and their entry points ---
CUDASIM_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = kernels(l.st).loading_mode;
  return CUDA_SUCCESS;
}

namespace {

// What the module and library queries share: a handle's live set and the entry points it gave out.
std::unordered_set<CUmod_st*>& live(KernelState& ks, CUmod_st*) { return ks.modules; }
std::unordered_set<CUlib_st*>& live(KernelState& ks, CUlib_st*) { return ks.libraries; }
std::map<std::string, CUfunc_st*>& entries(CUmod_st* module) { return module->functions; }
std::map<std::string, CUkern_st*>& entries(CUlib_st* library) { return library->kernels; }

// cuModuleGetFunctionCount, cuLibraryGetKernelCount: the entry points the image names.
template <typename Owner>
CUresult entry_count(unsigned* count, Owner* owner) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!live(kernels(l.st), owner).contains(owner)) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(image_entry_names(owner->image).size());
  return CUDA_SUCCESS;
}

// cuModuleEnumerateFunctions, cuLibraryEnumerateKernels: the first `capacity` of them, in image
// order. Module functions handed out this way start unloaded (lazy loading, cuFuncIsLoaded).
template <typename Owner, typename Handle>
CUresult enumerate_entries(Handle* out, unsigned capacity, Owner* owner) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!live(ks, owner).contains(owner)) return CUDA_ERROR_INVALID_HANDLE;
  const std::vector<std::string> names = image_entry_names(owner->image);
  for (std::size_t i = 0; i < names.size() && i < capacity; ++i)
    if (CUresult rc = entry_point(ks, owner, entries(owner), names[i].c_str(), &out[i], false); rc != CUDA_SUCCESS)
      return rc;
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) { return entry_count(count, mod); }

CUDASIM_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int numFunctions, CUmodule mod) {
  return enumerate_entries(functions, numFunctions, mod);
}

CUDASIM_EXPORT CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) { return entry_count(count, lib); }

CUDASIM_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel* kernels_out, unsigned int numKernels, CUlibrary lib) {
  return enumerate_entries(kernels_out, numKernels, lib);
}

CUDASIM_EXPORT CUresult cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ks.libraries.contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  *pMod = library_module(ks, library, ctx);
  return CUDA_SUCCESS;
}

// The simulated devices have no unified function pointers (CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS
// reads 0), for which cuda.h allows CUDA_ERROR_NOT_FOUND for every symbol.
CUDASIM_EXPORT CUresult cuLibraryGetUnifiedFunction(void** fptr, CUlibrary library, const char* symbol) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (fptr == nullptr || symbol == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!kernels(l.st).libraries.contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_NOT_FOUND;
}

CUDASIM_EXPORT CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!kernels(l.st).kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *pLib = kernel->library;
  return CUDA_SUCCESS;
}

// A library kernel cast to CUfunction belongs to its library's module in the current context.
CUDASIM_EXPORT CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  KernelState& ks = kernels(l.st);
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Entry entry = entry_of(ks, hfunc);
  if (entry.function != nullptr) {
    *hmod = entry.function->module;
    return CUDA_SUCCESS;
  }
  if (entry.kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  *hmod = library_module(ks, entry.kernel->library, ctx);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Entry entry = entry_of(kernels(l.st), function);
  if (entry.function == nullptr && entry.kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const bool loaded = entry.kernel != nullptr || entry.function->loaded;  // kernels load with their library
  *state = loaded ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuFuncLoad(CUfunction function) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  const Entry entry = entry_of(kernels(l.st), function);
  if (entry.function == nullptr && entry.kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (entry.function != nullptr) entry.function->loaded = true;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                           size_t* paramSize) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  const Entry entry = entry_of(kernels(l.st), func);
  if (entry.function != nullptr)
    return param_info(entry.function->module->image, entry.function->name, paramIndex, paramOffset, paramSize);
  if (entry.kernel != nullptr)
    return param_info(entry.kernel->library->image, entry.kernel->name, paramIndex, paramOffset, paramSize);
  return CUDA_ERROR_INVALID_HANDLE;
}

CUDASIM_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                             size_t* paramSize) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (!kernels(l.st).kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  return param_info(kernel->library->image, kernel->name, paramIndex, paramOffset, paramSize);
}

// --- launches ---
CUDASIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void** kernelParams, void** extra) {
  return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, extra, false);
}
CUDASIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                            void** kernelParams, void** extra) {
  return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, extra, true);
}
CUDASIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                         void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}
CUDASIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                              void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}
CUDASIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                  unsigned int gridDimZ, unsigned int blockDimX,
                                                  unsigned int blockDimY, unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void** kernelParams) {
  return cooperative_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                            kernelParams, false);
}
CUDASIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                       unsigned int gridDimZ, unsigned int blockDimX,
                                                       unsigned int blockDimY, unsigned int blockDimZ,
                                                       unsigned int sharedMemBytes, CUstream hStream,
                                                       void** kernelParams) {
  return cooperative_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                            kernelParams, true);
}

// --- cuLaunchCooperativeKernelMultiDevice (deprecated) ---
namespace {

constexpr unsigned kMultiDeviceLaunchFlags =
    CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC | CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;

// One entry of a multi-device launch, checked: its stream, and the function's code (image and name)
// and settings.
struct MultiDeviceEntry {
  std::shared_ptr<CUstream_st> stream;
  const std::string* image = nullptr;
  const std::string* name = nullptr;
  const FunctionSettings* settings = nullptr;
  CUfunc_st* function = nullptr;  // null for a CUkernel
};

CUresult check_multi_device_entry(State& st, const CUDA_LAUNCH_PARAMS& p, MultiDeviceEntry* out) {
  // A stream made by cuStreamCreate*, never the NULL, legacy or per-thread stream.
  if (p.hStream == nullptr || p.hStream == CU_STREAM_LEGACY || p.hStream == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_VALUE;
  auto stream = st.streams.find(p.hStream);
  if (stream == st.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  out->stream = stream->second;
  if (out->stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  KernelState& ks = kernels(st);
  auto* function = reinterpret_cast<CUfunc_st*>(p.function);
  auto* kernel = reinterpret_cast<CUkern_st*>(p.function);
  if (ks.functions.contains(function)) {
    // The function's context must be the stream's.
    if (function->module->ctx != out->stream->ctx) return CUDA_ERROR_INVALID_CONTEXT;
    *out = {out->stream, &function->module->image, &function->name, &function->settings, function};
  } else if (ks.kernels.contains(kernel)) {  // a CUkernel launches in the stream's context
    *out = {out->stream, &kernel->library->image, &kernel->name, &kernel->settings, nullptr};
  } else {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const unsigned grid[3] = {p.gridDimX, p.gridDimY, p.gridDimZ};
  const unsigned block[3] = {p.blockDimX, p.blockDimY, p.blockDimZ};
  if (!launch_shape_valid(grid, block, p.sharedMemBytes, *out->settings)) return CUDA_ERROR_INVALID_VALUE;
  LaunchOptions cooperative;
  cooperative.cooperative = true;
  return check_launch_options(cooperative, grid, block, p.sharedMemBytes, *out->settings);
}

bool same_shape(const CUDA_LAUNCH_PARAMS& a, const CUDA_LAUNCH_PARAMS& b) {
  return a.gridDimX == b.gridDimX && a.gridDimY == b.gridDimY && a.gridDimZ == b.gridDimZ &&
         a.blockDimX == b.blockDimX && a.blockDimY == b.blockDimY && a.blockDimZ == b.blockDimZ &&
         a.sharedMemBytes == b.sharedMemBytes;
}

// One cooperative kernel per entry, on its stream, each on a different device, all of the same code
// and shape. Unless the flags say otherwise, each kernel starts after the work queued before it on
// every stream of the launch, and later work on each stream waits for every kernel of the launch.
CUresult launch_multi_device(const CUDA_LAUNCH_PARAMS* list, unsigned count, unsigned flags) {
  Locked l;
  State& st = l.st;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (list == nullptr || count == 0 || count > st.devices.size() || (flags & ~kMultiDeviceLaunchFlags) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::vector<MultiDeviceEntry> entries(count);
  std::set<int> devices;
  for (unsigned i = 0; i < count; ++i) {
    if (CUresult rc = check_multi_device_entry(st, list[i], &entries[i]); rc != CUDA_SUCCESS) return rc;
    if (!devices.insert(context_device(entries[i].stream->ctx)).second) return CUDA_ERROR_INVALID_VALUE;
    if (*entries[i].image != *entries[0].image || *entries[i].name != *entries[0].name ||
        !same_shape(list[i], list[0]))
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (st.config.kernels == KernelLaunches::Fail) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  warn_kernels_do_not_run(st);
  // Waits of one stream for another's sequence number, queued directly: no pair waits in a cycle, as
  // every kernel waits only for work queued before any kernel of the launch.
  auto wait_all = [&entries](std::size_t i, const std::vector<std::uint64_t>& seqs) {
    for (std::size_t j = 0; j < entries.size(); ++j) {
      if (j == i || entries[j].stream->reached(seqs[j])) continue;
      entries[i].stream->enqueue([other = entries[j].stream, seq = seqs[j]] { other->wait_until(seq); });
    }
  };
  std::vector<std::uint64_t> before(count), kernels_done(count);
  for (unsigned i = 0; i < count; ++i) before[i] = entries[i].stream->last_submitted();
  for (unsigned i = 0; i < count; ++i) {
    if ((flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC) == 0) wait_all(i, before);
    if (entries[i].function != nullptr) entries[i].function->loaded = true;
    st.device(context_device(entries[i].stream->ctx)).stats.kernel_launches++;
    kernels_done[i] = submit(st, entries[i].stream, [] {});
  }
  if ((flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC) == 0) {
    for (unsigned i = 0; i < count; ++i) wait_all(i, kernels_done);
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUDASIM_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                             unsigned int numDevices, unsigned int flags) {
  return launch_multi_device(launchParamsList, numDevices, flags);
}

// --- the deprecated launches, with the shape, shared memory and parameters set beforehand ---
namespace {

CUresult legacy_launch(CUfunction f, int grid_width, int grid_height, CUstream stream) {
  if (grid_width <= 0 || grid_height <= 0) {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned block[3] = {0, 0, 0};
  unsigned shared = 0;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    KernelState& ks = kernels(l.st);
    const FunctionSettings* settings = nullptr;
    if (auto* function = reinterpret_cast<CUfunc_st*>(f); ks.functions.contains(function)) settings = &function->settings;
    else if (auto* kernel = reinterpret_cast<CUkern_st*>(f); ks.kernels.contains(kernel)) settings = &kernel->settings;
    else return CUDA_ERROR_INVALID_HANDLE;
    std::copy(settings->block_shape, settings->block_shape + 3, block);
    shared = settings->shared_size;
  }
  // No block shape set: a block of 0 threads, refused by the launch as CUDA_ERROR_INVALID_VALUE.
  const unsigned grid[3] = {static_cast<unsigned>(grid_width), static_cast<unsigned>(grid_height), 1};
  return launch(f, grid, block, shared, stream, nullptr, nullptr, false);
}

}  // namespace

CUDASIM_EXPORT CUresult cuLaunch(CUfunction f) { return legacy_launch(f, 1, 1, nullptr); }
CUDASIM_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  return legacy_launch(f, grid_width, grid_height, nullptr);
}
CUDASIM_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
  return legacy_launch(f, grid_width, grid_height, hStream);
}
