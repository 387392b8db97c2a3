// The runtime's interface table ({6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9}): how NVIDIA's runtime
// loads the fat binaries nvcc's host code registers, and finds a device's primary context.
#include "export_tables.h"

#include "../state.h"

#include <atomic>
#include <cstdio>

using namespace cudasim;
using namespace cudasim::export_tables;

namespace {

constexpr Table kTable = Table::CudartInterface;

// Slot 1: a module, in the current context, from nvcc's fat-binary wrapper (__fatBinC_Wrapper_t),
// as cuModuleLoadData loads it.
CUresult module_from_wrapper(CUmodule* module, const void* wrapper) {
  if (module == nullptr || wrapper == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadData(module, wrapper);
}

// Slot 2: the device's primary context, made if the device has none yet but neither retained nor
// activated: NVIDIA's runtime asks for every device's at start-up (cudaGetDeviceCount activates
// none), makes one current and retains it itself when it needs it.
CUresult primary_context(CUcontext* context, CUdevice device) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Locked l;
  if (CUresult rc = device_status(l, device); rc != CUDA_SUCCESS) return rc;
  *context = primary_context_object(l.st, device);
  return CUDA_SUCCESS;
}

// The two extended module loads take two pointers and a count beside the image, which the public
// record ties to __cudaRegisterHostVar without saying what they hold. With none given the load is
// the plain one; with some, not simulated (said once).
CUresult refuse_host_variables(std::size_t slot) {
  static std::atomic<bool> said[2];
  if (!said[slot == 6 ? 0 : 1].exchange(true)) {
    std::fprintf(stderr,
                 "cudasim: cuGetExportTable: entry %zu of table CUDART_INTERFACE was given host variables, "
                 "which are not simulated; it returns CUDA_ERROR_NOT_SUPPORTED\n",
                 slot);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Slot 6: slot 1 with the extra arguments.
CUresult module_from_wrapper_ext(CUmodule* module, const void* wrapper, void* extra1, void* extra2, unsigned count) {
  if (extra1 != nullptr || extra2 != nullptr || count != 0) return refuse_host_variables(6);
  return module_from_wrapper(module, wrapper);
}

// Slot 8: a module from a fat binary itself (its own header, not nvcc's wrapper), image first.
CUresult module_from_fat_binary_ext(const void* fat_binary, CUmodule* module, void* extra1, void* extra2,
                                    unsigned count) {
  if (extra1 != nullptr || extra2 != nullptr || count != 0) return refuse_host_variables(8);
  if (module == nullptr || fat_binary == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuModuleLoadData(module, fat_binary);
}

// Slot 7: takes one pointer-sized value and has no effect the public record could observe.
CUresult no_effect(std::uintptr_t) { return CUDA_SUCCESS; }

// Slot 12: loads the JIT compilers (PTX compiler, NVVM) in NVIDIA's driver; the simulator compiles
// nothing, so there is nothing to load.
CUresult load_compilers() { return CUDA_SUCCESS; }

}  // namespace

const TableInfo& cudasim::export_tables::cudart_interface() {
  return define_table<kTable, 13>("CUDART_INTERFACE", uuid("{6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9}"), true, [](auto& b) {
    b.template set<1, module_from_wrapper>(Knowledge::Known, "load a module in the current context from nvcc's fat-binary wrapper");
    b.template set<2, primary_context>(Knowledge::Known, "a device's primary context, neither retained nor activated");
    b.template set<6, module_from_wrapper_ext>(Knowledge::Inferred,
                                      "slot 1 with host variables (two pointers and a count; only none simulated)");
    b.template set<7, no_effect>(Knowledge::Inferred, "takes one value; no observable effect");
    b.template set<8, module_from_fat_binary_ext>(Knowledge::Inferred,
                                         "load a module from a fat binary's own header, with host variables as slot 6");
    b.template set<12, load_compilers>(Knowledge::Inferred, "load the JIT compilers (nothing to load here)");
  });
}
