// The simulated driver's modules, libraries and kernel launches (no device code runs: a launch is a
// queued no-op), page-locked host memory and peer access. Two devices (8 GiB and 2 GiB).
#include "driver_support.h"
#include "report_support.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// The per-thread-default-stream forms, exported by the driver but declared by cuda.h only for its
// own build.
extern "C" {
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams);
}

using namespace driver_test;
using runtime_test::FakeFatbin;

namespace {

// A PTX module with two entry points, as nvcc --ptx writes them.
const char kPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry add_one(\n\t.param .u64 add_one_param_0\n)\n{\n\tret;\n}\n"
    ".visible .entry scale_by_two(\n\t.param .u64 p\n)\n{\n\tret;\n}\n";

CUresult launch(CUfunction f, unsigned grid, unsigned block, CUstream stream = nullptr, unsigned shared = 0) {
  return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shared, stream, nullptr, nullptr);
}

// add_one from a freshly loaded PTX module in the current context; null on failure.
CUfunction add_one() {
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  if (cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS || cuModuleGetFunction(&f, module, "add_one") != CUDA_SUCCESS)
    return nullptr;
  return f;
}

std::string temp_report(const char* tag) {
  return "/tmp/cudasim-kernels-" + std::to_string(getpid()) + "-" + tag + ".json";
}

}  // namespace

TEST_CASE("modules load PTX and fat binaries and find functions by name", "[driver][kernels]") {
  primary_context();
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, kPtx) == CUDA_SUCCESS);
  CUfunction add = nullptr, again = nullptr, scale = nullptr, missing = nullptr;
  CHECK(cuModuleGetFunction(&add, module, "add_one") == CUDA_SUCCESS);
  CHECK(cuModuleGetFunction(&again, module, "add_one") == CUDA_SUCCESS);
  CHECK(add == again);
  CHECK(cuModuleGetFunction(&scale, module, "scale_by_two") == CUDA_SUCCESS);
  CHECK(cuModuleGetFunction(&missing, module, "add") == CUDA_ERROR_NOT_FOUND);  // a prefix is not a name
  CHECK(cuModuleGetFunction(&missing, module, "add_one_param_0") == CUDA_ERROR_NOT_FOUND);

  FakeFatbin fatbin("_Z6kernelPf");
  CUmodule fat = nullptr;
  CHECK(cuModuleLoadFatBinary(&fat, &fatbin.wrapper) == CUDA_SUCCESS);
  CHECK(cuModuleGetFunction(&missing, fat, "_Z6kernelPf") == CUDA_SUCCESS);
  CHECK(cuModuleUnload(fat) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(fat) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(launch(missing, 1, 1) == CUDA_ERROR_INVALID_HANDLE);  // unloaded with its module

  const char garbage[] = "not an image";
  CUmodule bad = nullptr;
  CHECK(cuModuleLoadData(&bad, garbage) == CUDA_ERROR_INVALID_IMAGE);
  CHECK(cuModuleLoadData(nullptr, kPtx) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);
}

TEST_CASE("launches are validated like the driver's and complete in stream order", "[driver][kernels]") {
  primary_context();
  CUmodule module = nullptr;
  REQUIRE(cuModuleLoadData(&module, kPtx) == CUDA_SUCCESS);
  CUfunction add = nullptr;
  REQUIRE(cuModuleGetFunction(&add, module, "add_one") == CUDA_SUCCESS);

  CHECK(launch(add, 0, 32) == CUDA_ERROR_INVALID_VALUE);           // empty grid
  CHECK(launch(add, 1, 0) == CUDA_ERROR_INVALID_VALUE);            // empty block
  CHECK(launch(add, 1, 1025) == CUDA_ERROR_INVALID_VALUE);         // over 1024 threads
  CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 65, 0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchKernel(add, 1, 65536, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(launch(add, 1, 32, nullptr, 49153) == CUDA_ERROR_INVALID_VALUE);  // over 48 KiB of shared memory
  void* params[1] = {nullptr};
  void* extra[1] = {CU_LAUNCH_PARAM_END};
  CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra) == CUDA_ERROR_INVALID_VALUE);
  CHECK(launch(nullptr, 1, 1) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(launch(reinterpret_cast<CUfunction>(&params), 1, 1) == CUDA_ERROR_INVALID_HANDLE);

  // A launch waits behind earlier work on its stream, and later work waits behind it.
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  CHECK(cuLaunchKernel(add, 1024, 1, 1, 256, 1, 1, 1024, stream, params, nullptr) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  gate.open();
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(gate.ran());
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(module) == CUDA_SUCCESS);
}

TEST_CASE("library kernels launch in any context; module functions only in their own", "[driver][kernels]") {
  int rc = in_child([] {
    CHILD_CHECK(start_primary_context());
    CUlibrary library = nullptr;
    CHILD_CHECK(cuLibraryLoadData(&library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0) == CUDA_SUCCESS);
    CUkernel kernel = nullptr;
    CHILD_CHECK(cuLibraryGetKernel(&kernel, library, "scale_by_two") == CUDA_SUCCESS);
    CUkernel missing = nullptr;
    CHILD_CHECK(cuLibraryGetKernel(&missing, library, "nope") == CUDA_ERROR_NOT_FOUND);
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    CHILD_CHECK(cuModuleLoadData(&module, kPtx) == CUDA_SUCCESS);
    CHILD_CHECK(cuModuleGetFunction(&function, module, "add_one") == CUDA_SUCCESS);

    CUcontext other = nullptr;
    CHILD_CHECK(cuCtxCreate(&other, nullptr, 0, 1) == CUDA_SUCCESS);  // device 1, now current
    CHILD_CHECK(launch(reinterpret_cast<CUfunction>(kernel), 2, 64) == CUDA_SUCCESS);
    CHILD_CHECK(launch(function, 2, 64) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    CHILD_CHECK(cuCtxDestroy(other) == CUDA_SUCCESS);

    // Destroying the primary context unloads its modules; libraries stay.
    CUdevice device = 0;
    CHILD_CHECK(cuDeviceGet(&device, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuDevicePrimaryCtxReset(device) == CUDA_SUCCESS);
    CHILD_CHECK(start_primary_context());
    CHILD_CHECK(launch(function, 1, 1) == CUDA_ERROR_INVALID_HANDLE);
    CHILD_CHECK(launch(reinterpret_cast<CUfunction>(kernel), 1, 1) == CUDA_SUCCESS);
    CHILD_CHECK(cuLibraryUnload(library) == CUDA_SUCCESS);
    CHILD_CHECK(launch(reinterpret_cast<CUfunction>(kernel), 1, 1) == CUDA_ERROR_INVALID_HANDLE);
    CHILD_CHECK(cuLibraryUnload(library) == CUDA_ERROR_INVALID_HANDLE);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("launches are counted in the report; CUDASIM_KERNELS=fail refuses them", "[driver][kernels]") {
  const std::string path = temp_report("count");
  int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CHILD_CHECK(start_primary_context());
    const CUfunction f = add_one();
    CHILD_CHECK(f != nullptr);
    for (int i = 0; i < 5; ++i) CHILD_CHECK(launch(f, 1, 1) == CUDA_SUCCESS);
    CHILD_CHECK(launch(f, 0, 1) == CUDA_ERROR_INVALID_VALUE);  // refused launches are not counted
    CHILD_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    std::exit(0);
  });
  REQUIRE(rc == 0);
  CHECK(take_report(path)["devices"][0]["kernel_launches"] == 5);

  rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    setenv("CUDASIM_KERNELS", "fail", 1);
    CHILD_CHECK(start_primary_context());
    const CUfunction f = add_one();
    CHILD_CHECK(f != nullptr);
    CHILD_CHECK(launch(f, 1, 1) == CUDA_ERROR_NO_BINARY_FOR_GPU);
    CHILD_CHECK(launch(f, 0, 1) == CUDA_ERROR_INVALID_VALUE);  // argument errors come first
    std::exit(0);
  });
  REQUIRE(rc == 0);
  CHECK(take_report(path)["devices"][0]["kernel_launches"] == 0);

  rc = in_child([] {
    setenv("CUDASIM_KERNELS", "sometimes", 1);
    CHILD_CHECK(cuInit(0) == CUDA_ERROR_INVALID_VALUE);  // a malformed variable fails initialisation
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("a launch on a capturing stream becomes a graph node, not a launch", "[driver][kernels]") {
  const std::string path = temp_report("capture");
  int rc = in_child([&] {
    setenv("CUDASIM_REPORT", path.c_str(), 1);
    CHILD_CHECK(start_primary_context());
    const CUfunction f = add_one();
    CHILD_CHECK(f != nullptr);
    CUstream stream = nullptr;
    CHILD_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CHILD_CHECK(launch(f, 4, 32, stream) == CUDA_SUCCESS);
    const CUgraphNode* deps = nullptr;
    size_t count = 0;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CHILD_CHECK(cuStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &count) == CUDA_SUCCESS);
    CHILD_CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && count == 1);  // the kernel node
    CUgraph graph = nullptr;
    CHILD_CHECK(cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph != nullptr);
    CHILD_CHECK(cuGraphDestroy(graph) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
    std::exit(0);
  });
  REQUIRE(rc == 0);
  CHECK(take_report(path)["devices"][0]["kernel_launches"] == 0);
}

TEST_CASE("page-locked host memory: allocation, registration, device pointers, errors", "[driver][host]") {
  primary_context();
  void* pinned = nullptr;
  REQUIRE(cuMemHostAlloc(&pinned, kMiB, CU_MEMHOSTALLOC_WRITECOMBINED) == CUDA_SUCCESS);
  std::memset(pinned, 7, kMiB);
  CUdeviceptr device = 0;
  CHECK(cuMemHostGetDevicePointer(&device, static_cast<char*>(pinned) + 100, 0) == CUDA_SUCCESS);
  CHECK(device == reinterpret_cast<CUdeviceptr>(pinned) + 100);  // unified addressing: the same address
  CHECK(cuMemHostGetDevicePointer(&device, pinned, 1) == CUDA_ERROR_INVALID_VALUE);
  unsigned flags = 0;
  CHECK(cuMemHostGetFlags(&flags, pinned) == CUDA_SUCCESS);
  CHECK(flags == (CU_MEMHOSTALLOC_WRITECOMBINED | CU_MEMHOSTALLOC_DEVICEMAP));
  CUmemorytype type = CU_MEMORYTYPE_DEVICE;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, device) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_HOST);
  CHECK(cuMemHostAlloc(&pinned, kMiB, 0x80) == CUDA_ERROR_INVALID_VALUE);  // unknown flag

  // A copy from pinned memory is not staged: it reads the source when it runs on its stream.
  CUdeviceptr target = 0;
  REQUIRE(cuMemAlloc(&target, kMiB) == CUDA_SUCCESS);
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyHtoDAsync(target, pinned, kMiB, stream) == CUDA_SUCCESS);
  std::memset(pinned, 9, kMiB);  // before the copy ran
  gate.open();
  std::vector<unsigned char> back(kMiB);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoH(back.data(), target, kMiB) == CUDA_SUCCESS);
  CHECK(back[0] == 9);
  CHECK(back[kMiB - 1] == 9);

  CHECK(cuMemFreeHost(static_cast<char*>(pinned) + 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFreeHost(pinned) == CUDA_SUCCESS);
  CHECK(cuMemFreeHost(pinned) == CUDA_ERROR_INVALID_VALUE);

  std::vector<char> pageable(4 * kMiB);
  CHECK(cuMemHostRegister(pageable.data(), pageable.size(), CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS);
  CHECK(cuMemHostRegister(pageable.data() + kMiB, kMiB, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(cuMemHostGetDevicePointer(&device, pageable.data(), 0) == CUDA_SUCCESS);
  CHECK(cuMemFreeHost(pageable.data()) == CUDA_ERROR_INVALID_VALUE);  // registered, not allocated
  CHECK(cuMemHostUnregister(pageable.data() + 1) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(cuMemHostUnregister(pageable.data()) == CUDA_SUCCESS);
  CHECK(cuMemHostUnregister(pageable.data()) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK(cuMemHostRegister(nullptr, kMiB, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemHostRegister(reinterpret_cast<void*>(std::uintptr_t{4096}), 4096, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(target) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("the device pointer of mapped page-locked memory is device memory to sets and range queries",
          "[driver][host]") {
  primary_context();
  void* pinned = nullptr;
  REQUIRE(cuMemHostAlloc(&pinned, 2 * kMiB, CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS);
  CUdeviceptr device = 0;
  REQUIRE(cuMemHostGetDevicePointer(&device, pinned, 0) == CUDA_SUCCESS);
  CHECK(cuMemsetD8(device + 10, 0xab, 100) == CUDA_SUCCESS);
  CHECK(cuMemsetD32(device + 4096, 0x01020304u, 16) == CUDA_SUCCESS);
  CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  const auto* bytes = static_cast<const unsigned char*>(pinned);
  CHECK(bytes[9] == 0);
  CHECK(bytes[10] == 0xab);
  CHECK(bytes[109] == 0xab);
  CHECK(bytes[110] == 0);
  CHECK(bytes[4096] == 0x04);
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(cuMemGetAddressRange(&base, &size, device + 12345) == CUDA_SUCCESS);
  CHECK(base == device);
  CHECK(size == 2 * kMiB);
  // A device copy into it, and past its end.
  CUdeviceptr source = 0;
  REQUIRE(cuMemAlloc(&source, 4096) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(source, 0x5c, 4096) == CUDA_SUCCESS);
  CHECK(cuMemcpyDtoD(device + kMiB, source, 4096) == CUDA_SUCCESS);
  CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(bytes[kMiB + 4095] == 0x5c);
  CHECK(cuMemsetD8(device + 2 * kMiB - 10, 1, 11) == CUDA_ERROR_INVALID_VALUE);
  // Registered memory too; pageable memory is no device memory.
  std::vector<char> pageable(kMiB);
  CHECK(cuMemsetD8(reinterpret_cast<CUdeviceptr>(pageable.data()), 1, 10) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(pageable.data())) == CUDA_ERROR_NOT_FOUND);
  REQUIRE(cuMemHostRegister(pageable.data(), pageable.size(), CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS);
  CHECK(cuMemsetD8(reinterpret_cast<CUdeviceptr>(pageable.data()), 7, 10) == CUDA_SUCCESS);
  CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(pageable[9] == 7);
  CHECK(cuMemHostUnregister(pageable.data()) == CUDA_SUCCESS);
  CHECK(cuMemFree(source) == CUDA_SUCCESS);
  CHECK(cuMemFreeHost(pinned) == CUDA_SUCCESS);
  CHECK(cuMemsetD8(device, 1, 1) == CUDA_ERROR_INVALID_VALUE);  // freed
}

TEST_CASE("peer access between the two devices", "[driver][peers]") {
  primary_context();
  int can = -1;
  CHECK(cuDeviceCanAccessPeer(&can, 0, 1) == CUDA_SUCCESS);
  CHECK(can == 1);
  CHECK(cuDeviceCanAccessPeer(&can, 0, 0) == CUDA_SUCCESS);
  CHECK(can == 0);  // a device is not its own peer
  CHECK(cuDeviceCanAccessPeer(&can, 0, 2) == CUDA_ERROR_INVALID_DEVICE);
  int value = -1;
  CHECK(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 0) == CUDA_SUCCESS);
  CHECK(value == 1);
  CHECK(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1) == CUDA_ERROR_INVALID_DEVICE);

  CUcontext own = primary_context();
  CUcontext peer = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&peer, 1) == CUDA_SUCCESS);
  CHECK(cuCtxEnablePeerAccess(peer, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuCtxEnablePeerAccess(own, 0) == CUDA_ERROR_INVALID_CONTEXT);  // the current context itself
  CUcontext sibling = nullptr;  // another context of device 0: no peer
  REQUIRE(cuCtxCreate(&sibling, nullptr, 0, 0) == CUDA_SUCCESS);  // made current
  CHECK(cuCtxEnablePeerAccess(own, 0) == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  REQUIRE(cuCtxDestroy(sibling) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(own) == CUDA_SUCCESS);
  CHECK(cuCtxDisablePeerAccess(peer) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  CHECK(cuCtxEnablePeerAccess(peer, 0) == CUDA_SUCCESS);
  CHECK(cuCtxEnablePeerAccess(peer, 0) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  CHECK(cuCtxDisablePeerAccess(peer) == CUDA_SUCCESS);
  CHECK(cuCtxEnablePeerAccess(peer, 0) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);  // the last release destroys it, and the access
  CHECK(cuCtxEnablePeerAccess(peer, 0) == CUDA_ERROR_INVALID_CONTEXT);

  int rc = in_child([] {
    setenv("CUDASIM_PEER_ACCESS", "none", 1);
    CHILD_CHECK(start_primary_context());
    int can_access = -1;
    CHILD_CHECK(cuDeviceCanAccessPeer(&can_access, 0, 1) == CUDA_SUCCESS && can_access == 0);
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("cuLaunchKernelEx launches with attributes; cooperative grids must fit the device", "[driver][kernels]") {
  primary_context();
  const CUfunction f = add_one();
  REQUIRE(f != nullptr);
  int supported = 0;
  CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0) == CUDA_SUCCESS);
  CHECK(supported == 1);
  CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0) == CUDA_SUCCESS);
  CHECK(supported == 1);

  CUstream stream = non_blocking_stream();
  CUlaunchAttribute attrs[3] = {};
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attrs[0].value.priority = 0;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  CUlaunchConfig config{};
  config.gridDimX = 8, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = 128, config.blockDimY = 1, config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = 2;
  // Ordered on its stream like any launch.
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  gate.open();
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);

  // The occupancy model holds 16 blocks of 128 threads per multiprocessor: 132 * 16 blocks at once.
  int per_sm = 0;
  REQUIRE(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 128, 0) == CUDA_SUCCESS);
  const unsigned fits = static_cast<unsigned>(per_sm) * 132;
  attrs[2].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attrs[2].value.cooperative = 1;
  config.numAttrs = 3;
  config.gridDimX = fits;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuLaunchKernelEx_ptsz(&config, f, nullptr, nullptr) == CUDA_SUCCESS);
  config.gridDimX = fits + 1;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  attrs[2].value.cooperative = 0;  // the same grid, not cooperative
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuLaunchCooperativeKernel(f, fits, 1, 1, 128, 1, 1, 0, stream, nullptr) == CUDA_SUCCESS);
  CHECK(cuLaunchCooperativeKernel_ptsz(f, fits, 1, 1, 128, 1, 1, 0, stream, nullptr) == CUDA_SUCCESS);
  CHECK(cuLaunchCooperativeKernel(f, fits + 1, 1, 1, 128, 1, 1, 0, stream, nullptr) ==
        CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CHECK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1025, 1, 1, 0, stream, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchCooperativeKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, stream, nullptr) == CUDA_ERROR_INVALID_HANDLE);

  // Clusters must tile the grid, at most 8 blocks unless the function allows non-portable sizes.
  attrs[2].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[2].value.clusterDim.x = 4, attrs[2].value.clusterDim.y = 1, attrs[2].value.clusterDim.z = 1;
  config.gridDimX = 16;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_SUCCESS);
  config.gridDimX = 18;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_CLUSTER_SIZE);
  config.gridDimX = 32;
  attrs[2].value.clusterDim.x = 16;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_CLUSTER_SIZE);
  REQUIRE(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) == CUDA_SUCCESS);
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_SUCCESS);
  attrs[2].value.clusterDim.x = 32;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_CLUSTER_SIZE);
  attrs[2].value.clusterDim.y = 0;  // a zero dimension is no cluster shape
  attrs[2].value.clusterDim.x = 2;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_CLUSTER_SIZE);

  // Argument errors.
  config.numAttrs = 1;
  CHECK(cuLaunchKernelEx(nullptr, f, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  attrs[0].id = static_cast<CUlaunchAttributeID>(1000);
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  config.attrs = nullptr;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  config.numAttrs = 0;
  config.blockDimX = 0;
  CHECK(cuLaunchKernelEx(&config, f, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  config.blockDimX = 1;
  CHECK(cuLaunchKernelEx(&config, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("cluster occupancy follows the launch limits and the occupancy model", "[driver][kernels]") {
  primary_context();
  const CUfunction f = add_one();
  REQUIRE(f != nullptr);
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 4, cluster.value.clusterDim.y = 1, cluster.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = 64, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = 256, config.blockDimY = 1, config.blockDimZ = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;

  int size = 0;
  CHECK(cuOccupancyMaxPotentialClusterSize(&size, f, &config) == CUDA_SUCCESS);
  CHECK(size == 8);  // portable
  int per_sm = 0;
  REQUIRE(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 256, 0) == CUDA_SUCCESS);
  int clusters = 0;
  CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &config) == CUDA_SUCCESS);
  CHECK(clusters == per_sm * 132 / 4);
  cluster.value.clusterDim.x = 16;
  CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &config) == CUDA_ERROR_INVALID_CLUSTER_SIZE);
  REQUIRE(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) == CUDA_SUCCESS);
  CHECK(cuOccupancyMaxPotentialClusterSize(&size, f, &config) == CUDA_SUCCESS);
  CHECK(size == 16);
  CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &config) == CUDA_SUCCESS);
  CHECK(clusters == per_sm * 132 / 16);

  config.numAttrs = 0;  // no cluster shape given, none required
  CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &config) == CUDA_ERROR_INVALID_CLUSTER_SIZE);
  config.blockDimX = 2048;  // no block fits: no cluster either
  CHECK(cuOccupancyMaxPotentialClusterSize(&size, f, &config) == CUDA_SUCCESS);
  CHECK(size == 0);
  config.blockDimX = 0;
  CHECK(cuOccupancyMaxPotentialClusterSize(&size, f, &config) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuOccupancyMaxPotentialClusterSize(nullptr, f, &config) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuOccupancyMaxPotentialClusterSize(&size, f, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuOccupancyMaxActiveClusters(nullptr, f, &config) == CUDA_ERROR_INVALID_VALUE);
  config.blockDimX = 32;
  CHECK(cuOccupancyMaxActiveClusters(&clusters, nullptr, &config) == CUDA_ERROR_INVALID_HANDLE);
}

// The deprecated execution control is still exported by the driver: tested as such.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("the deprecated execution control launches with what was set beforehand", "[driver][kernels]") {
  primary_context();
  const CUfunction f = add_one();
  REQUIRE(f != nullptr);
  CHECK(cuLaunch(f) == CUDA_ERROR_INVALID_VALUE);  // no block shape yet
  CHECK(cuFuncSetBlockShape(f, 128, 1, 1) == CUDA_SUCCESS);
  CHECK(cuLaunch(f) == CUDA_SUCCESS);
  CHECK(cuLaunchGrid(f, 4, 2) == CUDA_SUCCESS);
  CUstream stream = non_blocking_stream();
  Gate gate;  // ordered on its stream like any launch
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  CHECK(cuLaunchGridAsync(f, 4, 2, stream) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  gate.open();
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(cuLaunchGrid(f, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchGrid(f, 65536 * 2, 65536) == CUDA_ERROR_INVALID_VALUE);  // height over the limit

  CHECK(cuFuncSetSharedSize(f, 49153) == CUDA_SUCCESS);  // over the function's limit: refused at launch
  CHECK(cuLaunch(f) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetSharedSize(f, 1024) == CUDA_SUCCESS);
  CHECK(cuFuncSetBlockShape(f, 2048, 1, 1) == CUDA_SUCCESS);  // over 1024 threads: refused at launch
  CHECK(cuLaunch(f) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetBlockShape(f, 0, 1, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetBlockShape(f, 32, 1, 1) == CUDA_SUCCESS);

  CHECK(cuParamSeti(f, 0, 7) == CUDA_ERROR_INVALID_VALUE);  // no parameter space yet
  CHECK(cuParamSetSize(f, 16) == CUDA_SUCCESS);
  CHECK(cuParamSeti(f, 0, 7) == CUDA_SUCCESS);
  CHECK(cuParamSetf(f, 4, 1.5f) == CUDA_SUCCESS);
  unsigned long long pointer = 0x1000;
  CHECK(cuParamSetv(f, 8, &pointer, sizeof pointer) == CUDA_SUCCESS);
  CHECK(cuParamSetv(f, 12, &pointer, sizeof pointer) == CUDA_ERROR_INVALID_VALUE);  // past the 16 bytes
  CHECK(cuParamSetv(f, 0, nullptr, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuParamSeti(f, -1, 7) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuParamSetSize(f, 4097) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchGridAsync(f, 1, 1, stream) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);

  CHECK(cuFuncSetSharedMemConfig(f, CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) == CUDA_SUCCESS);
  CHECK(cuFuncSetSharedMemConfig(f, static_cast<CUsharedconfig>(3)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetSharedMemConfig(nullptr, CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLaunch(nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuFuncSetBlockShape(nullptr, 1, 1, 1) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuParamSetSize(nullptr, 4) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}
#pragma GCC diagnostic pop

namespace {

// One entry of a multi-device launch: `grid` blocks of 128 threads on `stream`.
CUDA_LAUNCH_PARAMS multi_device_entry(CUfunction f, unsigned grid, CUstream stream) {
  CUDA_LAUNCH_PARAMS p{};
  p.function = f;
  p.gridDimX = grid, p.gridDimY = 1, p.gridDimZ = 1;
  p.blockDimX = 128, p.blockDimY = 1, p.blockDimZ = 1;
  p.hStream = stream;
  return p;
}

void raise_flag(void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }

}  // namespace

// Deprecated, still exported: tested as such.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("multi-device cooperative launches: one kernel per device, synchronised across streams",
          "[driver][kernels]") {
  CUcontext ctx0 = primary_context();
  int supported = 0;
  REQUIRE(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, 1) == CUDA_SUCCESS);
  CHECK(supported == 1);
  CUfunction f0 = add_one();
  REQUIRE(f0 != nullptr);
  CUstream s0 = non_blocking_stream(), s0b = non_blocking_stream();
  CUcontext ctx1 = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx1) == CUDA_SUCCESS);
  CUfunction f1 = add_one();
  REQUIRE(f1 != nullptr);
  CUmodule module1 = nullptr;
  REQUIRE(cuFuncGetModule(&module1, f1) == CUDA_SUCCESS);
  CUfunction other_code = nullptr;
  REQUIRE(cuModuleGetFunction(&other_code, module1, "scale_by_two") == CUDA_SUCCESS);
  CUstream s1 = non_blocking_stream();
  REQUIRE(cuCtxSetCurrent(ctx0) == CUDA_SUCCESS);
  int per_sm = 0;
  REQUIRE(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f0, 128, 0) == CUDA_SUCCESS);
  const unsigned fits = static_cast<unsigned>(per_sm) * 132;
  CUDA_LAUNCH_PARAMS list[3] = {multi_device_entry(f0, fits, s0), multi_device_entry(f1, fits, s1),
                                multi_device_entry(f0, fits, s0b)};

  // By default each kernel waits for the work queued before it on every stream of the launch.
  Gate gate;
  std::atomic<bool> after{false};
  REQUIRE(cuLaunchHostFunc(s1, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuLaunchCooperativeKernelMultiDevice(list, 2, 0) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(s0, raise_flag, &after) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(cuStreamQuery(s0) == CUDA_ERROR_NOT_READY);
  CHECK_FALSE(after.load());
  gate.open();
  REQUIRE(cuStreamSynchronize(s0) == CUDA_SUCCESS);
  CHECK(after.load());
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s1) == CUDA_SUCCESS);

  // Without the pre-launch wait, later work on a stream still waits for every kernel (which waits
  // for its own stream's earlier work).
  Gate second;
  after = false;
  REQUIRE(cuLaunchHostFunc(s1, Gate::wait, &second) == CUDA_SUCCESS);
  REQUIRE(cuLaunchCooperativeKernelMultiDevice(list, 2, CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC) ==
          CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(s0, raise_flag, &after) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(after.load());
  second.open();
  REQUIRE(cuStreamSynchronize(s0) == CUDA_SUCCESS);
  CHECK(after.load());
  REQUIRE(cuStreamSynchronize(s1) == CUDA_SUCCESS);

  // With neither, a stream waits only for its own work.
  Gate third;
  REQUIRE(cuLaunchHostFunc(s1, Gate::wait, &third) == CUDA_SUCCESS);
  REQUIRE(cuLaunchCooperativeKernelMultiDevice(list, 2,
                                               CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                                                   CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC) ==
          CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(s0) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(s1) == CUDA_ERROR_NOT_READY);
  third.open();
  REQUIRE(cuStreamSynchronize(s1) == CUDA_SUCCESS);

  // Documented checks.
  CHECK(cuLaunchCooperativeKernelMultiDevice(list, 2, 4) == CUDA_ERROR_INVALID_VALUE);  // unknown flag
  CHECK(cuLaunchCooperativeKernelMultiDevice(nullptr, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchCooperativeKernelMultiDevice(list, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchCooperativeKernelMultiDevice(list, 3, 0) == CUDA_ERROR_INVALID_VALUE);  // more than the devices
  CUDA_LAUNCH_PARAMS same_device[2] = {list[0], list[2]};  // two kernels on device 0
  CHECK(cuLaunchCooperativeKernelMultiDevice(same_device, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  CUDA_LAUNCH_PARAMS changed[2] = {list[0], list[1]};
  changed[1].gridDimX = fits - 1;  // another grid
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  changed[1] = list[1];
  changed[1].sharedMemBytes = 16;  // another shared size
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  changed[1] = list[1];
  changed[1].function = other_code;  // other code
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  changed[1] = list[1];
  changed[1].function = f0;  // device 0's function on device 1's stream
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_CONTEXT);
  changed[1] = list[1];
  changed[1].hStream = nullptr;  // the NULL stream is not allowed, nor the legacy or per-thread one
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  changed[1].hStream = CU_STREAM_PER_THREAD;
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_VALUE);
  changed[1].hStream = reinterpret_cast<CUstream>(0x1000);
  CHECK(cuLaunchCooperativeKernelMultiDevice(changed, 2, 0) == CUDA_ERROR_INVALID_HANDLE);
  CUDA_LAUNCH_PARAMS too_large[2] = {multi_device_entry(f0, fits + 1, s0), multi_device_entry(f1, fits + 1, s1)};
  CHECK(cuLaunchCooperativeKernelMultiDevice(too_large, 2, 0) == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CUDA_LAUNCH_PARAMS one[1] = {list[0]};  // a single device is a valid list
  CHECK(cuLaunchCooperativeKernelMultiDevice(one, 1, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);

  REQUIRE(cuStreamDestroy(s0) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(s0b) == CUDA_SUCCESS);
  REQUIRE(cuStreamDestroy(s1) == CUDA_SUCCESS);
  REQUIRE(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
}
#pragma GCC diagnostic pop
