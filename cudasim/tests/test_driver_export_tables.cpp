// NVIDIA's private driver tables (cuGetExportTable, cudasim/driver/export_tables/): the lookup by
// UUID, the layout every table shares, the unknown entries' refusal, the entries NVIDIA's runtime
// relies on (context-local storage, the primary context it asks for), and the MD2 digest the
// integrity check is built on (RFC 1319's test vectors). That NVIDIA's own runtime accepts the
// answers is checked by test_runtime_process.cpp, which runs it over this driver.
#include <catch2/catch.hpp>
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../driver/export_tables/hmac_md2.h"
#include "driver_support.h"

namespace {

constexpr CUuuid kCudartInterface = {{'\x6B', '\xD5', '\xFB', '\x6C', '\x5B', '\xF4', '\xE7', '\x4A', '\x89', '\x87',
                                      '\xD9', '\x39', '\x12', '\xFD', '\x9D', '\xF9'}};
constexpr CUuuid kContextLocalStorage = {{'\xC6', '\x93', '\x33', '\x6E', '\x11', '\x21', '\xDF', '\x11', '\xA8',
                                          '\xC3', '\x68', '\xF3', '\x55', '\xD8', '\x95', '\x93'}};
constexpr CUuuid kNoSuchTable = {{'\x01', '\x02', '\x03', '\x04', '\x05', '\x06', '\x07', '\x08', '\x09', '\x0A',
                                  '\x0B', '\x0C', '\x0D', '\x0E', '\x0F', '\x10'}};

const void* const* table(const CUuuid& id) {
  const void* out = nullptr;
  REQUIRE(cuGetExportTable(&out, &id) == CUDA_SUCCESS);
  REQUIRE(out != nullptr);
  return static_cast<const void* const*>(out);
}

template <typename F>
F entry(const void* const* slots, std::size_t index) {
  F f = nullptr;
  std::memcpy(&f, &slots[index], sizeof f);
  return f;
}

using StorageDestructor = void (*)(CUcontext, void*, void*);
using StoragePut = CUresult (*)(CUcontext, void*, void*, StorageDestructor);
using StorageForget = CUresult (*)(CUcontext, void*);
using StorageGet = CUresult (*)(void**, CUcontext, void*);
using PrimaryContext = CUresult (*)(CUcontext*, CUdevice);
using UnknownEntry = CUresult (*)();

int g_destroyed = 0;
void* g_destroyed_value = nullptr;
void count_destruction(CUcontext, void*, void* value) {
  ++g_destroyed;
  g_destroyed_value = value;
}

std::string hex(const cudasim::export_tables::Md2Digest& digest) {
  std::string out;
  for (std::uint8_t byte : digest) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", byte);
    out += two;
  }
  return out;
}

// What slot 7 of the tools' module table hands its callback, in call order.
struct VisitedFunctions {
  std::vector<std::pair<CUfunction, std::uint64_t>> calls;
};
void record_function(void* user_data, CUfunction function, std::uint64_t value) {
  static_cast<VisitedFunctions*>(user_data)->calls.emplace_back(function, value);
}
using FunctionVisitor = void (*)(void*, CUfunction, std::uint64_t);
using IterateFunctions = int (*)(CUcontext, CUmodule, FunctionVisitor, void*);

}  // namespace

TEST_CASE("export tables: bad arguments and unknown UUIDs are refused", "[driver][export_tables]") {
  const void* out = &out;
  CHECK(cuGetExportTable(nullptr, &kCudartInterface) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetExportTable(&out, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetExportTable(&out, &kNoSuchTable) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(out == nullptr);
}

TEST_CASE("export tables: answered before cuInit, sized tables start with their size", "[driver][export_tables]") {
  // NVIDIA's runtime asks for its tables before it initialises the driver; the test cases above
  // and this one call no cuInit, so in declaration order (Catch2's default) this runs before it.
  const void* const* runtime = table(kCudartInterface);
  CHECK(reinterpret_cast<std::uintptr_t>(runtime[0]) == 13 * sizeof(void*));
  // The same table every time: the runtime keeps the pointer.
  CHECK(table(kCudartInterface) == runtime);
}

TEST_CASE("export tables: an unknown entry answers CUDA_ERROR_NOT_SUPPORTED", "[driver][export_tables]") {
  const void* const* runtime = table(kCudartInterface);
  // Slot 3 of the runtime's table has no published meaning.
  CHECK(entry<UnknownEntry>(runtime, 3)() == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(entry<UnknownEntry>(runtime, 3)() == CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("export tables: the runtime's primary context is neither activated nor retained", "[driver][export_tables]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  const auto get_primary = entry<PrimaryContext>(table(kCudartInterface), 2);
  CUcontext ctx = nullptr;
  CHECK(get_primary(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(get_primary(&ctx, 99) == CUDA_ERROR_INVALID_DEVICE);
  REQUIRE(get_primary(&ctx, 1) == CUDA_SUCCESS);
  unsigned flags = 0;
  int active = -1;
  REQUIRE(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS);
  CHECK(active == 0);
  // The handle is the one cuDevicePrimaryCtxRetain gives; current while inactive, as NVIDIA's
  // runtime makes it before retaining it, the context cannot be used until it is retained.
  REQUIRE(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  CHECK(cuMemAlloc(&ptr, 1024) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext retained = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&retained, 1) == CUDA_SUCCESS);
  CHECK(retained == ctx);
  REQUIRE(cuMemAlloc(&ptr, 1024) == CUDA_SUCCESS);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);
  // cudaFree(NULL) reaches the driver as cuMemFree(0), which frees nothing and succeeds.
  CHECK(cuMemFree(0) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS);
  CHECK(active == 0);
  REQUIRE(cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
  // Any other handle is still checked.
  CHECK(cuCtxSetCurrent(reinterpret_cast<CUcontext>(&flags)) == CUDA_ERROR_INVALID_CONTEXT);
}

TEST_CASE("export tables: context-local storage keeps a value per context and key", "[driver][export_tables]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  const void* const* storage = table(kContextLocalStorage);
  const auto put = entry<StoragePut>(storage, 0);
  const auto forget = entry<StorageForget>(storage, 1);
  const auto get = entry<StorageGet>(storage, 2);
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
  int key = 0;
  int value = 0;
  int other = 0;
  void* found = nullptr;
  CHECK(get(&found, ctx, &key) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(get(nullptr, ctx, &key) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(put(ctx, &key, &value, count_destruction) == CUDA_SUCCESS);
  REQUIRE(get(&found, nullptr, &key) == CUDA_SUCCESS);  // NULL: the current context (ctx)
  CHECK(found == &value);
  // Forgotten: no destruction callback.
  REQUIRE(forget(ctx, &key) == CUDA_SUCCESS);
  CHECK(get(&found, ctx, &key) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(g_destroyed == 0);
  // Destroying the context calls the callback of what it still stores, once.
  REQUIRE(put(ctx, &key, &other, count_destruction) == CUDA_SUCCESS);
  REQUIRE(cuCtxDestroy(ctx) == CUDA_SUCCESS);
  CHECK(g_destroyed == 1);
  CHECK(g_destroyed_value == &other);
  CHECK(get(&found, ctx, &key) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(put(nullptr, &key, &value, nullptr) == CUDA_ERROR_INVALID_CONTEXT);  // none current
}

TEST_CASE("export tables: MD2 gives RFC 1319's digests", "[driver][export_tables]") {
  using cudasim::export_tables::Md2;
  const auto md2 = [](const std::string& text) {
    Md2 digest;
    digest.update(text.data(), text.size());
    return hex(digest.finish());
  };
  CHECK(md2("") == "8350e5a3e24c153df2275c9f80692773");
  CHECK(md2("a") == "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  CHECK(md2("abc") == "da853b0d3f88d99b30283a69e6ded6bb");
  CHECK(md2("message digest") == "ab4f496bfb2a530b219ff33031fe06b0");
  CHECK(md2("abcdefghijklmnopqrstuvwxyz") == "4e8ddff3650292ab5a4108c3aa47940b");
  CHECK(md2("12345678901234567890123456789012345678901234567890123456789012345678901234567890") ==
        "d5976f79d83d3a0dc9806c3c66f3efd8");
  // Fed in pieces, the same digest.
  Md2 pieces;
  pieces.update("message ", 8);
  pieces.update("digest", 6);
  CHECK(hex(pieces.finish()) == "ab4f496bfb2a530b219ff33031fe06b0");
}

TEST_CASE("export tables: the tools tables give the thread's context and a context's identifier", "[driver][export_tables]") {
  constexpr CUuuid kToolsTls = {{'\x42', '\xD8', '\x5A', '\x81', '\x23', '\xF6', '\xCB', '\x47', '\x82', '\x98', '\xF6',
                                 '\xE7', '\x8A', '\x3A', '\xEC', '\xDC'}};
  constexpr CUuuid kToolsContext = {{'\x21', '\x31', '\x8C', '\x60', '\x97', '\x14', '\x32', '\x48', '\x8C', '\xA6',
                                     '\x41', '\xFF', '\x73', '\x24', '\xC8', '\xF2'}};
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  const void* const* tls = table(kToolsTls);
  const void* const* contexts = table(kToolsContext);
  CHECK(reinterpret_cast<std::uintptr_t>(contexts[0]) == 95 * sizeof(void*));
  const auto thread_context = entry<CUresult (*)(CUcontext*)>(tls, 2);
  const auto context_id = entry<CUresult (*)(CUcontext, unsigned long long*)>(contexts, 4);
  CHECK(thread_context(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUcontext ctx = nullptr;
  REQUIRE(cuCtxCreate(&ctx, nullptr, 0, 0) == CUDA_SUCCESS);
  CUcontext seen = nullptr;
  REQUIRE(thread_context(&seen) == CUDA_SUCCESS);
  CHECK(seen == ctx);
  unsigned long long id = 0, expected = 0;
  REQUIRE(cuCtxGetId(ctx, &expected) == CUDA_SUCCESS);
  REQUIRE(context_id(ctx, &id) == CUDA_SUCCESS);
  CHECK(id == expected);
  CHECK(context_id(ctx, nullptr) == CUDA_ERROR_INVALID_VALUE);
  // Slots with no published meaning answer CUDA_ERROR_NOT_SUPPORTED.
  CHECK(entry<UnknownEntry>(contexts, 5)() == CUDA_ERROR_NOT_SUPPORTED);
  REQUIRE(cuCtxDestroy(ctx) == CUDA_SUCCESS);
}

TEST_CASE("export tables: the tools' module table calls back once per function of a module", "[driver][export_tables]") {
  constexpr CUuuid kToolsModule = {{'\x6E', '\x16', '\x3F', '\xBE', '\xB9', '\x58', '\x44', '\x4D', '\x83', '\x5C',
                                    '\xE1', '\x82', '\xAF', '\xF1', '\x99', '\x1E'}};
  const CUcontext ctx = driver_test::primary_context();
  const void* const* modules = table(kToolsModule);
  CHECK(reinterpret_cast<std::uintptr_t>(modules[0]) == 32 * sizeof(void*));
  const auto iterate = entry<IterateFunctions>(modules, 7);
  const char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry alpha()\n{ ret; }\n"
                     ".visible .entry beta()\n{ ret; }\n.func helper()\n{ ret; }\n";
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, ptx) == CUDA_SUCCESS);
  VisitedFunctions visited;
  CHECK(iterate(ctx, module, record_function, &visited) == 1);
  // Each entry once, in the image's order (not the .func), with the module as the second value.
  REQUIRE(visited.calls.size() == 2);
  const char* names[2] = {};
  for (std::size_t i = 0; i < 2; ++i) {
    REQUIRE(cuFuncGetName(&names[i], visited.calls[i].first) == CUDA_SUCCESS);
    CHECK(visited.calls[i].second == reinterpret_cast<std::uintptr_t>(module));
  }
  CHECK(std::string(names[0]) == "alpha");
  CHECK(std::string(names[1]) == "beta");
  CUfunction beta = nullptr;
  REQUIRE(cuModuleGetFunction(&beta, module, "beta") == CUDA_SUCCESS);
  CHECK(visited.calls[1].first == beta);  // the handles the public calls give
  // No callback, or a module that is not loaded: 0, nothing called.
  CHECK(iterate(ctx, module, nullptr, &visited) == 0);
  REQUIRE(cuModuleUnload(module) == CUDA_SUCCESS);
  visited.calls.clear();
  CHECK(iterate(ctx, module, record_function, &visited) == 0);
  CHECK(iterate(ctx, nullptr, record_function, &visited) == 0);
  CHECK(visited.calls.empty());
  // Other slots answer CUDA_ERROR_NOT_SUPPORTED.
  CHECK(entry<UnknownEntry>(modules, 6)() == CUDA_ERROR_NOT_SUPPORTED);
}
