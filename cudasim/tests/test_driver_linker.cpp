// The simulated driver's JIT linker and modules loaded from files: inputs checked by type, the
// linked image loadable as a module or library holding every input's entry points.
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

TEST_CASE("the linker joins PTX, fat binaries and files into one loadable image", "[driver][linker]") {
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

TEST_CASE("the linker refuses inputs that are not what their type says, with an error log", "[driver][linker]") {
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

TEST_CASE("the linker needs a current context", "[driver][linker]") {
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

TEST_CASE("cuModuleLoad loads a module from a file", "[driver][linker]") {
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
