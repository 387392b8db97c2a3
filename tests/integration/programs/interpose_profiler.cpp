// A preloaded "profiler" that itself calls dlsym and the driver from inside functions the shim uses
// while it resolves driver entry points (dladdr, dladdr1). It must neither hang nor recurse without
// end when loaded after the shim. Every call into it is counted and printed at exit.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>

namespace {

std::atomic<int> g_calls{0};
thread_local bool t_inside = false;

// What a profiler does on every call it sees: look the driver up and ask it something.
void probe_driver() {
  if (t_inside) return;
  t_inside = true;
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
    auto get = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
    void* entry = nullptr;
    if (get != nullptr)
      get("cuMemAlloc", &entry, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr);
    dlclose(driver);
  }
  t_inside = false;
}

struct Report {
  ~Report() { std::fprintf(stderr, "profiler: %d calls seen\n", g_calls.load()); }
} g_report;

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int dladdr(const void* address, Dl_info* info) {
  ++g_calls;
  probe_driver();
  using Dladdr = int (*)(const void*, Dl_info*);
  static const auto real = reinterpret_cast<Dladdr>(dlsym(RTLD_NEXT, "dladdr"));
  return real != nullptr ? real(address, info) : 0;
}

__attribute__((visibility("default"))) int dladdr1(const void* address, Dl_info* info, void** extra,
                                                   int flags) {
  ++g_calls;
  probe_driver();
  using Dladdr1 = int (*)(const void*, Dl_info*, void**, int);
  static const auto real = reinterpret_cast<Dladdr1>(dlsym(RTLD_NEXT, "dladdr1"));
  return real != nullptr ? real(address, info, extra, flags) : 0;
}
}
