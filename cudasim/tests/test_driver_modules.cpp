// The simulated driver's JIT linker, modules and libraries loaded from files, and the queries of
// modules, libraries and their entry points (counts, enumeration, lazy loading, owners).
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

using namespace driver_test;
using runtime_test::FakeFatbin;

namespace {

const char kPtxA[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry first_kernel()\n{\n\tret;\n}\n";
const char kPtxB[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry second_kernel()\n{\n\tret;\n}\n";

// A file holding `bytes` for the lifetime of the object.
struct TempFile {
  std::string path;
  TempFile(const char* tag, const void* bytes, std::size_t size)
      : path("/tmp/cudasim-linker-" + std::to_string(getpid()) + "-" + tag) {
    std::ofstream(path, std::ios::binary).write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  }
  ~TempFile() { unlink(path.c_str()); }
};

CUresult add_ptx(CUlinkState link, const char* ptx, const char* name = "input.ptx") {
  return cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(ptx), std::strlen(ptx) + 1, name, 0, nullptr,
                       nullptr);
}

}  // namespace

TEST_CASE("the linker joins PTX, fat binaries and files into one loadable image", "[driver][modules]") {
  primary_context();
  char info[256] = {}, error[256] = {};
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
  void* values[] = {info, reinterpret_cast<void*>(std::uintptr_t{sizeof info}), error,
                    reinterpret_cast<void*>(std::uintptr_t{sizeof error}), nullptr};
  CUlinkState link = nullptr;
  REQUIRE(cuLinkCreate(5, options, values, &link) == CUDA_SUCCESS);
  CHECK(add_ptx(link, kPtxA) == CUDA_SUCCESS);
  FakeFatbin fatbin("_Z10fat_kernelv");
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_FATBINARY, fatbin.bytes.data(), fatbin.bytes.size(), "fat", 0, nullptr,
                      nullptr) == CUDA_SUCCESS);
  TempFile ptx_file("b.ptx", kPtxB, std::strlen(kPtxB));  // a PTX file need not hold its NUL
  CUjit_option per_input[] = {CU_JIT_OPTIMIZATION_LEVEL};
  void* per_input_values[] = {reinterpret_cast<void*>(std::uintptr_t{3})};
  CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, ptx_file.path.c_str(), 1, per_input, per_input_values) ==
        CUDA_SUCCESS);

  void* cubin = nullptr;
  size_t size = 0;
  REQUIRE(cuLinkComplete(link, &cubin, &size) == CUDA_SUCCESS);
  REQUIRE(cubin != nullptr);
  CHECK(size > std::strlen(kPtxA) + std::strlen(kPtxB));
  CHECK(std::memcmp(cubin, "\x7f" "ELF", 4) == 0);
  CHECK(std::string(info).find("linked 3 input") != std::string::npos);
  CHECK(reinterpret_cast<std::uintptr_t>(values[1]) == std::strlen(info) + 1);  // bytes written, with the NUL
  CHECK(error[0] == '\0');
  void* again = nullptr;
  CHECK(cuLinkComplete(link, &again, nullptr) == CUDA_SUCCESS);  // not destroyed by completing
  CHECK(again == cubin);

  // The image is a module (and a library) with every input's entry points.
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, cubin) == CUDA_SUCCESS);
  CUfunction f = nullptr;
  for (const char* name : {"first_kernel", "second_kernel", "_Z10fat_kernelv"}) {
    INFO(name);
    CHECK(cuModuleGetFunction(&f, module, name) == CUDA_SUCCESS);
  }
  CHECK(cuModuleGetFunction(&f, module, "third_kernel") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  CUlibrary library = nullptr;
  CHECK(cuLibraryLoadData(&library, cubin, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  CHECK(cuLibraryGetKernel(&kernel, library, "second_kernel") == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);

  CHECK(add_ptx(link, kPtxA) == CUDA_ERROR_INVALID_HANDLE);  // no longer pending once completed
  CHECK(cuLinkDestroy(link) == CUDA_SUCCESS);
  CHECK(cuLinkDestroy(link) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLinkComplete(link, &cubin, &size) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(add_ptx(link, kPtxA) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("the linker refuses inputs that are not what their type says, with an error log", "[driver][modules]") {
  primary_context();
  char error[256] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error, reinterpret_cast<void*>(std::uintptr_t{sizeof error})};
  CUlinkState link = nullptr;
  REQUIRE(cuLinkCreate_v2(2, options, values, &link) == CUDA_SUCCESS);

  char not_ptx[] = "this is not PTX";
  CHECK(cuLinkAddData_v2(link, CU_JIT_INPUT_PTX, not_ptx, sizeof not_ptx, "bad.ptx", 0, nullptr, nullptr) ==
        CUDA_ERROR_INVALID_PTX);
  CHECK(std::string(error).find("bad.ptx") != std::string::npos);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_CUBIN, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 0, nullptr, nullptr) ==
        CUDA_ERROR_INVALID_IMAGE);  // PTX is no cubin
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_FATBINARY, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 0, nullptr,
                      nullptr) == CUDA_ERROR_INVALID_IMAGE);
  FakeFatbin fatbin("k");
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_FATBINARY, fatbin.bytes.data(), fatbin.bytes.size() - 1, "short", 0,
                      nullptr, nullptr) == CUDA_ERROR_INVALID_IMAGE);  // its header claims more than given
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_LIBRARY, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 0, nullptr,
                      nullptr) == CUDA_ERROR_INVALID_IMAGE);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_OBJECT, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 0, nullptr,
                      nullptr) == CUDA_ERROR_INVALID_IMAGE);
  CHECK(cuLinkAddData(link, CU_JIT_NUM_INPUT_TYPES, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 0, nullptr,
                      nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, nullptr, 10, "x", 0, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtxA), 0, "x", 0, nullptr, nullptr) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 1, nullptr, nullptr) ==
        CUDA_ERROR_INVALID_VALUE);
  CUjit_option output_option[] = {CU_JIT_WALL_TIME};  // output options belong to cuLinkCreate only
  void* output_value[] = {nullptr};
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtxA), sizeof kPtxA, "x", 1, output_option,
                      output_value) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkAddFile_v2(link, CU_JIT_INPUT_PTX, "/nonexistent/cudasim.ptx", 0, nullptr, nullptr) ==
        CUDA_ERROR_FILE_NOT_FOUND);
  CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, nullptr, 0, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);

  void* cubin = nullptr;
  CHECK(cuLinkComplete(link, &cubin, nullptr) == CUDA_ERROR_INVALID_VALUE);  // nothing was added
  CHECK(add_ptx(link, kPtxA) == CUDA_SUCCESS);
  CHECK(cuLinkComplete(link, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkComplete(link, &cubin, nullptr) == CUDA_SUCCESS);
  CHECK(cuLinkDestroy(link) == CUDA_SUCCESS);

  CUjit_option unknown[] = {static_cast<CUjit_option>(CU_JIT_NUM_OPTIONS)};
  void* unknown_value[] = {nullptr};
  CHECK(cuLinkCreate(1, unknown, unknown_value, &link) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkCreate(0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLinkDestroy(nullptr) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("the linker needs a current context", "[driver][modules]") {
  int rc = in_child([] {
    CHILD_CHECK(cuInit(0) == CUDA_SUCCESS);
    CUlinkState link = nullptr;
    CHILD_CHECK(cuLinkCreate(0, nullptr, nullptr, &link) == CUDA_ERROR_INVALID_CONTEXT);
    return 0;
  });
  CHECK(rc == 0);
  int before_init = in_child([] {
    CUlinkState link = nullptr;
    CHILD_CHECK(cuLinkCreate(0, nullptr, nullptr, &link) == CUDA_ERROR_NOT_INITIALIZED);
    return 0;
  });
  CHECK(before_init == 0);
}

TEST_CASE("cuModuleLoad loads a module from a file", "[driver][modules]") {
  primary_context();
  TempFile ptx_file("a.ptx", kPtxA, std::strlen(kPtxA));
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoad(&module, ptx_file.path.c_str()) == CUDA_SUCCESS);
  CUfunction f = nullptr;
  CHECK(cuModuleGetFunction(&f, module, "first_kernel") == CUDA_SUCCESS);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);

  FakeFatbin fatbin("_Z1kv");
  TempFile fat_file("k.fatbin", fatbin.bytes.data(), fatbin.bytes.size());
  REQUIRE(cuModuleLoad(&module, fat_file.path.c_str()) == CUDA_SUCCESS);
  CHECK(cuModuleGetFunction(&f, module, "_Z1kv") == CUDA_SUCCESS);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);

  // nvcc's wrapper holds a pointer, meaningless in a file; a fat binary cut short is no image either.
  TempFile wrapper_file("w.bin", &fatbin.wrapper, sizeof fatbin.wrapper);
  CHECK(cuModuleLoad(&module, wrapper_file.path.c_str()) == CUDA_ERROR_INVALID_IMAGE);
  TempFile short_file("s.fatbin", fatbin.bytes.data(), fatbin.bytes.size() - 1);
  CHECK(cuModuleLoad(&module, short_file.path.c_str()) == CUDA_ERROR_INVALID_IMAGE);
  CHECK(cuModuleLoad(&module, "/nonexistent/cudasim.cubin") == CUDA_ERROR_FILE_NOT_FOUND);
  CHECK(cuModuleLoad(&module, "/tmp") == CUDA_ERROR_FILE_NOT_FOUND);
  CHECK(cuModuleLoad(nullptr, ptx_file.path.c_str()) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuModuleLoad(&module, nullptr) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("modules and libraries count and enumerate their entry points", "[driver][modules]") {
  primary_context();
  const char ptx[] = ".version 8.0\n.target sm_80\n.visible .entry alpha(\n.param .u64 p\n)\n{ ret; }\n"
                     ".visible .entry beta()\n{ ret; }\n.func helper()\n{ ret; }\n";
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, ptx) == CUDA_SUCCESS);
  unsigned count = 0;
  CHECK(cuModuleGetFunctionCount(&count, module) == CUDA_SUCCESS);
  CHECK(count == 2);  // entries only, not .func
  CUfunction functions[3] = {};
  CHECK(cuModuleEnumerateFunctions(functions, 3, module) == CUDA_SUCCESS);
  CHECK(functions[2] == nullptr);  // only `count` written
  CUfunction alpha = nullptr;
  CHECK(cuModuleGetFunction(&alpha, module, "alpha") == CUDA_SUCCESS);
  CHECK(functions[0] == alpha);  // the same handle for the same entry
  const char* name = nullptr;
  CHECK(cuFuncGetName(&name, functions[1]) == CUDA_SUCCESS);
  CHECK(std::string(name) == "beta");
  CUfunction one[1] = {};
  CHECK(cuModuleEnumerateFunctions(one, 1, module) == CUDA_SUCCESS);
  CHECK(one[0] == alpha);
  CHECK(cuModuleGetFunctionCount(nullptr, module) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuModuleEnumerateFunctions(nullptr, 1, module) == CUDA_ERROR_INVALID_VALUE);

  CUmodule owner = nullptr;
  CHECK(cuFuncGetModule(&owner, functions[1]) == CUDA_SUCCESS);
  CHECK(owner == module);
  CHECK(cuFuncGetModule(nullptr, alpha) == CUDA_ERROR_INVALID_VALUE);

  // A fat binary's kernels are the names of its .nv.info.<kernel> sections.
  FakeFatbin fatbin(std::string(".nv.info._Z3fooPf\0_Z3fooPf", 26));
  CUlibrary library = nullptr;
  REQUIRE(cuLibraryLoadData(&library, &fatbin.wrapper, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CHECK(cuLibraryGetKernelCount(&count, library) == CUDA_SUCCESS);
  CHECK(count == 1);
  CUkernel kernels[2] = {};
  CHECK(cuLibraryEnumerateKernels(kernels, 2, library) == CUDA_SUCCESS);
  CHECK(cuKernelGetName(&name, kernels[0]) == CUDA_SUCCESS);
  CHECK(std::string(name) == "_Z3fooPf");
  CUlibrary kernel_library = nullptr;
  CHECK(cuKernelGetLibrary(&kernel_library, kernels[0]) == CUDA_SUCCESS);
  CHECK(kernel_library == library);
  CHECK(cuKernelGetLibrary(nullptr, kernels[0]) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLibraryGetKernelCount(nullptr, library) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLibraryEnumerateKernels(nullptr, 1, library) == CUDA_ERROR_INVALID_VALUE);

  // The library's module in this context: one per context, the one its kernels belong to here.
  CUmodule library_module = nullptr, again = nullptr;
  CHECK(cuLibraryGetModule(&library_module, library) == CUDA_SUCCESS);
  CHECK(cuLibraryGetModule(&again, library) == CUDA_SUCCESS);
  CHECK(library_module == again);
  CHECK(cuFuncGetModule(&owner, reinterpret_cast<CUfunction>(kernels[0])) == CUDA_SUCCESS);
  CHECK(owner == library_module);
  CUfunction from_module = nullptr;
  CHECK(cuModuleGetFunction(&from_module, library_module, "_Z3fooPf") == CUDA_SUCCESS);
  CHECK(cuLibraryGetModule(nullptr, library) == CUDA_ERROR_INVALID_VALUE);
  void* unified = nullptr;  // no device has unified function pointers
  CHECK(cuLibraryGetUnifiedFunction(&unified, library, "_Z3fooPf") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuLibraryGetUnifiedFunction(nullptr, library, "_Z3fooPf") == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLibraryGetUnifiedFunction(&unified, library, nullptr) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);  // its modules and handles go with it
  CHECK(cuModuleGetFunctionCount(&count, library_module) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuFuncGetModule(&owner, from_module) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuKernelGetLibrary(&kernel_library, kernels[0]) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLibraryGetKernelCount(&count, library) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLibraryEnumerateKernels(kernels, 2, library) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLibraryGetModule(&again, library) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLibraryGetUnifiedFunction(&unified, library, "_Z3fooPf") == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);
  CHECK(cuModuleGetFunctionCount(&count, module) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuModuleEnumerateFunctions(functions, 3, module) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuFuncGetModule(&owner, alpha) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("lazy loading: enumerated functions load on cuFuncLoad or their first launch", "[driver][modules]") {
  for (const char* mode : {"LAZY", "EAGER", "unset"}) {
    INFO(mode);
    int rc = in_child([mode] {
      if (std::strcmp(mode, "unset") != 0) setenv("CUDA_MODULE_LOADING", mode, 1);
      const bool eager = std::strcmp(mode, "EAGER") == 0;
      CHILD_CHECK(start_primary_context());
      CUmoduleLoadingMode loading{};
      CHILD_CHECK(cuModuleGetLoadingMode(&loading) == CUDA_SUCCESS);
      CHILD_CHECK(loading == (eager ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING));
      CHILD_CHECK(cuModuleGetLoadingMode(nullptr) == CUDA_ERROR_INVALID_VALUE);
      const char ptx[] = ".version 8.0\n.target sm_80\n.entry a()\n{ ret; }\n.entry b()\n{ ret; }\n";
      CUmodule module = nullptr;
      CHILD_CHECK(cuModuleLoadData(&module, ptx) == CUDA_SUCCESS);
      CUfunction f[2] = {};
      CHILD_CHECK(cuModuleEnumerateFunctions(f, 2, module) == CUDA_SUCCESS);
      const CUfunctionLoadingState before = eager ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
      CUfunctionLoadingState state{};
      for (CUfunction function : f) {
        CHILD_CHECK(cuFuncIsLoaded(&state, function) == CUDA_SUCCESS);
        CHILD_CHECK(state == before);
      }
      CHILD_CHECK(cuFuncLoad(f[0]) == CUDA_SUCCESS);
      CHILD_CHECK(cuFuncLoad(f[0]) == CUDA_SUCCESS);  // loading a loaded function changes nothing
      CHILD_CHECK(cuLaunchKernel(f[1], 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_SUCCESS);
      for (CUfunction function : f) {
        CHILD_CHECK(cuFuncIsLoaded(&state, function) == CUDA_SUCCESS);
        CHILD_CHECK(state == CU_FUNCTION_LOADING_STATE_LOADED);
      }
      CUfunction got = nullptr;  // cuModuleGetFunction hands out loaded functions
      CUmodule second = nullptr;
      CHILD_CHECK(cuModuleLoadData(&second, ptx) == CUDA_SUCCESS);
      CHILD_CHECK(cuModuleGetFunction(&got, second, "b") == CUDA_SUCCESS);
      CHILD_CHECK(cuFuncIsLoaded(&state, got) == CUDA_SUCCESS && state == CU_FUNCTION_LOADING_STATE_LOADED);
      CHILD_CHECK(cuFuncIsLoaded(nullptr, got) == CUDA_ERROR_INVALID_VALUE);
      CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
      CHILD_CHECK(cuModuleUnload(module) == CUDA_SUCCESS);
      CHILD_CHECK(cuFuncIsLoaded(&state, f[0]) == CUDA_ERROR_INVALID_HANDLE);
      CHILD_CHECK(cuFuncLoad(f[0]) == CUDA_ERROR_INVALID_HANDLE);
      CHILD_CHECK(cuFuncLoad(nullptr) == CUDA_ERROR_INVALID_HANDLE);
      return 0;
    });
    CHECK(rc == 0);
  }
}

TEST_CASE("cuLibraryLoadFromFile loads a library from a file", "[driver][modules]") {
  primary_context();
  TempFile ptx_file("lib.ptx", kPtxB, std::strlen(kPtxB));
  CUlibrary library = nullptr;
  REQUIRE(cuLibraryLoadFromFile(&library, ptx_file.path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0) ==
          CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  CHECK(cuLibraryGetKernel(&kernel, library, "second_kernel") == CUDA_SUCCESS);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuLibraryLoadFromFile(&library, "/nonexistent/cudasim.cubin", nullptr, nullptr, 0, nullptr, nullptr, 0) ==
        CUDA_ERROR_FILE_NOT_FOUND);
  const char garbage[] = "not an image";
  TempFile bad_file("bad.bin", garbage, sizeof garbage);
  CHECK(cuLibraryLoadFromFile(&library, bad_file.path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0) ==
        CUDA_ERROR_INVALID_IMAGE);
  CHECK(cuLibraryLoadFromFile(nullptr, ptx_file.path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLibraryLoadFromFile(&library, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0) ==
        CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("parameter layouts come from the kernel's PTX declaration", "[driver][modules]") {
  primary_context();
  const char ptx[] =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry mixed(\n\t.param .u8 mixed_param_0,\n\t.param .u64 .ptr .global .align 8 mixed_param_1,\n"
      "\t.param .align 16 .b8 mixed_param_2[24],\n\t.param .f32 mixed_param_3\n)\n{\n\tret;\n}\n"
      ".visible .entry none()\n{\n\tret;\n}\n";
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, ptx) == CUDA_SUCCESS);
  CUfunction mixed = nullptr, none = nullptr;
  REQUIRE(cuModuleGetFunction(&mixed, module, "mixed") == CUDA_SUCCESS);
  REQUIRE(cuModuleGetFunction(&none, module, "none") == CUDA_SUCCESS);
  const size_t expected[][2] = {{0, 1}, {8, 8}, {16, 24}, {40, 4}};  // offset, size
  for (size_t i = 0; i < 4; ++i) {
    INFO(i);
    size_t offset = 99, size = 99;
    CHECK(cuFuncGetParamInfo(mixed, i, &offset, &size) == CUDA_SUCCESS);
    CHECK(offset == expected[i][0]);
    CHECK(size == expected[i][1]);
  }
  size_t offset = 0, size = 0;
  CHECK(cuFuncGetParamInfo(mixed, 2, &offset, nullptr) == CUDA_SUCCESS);  // the size is optional
  CHECK(offset == 16);
  CHECK(cuFuncGetParamInfo(mixed, 4, &offset, &size) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncGetParamInfo(mixed, 0, nullptr, &size) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncGetParamInfo(none, 0, &offset, &size) == CUDA_ERROR_INVALID_VALUE);  // no parameters
  CHECK(cuFuncGetParamInfo(nullptr, 0, &offset, &size) == CUDA_ERROR_INVALID_HANDLE);

  CUlibrary library = nullptr;
  REQUIRE(cuLibraryLoadData(&library, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  REQUIRE(cuLibraryGetKernel(&kernel, library, "mixed") == CUDA_SUCCESS);
  CHECK(cuKernelGetParamInfo(kernel, 3, &offset, &size) == CUDA_SUCCESS);
  CHECK((offset == 40 && size == 4));
  CHECK(cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), 1, &offset, &size) == CUDA_SUCCESS);
  CHECK((offset == 8 && size == 8));
  CHECK(cuKernelGetParamInfo(kernel, 4, &offset, &size) == CUDA_ERROR_INVALID_VALUE);

  // A binary image declares no readable parameter list.
  FakeFatbin fatbin("_Z1kv");
  CUlibrary binary = nullptr;
  REQUIRE(cuLibraryLoadData(&binary, &fatbin.wrapper, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
  CUkernel binary_kernel = nullptr;
  REQUIRE(cuLibraryGetKernel(&binary_kernel, binary, "_Z1kv") == CUDA_SUCCESS);
  CHECK(cuKernelGetParamInfo(binary_kernel, 0, &offset, &size) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuLibraryUnload(binary) == CUDA_SUCCESS);
  CHECK(cuKernelGetParamInfo(binary_kernel, 0, &offset, &size) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);
}
