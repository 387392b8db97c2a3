// Asks the driver's cuGetProcAddress (both signatures) for a set of entry points and prints, for
// each answer, the object and symbol it lies in (dladdr), one line per request:
//   <getter> <name> <version> <flags> -> <object> <symbol>
// Built twice: looking the driver up as the CUDA runtimes do (dlopen("libcuda.so.1") + dlsym of
// cuGetProcAddress_v2 / cuGetProcAddress), and linked against libcuda directly (INTERPOSE_LINKED).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {

struct Request {
  const char* name;
  int version;
  cuuint64_t flags;
};

constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

constexpr Request kRequests[] = {
    {"cuMemAlloc", 13000, kLegacy},
    {"cuMemAlloc", 13000, kPerThread},
    {"cuMemFree", 13000, kLegacy},
    {"cuMemAllocPitch", 13000, kLegacy},
    {"cuMemGetInfo", 13000, kLegacy},
    {"cuMemAllocAsync", 13000, kLegacy},
    {"cuMemAllocAsync", 13000, kPerThread},
    {"cuMemFreeAsync", 13000, kLegacy},
    {"cuMemFreeAsync", 13000, kPerThread},
    {"cuMemAllocFromPoolAsync", 13000, kLegacy},
    {"cuMemAllocFromPoolAsync", 13000, kPerThread},
    {"cuCtxSynchronize", 12000, kLegacy},
    {"cuCtxSynchronize", 13000, kLegacy},
    {"cuCtxDestroy", 13000, kLegacy},
    {"cuDevicePrimaryCtxReset", 13000, kLegacy},
    {"cuIpcGetMemHandle", 13000, kLegacy},
    {"cuGetProcAddress", 13000, kLegacy},
    {"cuGetProcAddress", 11030, kLegacy},
    {"cuMemGetAddressRange", 13000, kLegacy},
    {"cuPointerGetAttributes", 13000, kLegacy},
    {"cuCtxEnablePeerAccess", 13000, kLegacy},
    // Not hooked: these must come back from the driver untouched.
    {"cuMemcpyHtoD", 13000, kLegacy},
    {"cuMemcpyHtoD", 13000, kPerThread},
    {"cuStreamSynchronize", 13000, kPerThread},
    {"cuInit", 13000, kLegacy},
    {"cuMemAlloc", 2000, kLegacy},
};

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

void print_answer(const char* getter, const Request& request, CUresult result, void* entry) {
  std::printf("%s %s %d %llu -> ", getter, request.name, request.version,
              static_cast<unsigned long long>(request.flags));
  Dl_info info{};
  if (result != CUDA_SUCCESS || entry == nullptr) {
    std::printf("error %d\n", static_cast<int>(result));
  } else if (dladdr(entry, &info) == 0 || info.dli_fname == nullptr) {
    std::printf("unknown unknown\n");
  } else {
    std::printf("%s %s\n", base_name(info.dli_fname),
                info.dli_sname != nullptr && info.dli_saddr == entry ? info.dli_sname : "unknown");
  }
}

}  // namespace

#ifdef INTERPOSE_LINKED
extern "C" CUresult CUDAAPI cuGetProcAddress_v11030(const char*, void**, int,
                                                    cuuint64_t) __asm__("cuGetProcAddress");
#endif

int main() {
#ifdef INTERPOSE_LINKED
  PFN_cuGetProcAddress_v12000 get_v2 = &cuGetProcAddress_v2;
  PFN_cuGetProcAddress_v11030 get_v1 = &cuGetProcAddress_v11030;
#else
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 2;
  }
  auto get_v2 = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  auto get_v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(driver, "cuGetProcAddress"));
  if (get_v2 == nullptr || get_v1 == nullptr) {
    std::printf("dlsym failed\n");
    return 2;
  }
  print_answer("dlsym", Request{"cuGetProcAddress_v2", 0, 0}, CUDA_SUCCESS,
               reinterpret_cast<void*>(get_v2));
  print_answer("dlsym", Request{"cuGetProcAddress", 0, 0}, CUDA_SUCCESS,
               reinterpret_cast<void*>(get_v1));
#endif
  for (const Request& request : kRequests) {
    void* entry = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult result = get_v2(request.name, &entry, request.version, request.flags, &status);
    print_answer("v2", request, result, entry);
    entry = nullptr;
    result = get_v1(request.name, &entry, request.version, request.flags);
    print_answer("v1", request, result, entry);
  }
  return 0;
}
