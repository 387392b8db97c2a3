// The runtime's globals of libraries (cudaLibraryGetGlobal, cudaLibraryGetManaged) over the
// simulated driver's: one copy per device, managed ones shared. Two devices.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime_support.h"

using namespace runtime_test;

namespace {

const char kLibraryPtx[] = R"(.version 8.0
.target sm_80
.address_size 64
.visible .global .align 4 .u32 hits[3] = {10, 20, 30};
.visible .const .align 8 .f64 ratio = 0.25;
.visible .global .attribute(.managed) .align 4 .u32 flag = 1;
.visible .entry work()
{
	ret;
}
)";

}  // namespace

TEST_CASE("runtime: library globals are per device, managed ones shared", "[runtime][library]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaLibrary_t library = nullptr;
  REQUIRE_CUDA(cudaLibraryLoadData(&library, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  void* on_first = nullptr;
  size_t size = 0;
  REQUIRE_CUDA(cudaLibraryGetGlobal(&on_first, &size, library, "hits"));
  CHECK(size == 12);
  std::uint32_t hits[3] = {};
  REQUIRE_CUDA(cudaMemcpy(hits, on_first, sizeof hits, cudaMemcpyDeviceToHost));
  CHECK((hits[0] == 10 && hits[1] == 20 && hits[2] == 30));
  const std::uint32_t changed = 11;
  REQUIRE_CUDA(cudaMemcpy(on_first, &changed, sizeof changed, cudaMemcpyHostToDevice));
  double ratio = 0;
  void* ratio_address = nullptr;
  REQUIRE_CUDA(cudaLibraryGetGlobal(&ratio_address, nullptr, library, "ratio"));
  REQUIRE_CUDA(cudaMemcpy(&ratio, ratio_address, sizeof ratio, cudaMemcpyDeviceToHost));
  CHECK(ratio == 0.25);
  void* flag_first = nullptr;
  REQUIRE_CUDA(cudaLibraryGetManaged(&flag_first, &size, library, "flag"));
  CHECK(size == 4);

  REQUIRE_CUDA(cudaSetDevice(1));
  void* on_second = nullptr;
  REQUIRE_CUDA(cudaLibraryGetGlobal(&on_second, nullptr, library, "hits"));
  CHECK(on_second != on_first);
  REQUIRE_CUDA(cudaMemcpy(hits, on_second, sizeof hits, cudaMemcpyDeviceToHost));
  CHECK(hits[0] == 10);  // its own copy
  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, on_second));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 1);
  void* flag_second = nullptr;
  REQUIRE_CUDA(cudaLibraryGetManaged(&flag_second, nullptr, library, "flag"));
  CHECK(flag_second == flag_first);
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, flag_second));
  CHECK(attributes.type == cudaMemoryTypeManaged);
  CHECK(*static_cast<const std::uint32_t*>(flag_second) == 1);

  void* unused = nullptr;
  CHECK(name(cudaLibraryGetGlobal(&unused, &size, library, "missing")) == "cudaErrorSymbolNotFound");
  CHECK(name(cudaLibraryGetManaged(&unused, &size, library, "hits")) == "cudaErrorSymbolNotFound");
  CHECK(name(cudaLibraryGetGlobal(nullptr, nullptr, library, "hits")) == "cudaErrorInvalidValue");
  cudaGetLastError();

  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaMemcpy(hits, on_first, sizeof hits, cudaMemcpyDeviceToHost));
  CHECK(hits[0] == 11);
  REQUIRE_CUDA(cudaLibraryUnload(library));
  CHECK(name(cudaLibraryGetGlobal(&unused, &size, library, "hits")) == "cudaErrorInvalidResourceHandle");
  CHECK(name(cudaLibraryGetManaged(&unused, &size, library, "flag")) == "cudaErrorInvalidResourceHandle");
  cudaGetLastError();
}
