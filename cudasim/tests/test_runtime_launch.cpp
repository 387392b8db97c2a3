// What nvcc-generated host code does through the simulated runtime (registration of a fat binary and
// its kernels, `<<<>>>` launches through the pushed call configuration, cudaLaunchKernel), pinned
// host memory and peer access. Two devices.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime_support.h"

using namespace runtime_test;

// nvcc's generated code declares these itself (crt/host_runtime.h, crt/device_functions.h).
extern "C" {
void** __cudaRegisterFatBinary(void* fatCubin);
void __cudaRegisterFatBinaryEnd(void** fatCubinHandle);
void __cudaUnregisterFatBinary(void** fatCubinHandle);
void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int thread_limit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                               cudaStream_t stream);
}

namespace {

// A fake fat binary registered as nvcc's host code registers its translation unit's.
struct FakeModule {
  FakeFatbin fatbin;
  void** handle = nullptr;

  explicit FakeModule(const char* kernel) : fatbin(kernel) { handle = __cudaRegisterFatBinary(&fatbin.wrapper); }
  void add(const void* stub, const char* name) {
    __cudaRegisterFunction(handle, static_cast<const char*>(stub), const_cast<char*>(name), name, -1, nullptr,
                           nullptr, nullptr, nullptr, nullptr);
  }
};

// Registers `stub` as the kernel `name` of a fat binary of its own, once per process (as nvcc's
// host code does at start-up).
void register_kernel(const void* stub, const char* name) {
  static std::map<const void*, std::unique_ptr<FakeModule>> modules;
  std::unique_ptr<FakeModule>& module = modules[stub];
  if (module) return;
  module = std::make_unique<FakeModule>(name);
  module->add(stub, name);
  __cudaRegisterFatBinaryEnd(module->handle);
}

// Host stubs: only their addresses matter.
void registered_stub() {}
void unregistered_stub() {}
void misnamed_stub() {}
void attribute_stub() {}
void launch_ex_stub() {}
void ptx_stub() {}

}  // namespace

TEST_CASE("runtime: registered kernels launch through <<<>>> and cudaLaunchKernel", "[runtime][launch]") {
  static FakeModule module("_Z6kernelPf");
  module.add(reinterpret_cast<const void*>(&registered_stub), "_Z6kernelPf");
  module.add(reinterpret_cast<const void*>(&misnamed_stub), "_Z5otherv");  // not in the image
  __cudaRegisterFatBinaryEnd(module.handle);

  // <<<grid, block, shared, stream>>>: push, then the stub pops and launches.
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE(__cudaPushCallConfiguration(dim3(64), dim3(128), 256, stream) == 0);
  dim3 grid, block;
  size_t shared = 0;
  cudaStream_t popped = nullptr;
  REQUIRE_CUDA(__cudaPopCallConfiguration(&grid, &block, &shared, &popped));
  CHECK((grid.x == 64 && block.x == 128 && shared == 256 && popped == stream));
  CHECK(name(__cudaPopCallConfiguration(&grid, &block, &shared, &popped)) == "cudaErrorMissingConfiguration");
  cudaKernel_t kernel = nullptr;
  REQUIRE_CUDA(__cudaGetKernel(&kernel, reinterpret_cast<const void*>(&registered_stub)));
  float* data = nullptr;
  void* args[] = {&data};
  CHECK_CUDA(__cudaLaunchKernel(kernel, grid, block, args, shared, popped));
  CHECK_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&registered_stub), dim3(2, 2), dim3(32, 32), args, 0,
                              stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));

  // What the runtime refuses before the driver sees it.
  CHECK(name(cudaLaunchKernel(reinterpret_cast<const void*>(&registered_stub), dim3(1), dim3(2048), args, 0,
                              stream)) == "cudaErrorInvalidConfiguration");
  CHECK(name(cudaLaunchKernel(reinterpret_cast<const void*>(&registered_stub), dim3(0), dim3(1), args, 0, stream)) ==
        "cudaErrorInvalidConfiguration");
  CHECK(name(cudaLaunchKernel(reinterpret_cast<const void*>(&registered_stub), dim3(1), dim3(1), args, 65536,
                              stream)) == "cudaErrorInvalidConfiguration");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidConfiguration");  // recorded, not sticky
  CHECK_CUDA(cudaGetLastError());
  CHECK(name(cudaLaunchKernel(reinterpret_cast<const void*>(&unregistered_stub), dim3(1), dim3(1), args, 0,
                              stream)) == "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaLaunchKernel(reinterpret_cast<const void*>(&misnamed_stub), dim3(1), dim3(1), args, 0, stream)) ==
        "cudaErrorInvalidDeviceFunction");
  CHECK(name(__cudaLaunchKernel(nullptr, dim3(1), dim3(1), args, 0, stream)) == "cudaErrorInvalidDeviceFunction");
  (void)cudaGetLastError();

  // A kernel handle stays valid across cudaDeviceReset (libraries are context-independent).
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaDeviceReset());
  CHECK_CUDA(__cudaLaunchKernel(kernel, dim3(1), dim3(1), args, 0, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
}

TEST_CASE("runtime: cudaLaunchKernelExC and cooperative launches", "[runtime][launch]") {
  const void* stub = reinterpret_cast<const void*>(&launch_ex_stub);
  register_kernel(stub, "_Z9launch_exv");
  int device = 0, cooperative = 0;
  REQUIRE_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  CHECK(cooperative == 1);
  int per_sm = 0, sms = 0;
  REQUIRE_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stub, 256, 0));
  REQUIRE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned fits = static_cast<unsigned>(per_sm * sms);

  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributePriority;
  attrs[1].id = cudaLaunchAttributeCooperative;
  attrs[1].val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(fits);
  config.blockDim = dim3(256);
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 2;
  Gate gate;  // ordered on its stream like any launch
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  CHECK_CUDA(cudaLaunchKernelExC(&config, stub, nullptr));
  CHECK(name(cudaStreamQuery(stream)) == "cudaErrorNotReady");
  gate.open();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  config.gridDim = dim3(fits + 1);
  CHECK(name(cudaLaunchKernelExC(&config, stub, nullptr)) == "cudaErrorCooperativeLaunchTooLarge");
  CHECK(name(cudaGetLastError()) == "cudaErrorCooperativeLaunchTooLarge");
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = 3, attrs[1].val.clusterDim.y = 1, attrs[1].val.clusterDim.z = 1;
  config.gridDim = dim3(8);
  CHECK(name(cudaLaunchKernelExC(&config, stub, nullptr)) == "cudaErrorInvalidClusterSize");
  int clusters = 0, cluster_size = 0;  // clusters of 3 blocks of 256 threads resident at once
  CHECK_CUDA(cudaOccupancyMaxActiveClusters(&clusters, stub, &config));
  CHECK(clusters == static_cast<int>(fits) / 3);
  CHECK_CUDA(cudaOccupancyMaxPotentialClusterSize(&cluster_size, stub, &config));
  CHECK(cluster_size == 8);
  CHECK(name(cudaOccupancyMaxActiveClusters(&clusters, stub, nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(&unregistered_stub), &config)) ==
        "cudaErrorInvalidDeviceFunction");
  config.gridDim = dim3(9);
  CHECK_CUDA(cudaLaunchKernelExC(&config, stub, nullptr));
  config.blockDim = dim3(2048);
  CHECK(name(cudaLaunchKernelExC(&config, stub, nullptr)) == "cudaErrorInvalidConfiguration");
  config.blockDim = dim3(256);
  CHECK(name(cudaLaunchKernelExC(nullptr, stub, nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaLaunchKernelExC(&config, nullptr, nullptr)) == "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&unregistered_stub), nullptr)) ==
        "cudaErrorInvalidDeviceFunction");
  config.attrs = nullptr;
  CHECK(name(cudaLaunchKernelExC(&config, stub, nullptr)) == "cudaErrorInvalidValue");

  CHECK_CUDA(cudaLaunchCooperativeKernel(stub, dim3(fits), dim3(256), nullptr, 0, stream));
  CHECK(name(cudaLaunchCooperativeKernel(stub, dim3(fits + 1), dim3(256), nullptr, 0, stream)) ==
        "cudaErrorCooperativeLaunchTooLarge");
  CHECK(name(cudaLaunchCooperativeKernel(stub, dim3(1), dim3(0), nullptr, 0, stream)) ==
        "cudaErrorInvalidConfiguration");
  CHECK(name(cudaLaunchCooperativeKernel(nullptr, dim3(1), dim3(1), nullptr, 0, stream)) ==
        "cudaErrorInvalidDeviceFunction");
  cudaGetLastError();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: libraries, cudaGetKernel and cudaFuncGetName", "[runtime][launch]") {
  const char ptx[] = ".version 8.0\n.target sm_80\n.entry lib_a()\n{ ret; }\n.entry lib_b()\n{ ret; }\n";
  cudaLibrary_t library = nullptr;
  REQUIRE_CUDA(cudaLibraryLoadData(&library, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  unsigned count = 0;
  CHECK_CUDA(cudaLibraryGetKernelCount(&count, library));
  CHECK(count == 2);
  cudaKernel_t kernels[2] = {};
  CHECK_CUDA(cudaLibraryEnumerateKernels(kernels, 2, library));
  cudaKernel_t b = nullptr;
  CHECK_CUDA(cudaLibraryGetKernel(&b, library, "lib_b"));
  CHECK(kernels[1] == b);
  CHECK(name(cudaLibraryGetKernel(&b, library, "lib_c")) == "cudaErrorSymbolNotFound");
  CHECK(name(cudaLibraryGetKernelCount(nullptr, library)) == "cudaErrorInvalidValue");
  void* unified = nullptr;
  CHECK(name(cudaLibraryGetUnifiedFunction(&unified, library, "lib_a")) == "cudaErrorSymbolNotFound");
  CHECK_CUDA(cudaLibraryUnload(library));
  CHECK(name(cudaLibraryUnload(library)) == "cudaErrorInvalidResourceHandle");
  CHECK(name(cudaLibraryEnumerateKernels(kernels, 2, library)) == "cudaErrorInvalidResourceHandle");
  CHECK(name(cudaLibraryLoadFromFile(&library, "/nonexistent/cudasim.cubin", nullptr, nullptr, 0, nullptr, nullptr,
                                     0)) == "cudaErrorFileNotFound");
  const char garbage[] = "not an image";
  CHECK(name(cudaLibraryLoadData(&library, garbage, nullptr, nullptr, 0, nullptr, nullptr, 0)) ==
        "cudaErrorInvalidKernelImage");
  cudaGetLastError();

  const void* stub = reinterpret_cast<const void*>(&launch_ex_stub);
  register_kernel(stub, "_Z9launch_exv");
  cudaKernel_t kernel = nullptr;
  CHECK_CUDA(cudaGetKernel(&kernel, stub));
  CHECK(kernel != nullptr);
  const char* device_name = nullptr;
  CHECK_CUDA(cudaFuncGetName(&device_name, stub));
  CHECK(std::string(device_name) == "_Z9launch_exv");
  CHECK(name(cudaGetKernel(&kernel, reinterpret_cast<const void*>(&unregistered_stub))) ==
        "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaGetKernel(nullptr, stub)) == "cudaErrorInvalidValue");
  int device = 0;
  REQUIRE_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536, device));
  cudaFuncAttributes attributes{};
  CHECK_CUDA(cudaFuncGetAttributes(&attributes, stub));  // the stub's kernel is that kernel
  CHECK(attributes.maxDynamicSharedSizeBytes == 65536);
  CHECK(name(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 30, device)) ==
        "cudaErrorInvalidValue");
  CHECK_CUDA(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 49152, device));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK_CUDA(cudaFuncSetSharedMemConfig(stub, cudaSharedMemBankSizeFourByte));
  CHECK(name(cudaFuncSetSharedMemConfig(stub, static_cast<cudaSharedMemConfig>(3))) == "cudaErrorInvalidValue");
  CHECK(name(cudaFuncSetSharedMemConfig(reinterpret_cast<const void*>(&unregistered_stub),
                                        cudaSharedMemBankSizeDefault)) == "cudaErrorInvalidDeviceFunction");
#pragma GCC diagnostic pop
  cudaFunction_t function = nullptr;  // the kernel handle, launchable through the driver
  CHECK_CUDA(cudaGetFuncBySymbol(&function, stub));
  CHECK(reinterpret_cast<void*>(function) == reinterpret_cast<void*>(kernel));
  CHECK(name(cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(&unregistered_stub))) ==
        "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaGetFuncBySymbol(nullptr, stub)) == "cudaErrorInvalidValue");
  CHECK(name(cudaFuncGetName(nullptr, stub)) == "cudaErrorInvalidValue");
  CHECK(name(cudaFuncGetName(&device_name, nullptr)) == "cudaErrorInvalidDeviceFunction");
  // The fake fat binary holds no PTX: no parameter list to read.
  size_t offset = 0, size = 0;
  CHECK(name(cudaFuncGetParamInfo(stub, 0, &offset, &size)) == "cudaErrorNotSupported");
  CHECK(name(cudaFuncGetParamInfo(reinterpret_cast<const void*>(&unregistered_stub), 0, &offset, &size)) ==
        "cudaErrorInvalidDeviceFunction");
  // A fat binary whose kernel is declared in PTX: its layout is read.
  static FakeModule ptx_module(".entry _Z5ptx_kPfi(.param .u64 p0, .param .u32 p1)");
  ptx_module.add(reinterpret_cast<const void*>(&ptx_stub), "_Z5ptx_kPfi");
  __cudaRegisterFatBinaryEnd(ptx_module.handle);
  CHECK_CUDA(cudaFuncGetParamInfo(reinterpret_cast<const void*>(&ptx_stub), 1, &offset, &size));
  CHECK((offset == 8 && size == 4));
  CHECK(name(cudaFuncGetParamInfo(reinterpret_cast<const void*>(&ptx_stub), 2, &offset, &size)) ==
        "cudaErrorInvalidValue");
  cudaGetLastError();
}

TEST_CASE("runtime: function attributes and occupancy of registered kernels", "[runtime][launch]") {
  register_kernel(reinterpret_cast<const void*>(&attribute_stub), "_Z8attrworkv");
  const void* stub = reinterpret_cast<const void*>(&attribute_stub);
  cudaFuncAttributes attributes{};
  REQUIRE_CUDA(cudaFuncGetAttributes(&attributes, stub));
  CHECK(attributes.maxThreadsPerBlock == 1024);
  CHECK(attributes.numRegs == 32);
  CHECK(attributes.binaryVersion == 90);
  CHECK(attributes.sharedSizeBytes == 0);
  CHECK(attributes.maxDynamicSharedSizeBytes == 48 * 1024);
  CHECK(attributes.preferredShmemCarveout == -1);
  CHECK(name(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&unregistered_stub))) ==
        "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaFuncGetAttributes(nullptr, stub)) == "cudaErrorInvalidValue");

  // A launch with more than 48 KiB of dynamic shared memory needs the kernel to opt in.
  void* args[] = {nullptr};
  CHECK(name(cudaLaunchKernel(stub, dim3(1), dim3(32), args, 64 * 1024, nullptr)) == "cudaErrorInvalidConfiguration");
  REQUIRE_CUDA(cudaFuncSetAttribute(stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
  REQUIRE_CUDA(cudaFuncGetAttributes(&attributes, stub));
  CHECK(attributes.maxDynamicSharedSizeBytes == 96 * 1024);
  CHECK_CUDA(cudaLaunchKernel(stub, dim3(1), dim3(32), args, 64 * 1024, nullptr));
  CHECK(name(cudaFuncSetAttribute(stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 20)) ==
        "cudaErrorInvalidValue");
  CHECK_CUDA(cudaFuncSetAttribute(stub, cudaFuncAttributePreferredSharedMemoryCarveout, 25));
  CHECK_CUDA(cudaFuncSetCacheConfig(stub, cudaFuncCachePreferShared));
  CHECK_CUDA(cudaDeviceSynchronize());

  int blocks = -1;
  REQUIRE_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, stub, 256, 0));
  CHECK(blocks == 8);
  REQUIRE_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, stub, 64, 90 * 1024,
                                                                      cudaOccupancyDefault));
  CHECK(blocks == 2);  // 233472 bytes per multiprocessor, 1 KiB reserved per block
  size_t available = 0;
  REQUIRE_CUDA(cudaOccupancyAvailableDynamicSMemPerBlock(&available, stub, 4, 256));
  CHECK(available == 233472 / 4 - 1024);
  // The toolkit's own header-only helper over these calls.
  int grid = 0, block = 0;
  REQUIRE_CUDA(cudaOccupancyMaxPotentialBlockSize(&grid, &block, static_cast<const char*>(stub), 0, 0));
  CHECK(block == 1024);
  CHECK(grid == 2 * 132);
}

namespace {
void graph_stub() {}
void CUDART_CB count_host_node(void* counter) { ++*static_cast<int*>(counter); }
// Device memory set to zero before anything else runs.
void* zeroed_device(size_t bytes) {
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, bytes));
  REQUIRE_CUDA(cudaMemset(dev, 0, bytes));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  return dev;
}
// A memset node's parameters: `width` bytes at dst set to value.
cudaMemsetParams bytes_set(void* dst, int value, size_t width) {
  cudaMemsetParams p{};
  p.dst = dst;
  p.value = value;
  p.elementSize = 1;
  p.width = width;
  p.height = 1;
  return p;
}
}  // namespace

TEST_CASE("runtime: graphs built node by node and captured, instantiated and launched", "[runtime][graph]") {
  register_kernel(reinterpret_cast<const void*>(&graph_stub), "_Z9graphstepv");
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, 4096));
  std::vector<unsigned char> host(4096, 0);
  int calls = 0;
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t set = nullptr, copy = nullptr, kernel = nullptr, after = nullptr;
  cudaMemsetParams memset = bytes_set(dev, 0x5a, 4096);
  REQUIRE_CUDA(cudaGraphAddMemsetNode(&set, graph, nullptr, 0, &memset));
  cudaKernelNodeParams launch{};
  launch.func = reinterpret_cast<void*>(&graph_stub);
  launch.gridDim = dim3(4);
  launch.blockDim = dim3(64);
  REQUIRE_CUDA(cudaGraphAddKernelNode(&kernel, graph, &set, 1, &launch));
  REQUIRE_CUDA(cudaGraphAddMemcpyNode1D(&copy, graph, &kernel, 1, host.data(), dev, 4096, cudaMemcpyDeviceToHost));
  cudaHostNodeParams counter{count_host_node, &calls};
  REQUIRE_CUDA(cudaGraphAddHostNode(&after, graph, &copy, 1, &counter));
  size_t count = 0;
  REQUIRE_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
  CHECK(count == 4);
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  REQUIRE_CUDA(cudaGraphNodeGetType(kernel, &type));
  CHECK(type == cudaGraphNodeTypeKernel);
  cudaGraphNode_t deps[2] = {};
  count = 2;
  REQUIRE_CUDA(cudaGraphNodeGetDependencies(after, deps, nullptr, &count));
  CHECK((count == 1 && deps[0] == copy));
  cudaKernelNodeParams unregistered = launch;
  unregistered.func = reinterpret_cast<void*>(&unregistered_stub);
  cudaGraphNode_t bad = nullptr;
  CHECK(name(cudaGraphAddKernelNode(&bad, graph, nullptr, 0, &unregistered)) == "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaGraphAddMemcpyNode1D(&bad, graph, nullptr, 0, host.data(), dev, 16, static_cast<cudaMemcpyKind>(9))) ==
        "cudaErrorInvalidMemcpyDirection");
  (void)cudaGetLastError();

  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(host[0] == 0x5a);
  CHECK(host[4095] == 0x5a);
  CHECK(calls == 1);
  REQUIRE_CUDA(cudaGraphLaunch(exec, cudaStreamPerThread));
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(calls == 2);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));

  // Captured work, instantiated with an upload.
  REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  REQUIRE_CUDA(cudaMemsetAsync(dev, 0x6b, 4096, stream));
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, count_host_node, &calls));
  REQUIRE_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphInstantiateParams params{};
  params.flags = cudaGraphInstantiateFlagUpload;
  params.uploadStream = stream;
  REQUIRE_CUDA(cudaGraphInstantiateWithParams(&exec, graph, &params));
  CHECK(params.result_out == cudaGraphInstantiateSuccess);
  CHECK(calls == 2);
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaMemcpy(host.data(), dev, 4096, cudaMemcpyDeviceToHost));  // the legacy stream: a blocking
  REQUIRE_CUDA(cudaStreamSynchronize(stream));                                  // stream's launch is not waited for
  REQUIRE_CUDA(cudaMemcpy(host.data(), dev, 4096, cudaMemcpyDeviceToHost));
  CHECK(host[100] == 0x6b);
  CHECK(calls == 3);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  CHECK(name(cudaGraphLaunch(exec, stream)) == "cudaErrorInvalidValue");
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(dev));
}

TEST_CASE("runtime: pinned host memory", "[runtime][host]") {
  void* pinned = nullptr;
  REQUIRE_CUDA(cudaMallocHost(&pinned, kMiB));
  void* device = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(&device, pinned, 0));
  CHECK(device == pinned);
  unsigned flags = 0;
  CHECK_CUDA(cudaHostGetFlags(&flags, pinned));
  CHECK((flags & cudaHostAllocMapped) != 0);
  cudaPointerAttributes attributes{};
  CHECK_CUDA(cudaPointerGetAttributes(&attributes, pinned));
  CHECK(attributes.type == cudaMemoryTypeHost);
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK(name(cudaFreeHost(pinned)) == "cudaErrorInvalidValue");
  (void)cudaGetLastError();
  CHECK_CUDA(cudaFreeHost(nullptr));

  void* none = reinterpret_cast<void*>(1);
  CHECK_CUDA(cudaHostAlloc(&none, 0, cudaHostAllocDefault));
  CHECK(none == nullptr);
  CHECK(name(cudaHostAlloc(&none, kMiB, 0x100)) == "cudaErrorInvalidValue");
  (void)cudaGetLastError();

  std::vector<char> pageable(2 * kMiB);
  CHECK_CUDA(cudaHostRegister(pageable.data(), pageable.size(), cudaHostRegisterDefault));
  CHECK(name(cudaHostRegister(pageable.data(), kMiB, cudaHostRegisterDefault)) ==
        "cudaErrorHostMemoryAlreadyRegistered");
  CHECK_CUDA(cudaHostUnregister(pageable.data()));
  CHECK(name(cudaHostUnregister(pageable.data())) == "cudaErrorHostMemoryNotRegistered");
  (void)cudaGetLastError();
}

TEST_CASE("runtime: peer access between two devices", "[runtime][peers]") {
  int can = -1;
  CHECK_CUDA(cudaDeviceCanAccessPeer(&can, 0, 1));
  CHECK(can == 1);
  CHECK(name(cudaDeviceCanAccessPeer(&can, 0, 7)) == "cudaErrorInvalidDevice");
  int value = -1;
  CHECK_CUDA(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, 1));
  CHECK(value == 1);
  REQUIRE_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaDeviceEnablePeerAccess(1, 0));
  CHECK(name(cudaDeviceEnablePeerAccess(1, 0)) == "cudaErrorPeerAccessAlreadyEnabled");
  CHECK(name(cudaDeviceEnablePeerAccess(0, 0)) == "cudaErrorInvalidDevice");  // not its own peer
  CHECK(name(cudaDeviceEnablePeerAccess(1, 3)) == "cudaErrorInvalidValue");
  CHECK_CUDA(cudaDeviceDisablePeerAccess(1));
  CHECK(name(cudaDeviceDisablePeerAccess(1)) == "cudaErrorPeerAccessNotEnabled");
  (void)cudaGetLastError();
}

TEST_CASE("runtime: copies between two devices' memory", "[runtime][peers]") {
  void* on0 = nullptr;
  void* on1 = nullptr;
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaMalloc(&on1, 4096));
  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaMalloc(&on0, 4096));
  REQUIRE_CUDA(cudaMemset(on0, 0x29, 4096));
  REQUIRE_CUDA(cudaMemcpyPeer(on1, 1, on0, 0, 4096));
  std::vector<unsigned char> back(4096);
  REQUIRE_CUDA(cudaMemcpy(back.data(), on1, 4096, cudaMemcpyDeviceToHost));
  CHECK(back[4095] == 0x29);
  REQUIRE_CUDA(cudaMemset(on1, 0x30, 4096));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  REQUIRE_CUDA(cudaMemcpyPeerAsync(on0, 0, on1, 1, 2048, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  REQUIRE_CUDA(cudaMemcpy(back.data(), on0, 4096, cudaMemcpyDeviceToHost));
  CHECK(back[2047] == 0x30);
  CHECK(back[2048] == 0x29);
  CHECK(name(cudaMemcpyPeer(on1, 7, on0, 0, 16)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaMemcpyPeer(on1, 1, on0, 0, 8192)) == "cudaErrorInvalidValue");  // past the allocations
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(on0));
  REQUIRE_CUDA(cudaFree(on1));
}

TEST_CASE("runtime: graph memory attributes and trim reach the driver's device", "[runtime][graph]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  std::uint64_t before = 0, used = 0, reserved = 0;
  REQUIRE_CUDA(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &before));
  REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  void* scratch = nullptr;
  REQUIRE_CUDA(cudaMallocAsync(&scratch, 2 << 20, stream));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(stream, &graph));
  REQUIRE_CUDA(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  REQUIRE_CUDA(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
  CHECK(used >= before + (2 << 20));
  CHECK(reserved == used);
  // The other device's graphs hold nothing.
  std::uint64_t other = 1;
  REQUIRE_CUDA(cudaDeviceGetGraphMemAttribute(1, cudaGraphMemAttrUsedMemCurrent, &other));
  CHECK(other == 0);
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaDeviceGraphMemTrim(0));
  std::uint64_t zero = 0, high = 0;
  REQUIRE_CUDA(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
  REQUIRE_CUDA(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  CHECK(high == before);
  CHECK(cudaDeviceGetGraphMemAttribute(7, cudaGraphMemAttrUsedMemCurrent, &high) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: memory nodes built by hand", "[runtime][graph]") {
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaMemAllocNodeParams params{};
  params.poolProps.allocType = cudaMemAllocationTypePinned;
  params.poolProps.location = {cudaMemLocationTypeDevice, 0};
  params.bytesize = 2048;
  cudaGraphNode_t alloc = nullptr, set = nullptr, copy = nullptr, release = nullptr;
  REQUIRE_CUDA(cudaGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params));
  REQUIRE(params.dptr != nullptr);
  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, params.dptr));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  cudaMemsetParams memset = bytes_set(params.dptr, 0x3c, 2048);
  REQUIRE_CUDA(cudaGraphAddMemsetNode(&set, graph, &alloc, 1, &memset));
  std::vector<unsigned char> host(2048, 0);
  REQUIRE_CUDA(cudaGraphAddMemcpyNode1D(&copy, graph, &set, 1, host.data(), params.dptr, 2048, cudaMemcpyDeviceToHost));
  REQUIRE_CUDA(cudaGraphAddMemFreeNode(&release, graph, &copy, 1, params.dptr));
  CHECK(cudaGraphAddMemFreeNode(&release, graph, &copy, 1, params.dptr) == cudaErrorInvalidValue);  // twice
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaMemAllocNodeParams got{};
  REQUIRE_CUDA(cudaGraphMemAllocNodeGetParams(alloc, &got));
  CHECK(got.dptr == params.dptr);
  CHECK(got.bytesize == 2048);
  CHECK(got.poolProps.allocType == cudaMemAllocationTypePinned);
  CHECK(got.poolProps.location.type == cudaMemLocationTypeDevice);
  void* freed = nullptr;
  REQUIRE_CUDA(cudaGraphMemFreeNodeGetParams(release, &freed));
  CHECK(freed == params.dptr);
  CHECK(cudaGraphMemFreeNodeGetParams(alloc, &freed) == cudaErrorInvalidValue);
  cudaMemAllocNodeParams no_size = params;
  no_size.bytesize = 0;
  CHECK(cudaGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &no_size) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(host[0] == 0x3c);
  CHECK(host[2047] == 0x3c);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
}

TEST_CASE("runtime: edges, node removal and clones", "[runtime][graph]") {
  cudaGraph_t graph = nullptr, clone = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t first = nullptr, second = nullptr;
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&first, graph, nullptr, 0));
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&second, graph, nullptr, 0));
  REQUIRE_CUDA(cudaGraphAddDependencies(graph, &first, &second, nullptr, 1));
  CHECK(cudaGraphAddDependencies(graph, &first, &second, nullptr, 1) == cudaErrorInvalidValue);  // exists
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaGraphNode_t from = nullptr, to = nullptr;
  cudaGraphEdgeData data{};
  size_t count = 1;
  REQUIRE_CUDA(cudaGraphGetEdges(graph, &from, &to, &data, &count));
  CHECK(count == 1);
  CHECK((from == first && to == second));
  REQUIRE_CUDA(cudaGraphClone(&clone, graph));
  REQUIRE_CUDA(cudaGraphRemoveDependencies(graph, &first, &second, nullptr, 1));
  REQUIRE_CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  CHECK(count == 0);
  REQUIRE_CUDA(cudaGraphGetEdges(clone, nullptr, nullptr, nullptr, &count));
  CHECK(count == 1);  // the clone keeps its own
  REQUIRE_CUDA(cudaGraphDestroyNode(second));
  REQUIRE_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
  CHECK(count == 1);
  CHECK(cudaGraphDestroyNode(second) == cudaErrorInvalidValue);
  cudaMemAllocNodeParams params{};
  params.poolProps.allocType = cudaMemAllocationTypePinned;
  params.poolProps.location = {cudaMemLocationTypeDevice, 0};
  params.bytesize = 256;
  cudaGraphNode_t alloc = nullptr;
  REQUIRE_CUDA(cudaGraphAddMemAllocNode(&alloc, graph, &first, 1, &params));
  CHECK(cudaGraphClone(&clone, graph) == cudaErrorNotSupported);
  CHECK(cudaGetLastError() == cudaErrorNotSupported);
  REQUIRE_CUDA(cudaGraphDestroy(clone));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
}

TEST_CASE("runtime: child graph nodes", "[runtime][graph]") {
  cudaGraph_t child = nullptr, parent = nullptr, embedded = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&child, 0));
  REQUIRE_CUDA(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t node = nullptr, embed = nullptr;
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&node, child, nullptr, 0));
  REQUIRE_CUDA(cudaGraphAddChildGraphNode(&embed, parent, nullptr, 0, child));
  REQUIRE_CUDA(cudaGraphChildGraphNodeGetGraph(embed, &embedded));
  CHECK(embedded != child);  // a copy, owned by the node
  size_t count = 0;
  REQUIRE_CUDA(cudaGraphGetNodes(embedded, nullptr, &count));
  CHECK(count == 1);
  CHECK(cudaGraphDestroy(embedded) == cudaErrorInvalidValue);
  CHECK(cudaGraphChildGraphNodeGetGraph(node, &embedded) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, parent, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, 0));
  REQUIRE_CUDA(cudaStreamSynchronize(0));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(child));
  REQUIRE_CUDA(cudaGraphDestroy(parent));
}

namespace {
void count_host_call(void* counter) { ++*static_cast<int*>(counter); }
}  // namespace

TEST_CASE("runtime: host node parameters", "[runtime][graph]") {
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  int first = 0, second = 0;
  cudaHostNodeParams params{count_host_call, &first};
  cudaGraphNode_t host = nullptr;
  REQUIRE_CUDA(cudaGraphAddHostNode(&host, graph, nullptr, 0, &params));
  cudaHostNodeParams got{};
  REQUIRE_CUDA(cudaGraphHostNodeGetParams(host, &got));
  CHECK(got.userData == &first);
  params.userData = &second;
  REQUIRE_CUDA(cudaGraphHostNodeSetParams(host, &params));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, 0));
  REQUIRE_CUDA(cudaStreamSynchronize(0));
  CHECK(first == 0);
  CHECK(second == 1);
  params.fn = nullptr;
  CHECK(cudaGraphHostNodeSetParams(host, &params) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
}

namespace {
void other_graph_stub() {}
void CUDART_CB add_ten(void* counter) { *static_cast<int*>(counter) += 10; }
}  // namespace

TEST_CASE("runtime: graph node parameters read back and replaced, in graphs and executable graphs",
          "[runtime][graph]") {
  register_kernel(reinterpret_cast<const void*>(&graph_stub), "_Z9graphstepv");
  register_kernel(reinterpret_cast<const void*>(&other_graph_stub), "_Z10otherstepv");
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, 8192));
  REQUIRE_CUDA(cudaMemset(dev, 0, 8192));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  auto* bytes = static_cast<unsigned char*>(dev);
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t set = nullptr, copy = nullptr, kernel = nullptr, host = nullptr, record = nullptr, wait = nullptr;
  cudaMemsetParams memset = bytes_set(dev, 0x11, 64);
  REQUIRE_CUDA(cudaGraphAddMemsetNode(&set, graph, nullptr, 0, &memset));
  // A 2D copy inside device memory: 2 rows of 16 bytes, 256 apart, to 1024 on (rows 512 apart).
  cudaMemcpy3DParms rows{};
  rows.srcPtr = make_cudaPitchedPtr(dev, 256, 16, 2);
  rows.dstPtr = make_cudaPitchedPtr(bytes + 1024, 512, 16, 2);
  rows.extent = make_cudaExtent(16, 2, 1);
  rows.kind = cudaMemcpyDeviceToDevice;
  REQUIRE_CUDA(cudaGraphAddMemcpyNode(&copy, graph, &set, 1, &rows));
  cudaKernelNodeParams launch{};
  launch.func = reinterpret_cast<void*>(&graph_stub);
  launch.gridDim = dim3(2);
  launch.blockDim = dim3(32);
  REQUIRE_CUDA(cudaGraphAddKernelNode(&kernel, graph, &copy, 1, &launch));
  int calls = 0;
  const cudaHostNodeParams counter{count_host_node, &calls};
  REQUIRE_CUDA(cudaGraphAddHostNode(&host, graph, &kernel, 1, &counter));
  cudaEvent_t event = nullptr, other = nullptr;
  REQUIRE_CUDA(cudaEventCreate(&event));
  REQUIRE_CUDA(cudaEventCreate(&other));
  REQUIRE_CUDA(cudaGraphAddEventRecordNode(&record, graph, &host, 1, event));
  REQUIRE_CUDA(cudaGraphAddEventWaitNode(&wait, graph, nullptr, 0, other));

  // Read back as given: the kernel as its host stub, the copy with its kind and pitched pointers.
  cudaMemsetParams memset_back{};
  REQUIRE_CUDA(cudaGraphMemsetNodeGetParams(set, &memset_back));
  CHECK(memset_back.dst == dev);
  CHECK(memset_back.value == 0x11);
  CHECK(memset_back.width == 64);
  cudaMemcpy3DParms copy_back{};
  REQUIRE_CUDA(cudaGraphMemcpyNodeGetParams(copy, &copy_back));
  CHECK(copy_back.kind == cudaMemcpyDeviceToDevice);
  CHECK(copy_back.srcPtr.ptr == dev);
  CHECK(copy_back.srcPtr.pitch == 256);
  CHECK(copy_back.dstPtr.ptr == bytes + 1024);
  CHECK(copy_back.extent.height == 2);
  cudaKernelNodeParams kernel_back{};
  REQUIRE_CUDA(cudaGraphKernelNodeGetParams(kernel, &kernel_back));
  CHECK(kernel_back.func == reinterpret_cast<void*>(&graph_stub));
  CHECK(kernel_back.gridDim.x == 2);
  CHECK(kernel_back.blockDim.x == 32);
  cudaEvent_t got = nullptr;
  REQUIRE_CUDA(cudaGraphEventRecordNodeGetEvent(record, &got));
  CHECK(got == event);
  REQUIRE_CUDA(cudaGraphEventWaitNodeGetEvent(wait, &got));
  CHECK(got == other);
  REQUIRE_CUDA(cudaGraphEventWaitNodeSetEvent(wait, event));
  REQUIRE_CUDA(cudaGraphEventWaitNodeGetEvent(wait, &got));
  CHECK(got == event);
  REQUIRE_CUDA(cudaGraphEventRecordNodeSetEvent(record, other));

  // Replaced in the graph.
  memset.value = 0x22;
  REQUIRE_CUDA(cudaGraphMemsetNodeSetParams(set, &memset));
  launch.func = reinterpret_cast<void*>(&other_graph_stub);
  REQUIRE_CUDA(cudaGraphKernelNodeSetParams(kernel, &launch));
  REQUIRE_CUDA(cudaGraphKernelNodeGetParams(kernel, &kernel_back));
  CHECK(kernel_back.func == reinterpret_cast<void*>(&other_graph_stub));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  unsigned long long flags = 0;
  REQUIRE_CUDA(cudaGraphExecGetFlags(exec, &flags));
  CHECK(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  unsigned char back[1024 + 512 + 16] = {};
  REQUIRE_CUDA(cudaMemcpy(back, dev, sizeof back, cudaMemcpyDeviceToHost));
  CHECK(back[63] == 0x22);
  CHECK(back[1024 + 15] == 0x22);         // first row copied
  CHECK(back[1024 + 512 + 15] == 0);      // second row: from 256 on, beyond the memset
  CHECK(calls == 1);
  CHECK_CUDA(cudaEventQuery(other));

  // Replaced in the executable graph only.
  memset.value = 0x33;
  memset.width = 128;
  REQUIRE_CUDA(cudaGraphExecMemsetNodeSetParams(exec, set, &memset));
  const cudaHostNodeParams ten{add_ten, &calls};
  REQUIRE_CUDA(cudaGraphExecHostNodeSetParams(exec, host, &ten));
  REQUIRE_CUDA(cudaGraphExecKernelNodeSetParams(exec, kernel, &launch));
  REQUIRE_CUDA(cudaGraphExecEventRecordNodeSetEvent(exec, record, event));
  REQUIRE_CUDA(cudaGraphExecEventWaitNodeSetEvent(exec, wait, other));
  cudaMemcpy3DParms row_to_host{};
  row_to_host.srcPtr = make_cudaPitchedPtr(dev, 256, 16, 2);
  row_to_host.dstPtr = make_cudaPitchedPtr(back, 16, 16, 2);
  row_to_host.extent = make_cudaExtent(16, 2, 1);
  row_to_host.kind = cudaMemcpyDeviceToHost;
  CHECK(name(cudaGraphExecMemcpyNodeSetParams(exec, copy, &row_to_host)) == "cudaErrorInvalidValue");  // types
  REQUIRE_CUDA(cudaGraphExecMemcpyNodeSetParams1D(exec, copy, bytes + 4096, dev, 100, cudaMemcpyDeviceToDevice));
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  REQUIRE_CUDA(cudaMemcpy(back, bytes + 4096, 128, cudaMemcpyDeviceToHost));
  CHECK(back[99] == 0x33);
  CHECK(back[100] == 0);
  CHECK(calls == 11);
  REQUIRE_CUDA(cudaGraphMemsetNodeGetParams(set, &memset_back));
  CHECK(memset_back.value == 0x22);  // the graph's own parameters stay

  // cudaGraphExecUpdate from a graph of another shape fails and says why.
  cudaGraph_t smaller = nullptr;
  cudaGraphNode_t lone = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&smaller, 0));
  REQUIRE_CUDA(cudaGraphAddMemsetNode(&lone, smaller, nullptr, 0, &memset));
  cudaGraphExecUpdateResultInfo info{};
  CHECK(name(cudaGraphExecUpdate(exec, smaller, &info)) == "cudaErrorGraphExecUpdateFailure");
  CHECK(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  CHECK(info.errorNode == nullptr);
  // ... and from a clone succeeds.
  cudaGraph_t clone = nullptr;
  REQUIRE_CUDA(cudaGraphClone(&clone, graph));
  REQUIRE_CUDA(cudaGraphExecUpdate(exec, clone, &info));
  CHECK(info.result == cudaGraphExecUpdateSuccess);
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(calls == 12);  // the counting host node again

  // Refusals.
  CHECK(name(cudaGraphMemsetNodeGetParams(copy, &memset_back)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGraphKernelNodeGetParams(set, &kernel_back)) == "cudaErrorInvalidValue");
  cudaKernelNodeParams unregistered = launch;
  unregistered.func = reinterpret_cast<void*>(&unregistered_stub);
  CHECK(name(cudaGraphKernelNodeSetParams(kernel, &unregistered)) == "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaGraphExecKernelNodeSetParams(exec, kernel, &unregistered)) == "cudaErrorInvalidDeviceFunction");
  CHECK(name(cudaGraphMemcpyNodeSetParams1D(copy, dev, dev, 16, static_cast<cudaMemcpyKind>(7))) ==
        "cudaErrorInvalidMemcpyDirection");
  CHECK(name(cudaGraphAddEventRecordNode(&lone, smaller, nullptr, 0, nullptr)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGraphExecChildGraphNodeSetParams(exec, set, smaller)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGraphExecGetFlags(exec, nullptr)) == "cudaErrorInvalidValue");
  (void)cudaGetLastError();

  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  for (cudaGraph_t g : {graph, smaller, clone}) REQUIRE_CUDA(cudaGraphDestroy(g));
  REQUIRE_CUDA(cudaEventDestroy(event));
  REQUIRE_CUDA(cudaEventDestroy(other));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(dev));
}

TEST_CASE("runtime: nodes disabled in executable graphs, kernel node attributes", "[runtime][graph]") {
  register_kernel(reinterpret_cast<const void*>(&graph_stub), "_Z9graphstepv");
  void* dev = zeroed_device(256);
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t set = nullptr, kernel = nullptr, empty = nullptr;
  cudaMemsetParams memset = bytes_set(dev, 0x44, 16);
  REQUIRE_CUDA(cudaGraphAddMemsetNode(&set, graph, nullptr, 0, &memset));
  cudaKernelNodeParams launch{};
  launch.func = reinterpret_cast<void*>(&graph_stub);
  launch.gridDim = dim3(1);
  launch.blockDim = dim3(32);
  REQUIRE_CUDA(cudaGraphAddKernelNode(&kernel, graph, &set, 1, &launch));
  REQUIRE_CUDA(cudaGraphAddEmptyNode(&empty, graph, &kernel, 1));

  cudaKernelNodeAttrValue value{};
  value.priority = 3;
  REQUIRE_CUDA(cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributePriority, &value));
  value = cudaKernelNodeAttrValue{};
  REQUIRE_CUDA(cudaGraphKernelNodeGetAttribute(kernel, cudaKernelNodeAttributePriority, &value));
  CHECK(value.priority == 3);
  cudaGraphNode_t copied = nullptr;
  REQUIRE_CUDA(cudaGraphAddKernelNode(&copied, graph, nullptr, 0, &launch));
  REQUIRE_CUDA(cudaGraphKernelNodeCopyAttributes(copied, kernel));
  value = cudaKernelNodeAttrValue{};
  REQUIRE_CUDA(cudaGraphKernelNodeGetAttribute(copied, cudaKernelNodeAttributePriority, &value));
  CHECK(value.priority == 3);
  CHECK(name(cudaGraphKernelNodeGetAttribute(empty, cudaKernelNodeAttributePriority, &value)) ==
        "cudaErrorInvalidValue");
  CHECK(name(cudaGraphKernelNodeCopyAttributes(kernel, set)) == "cudaErrorInvalidValue");

  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphNodeSetEnabled(exec, set, 0));
  unsigned enabled = 1;
  REQUIRE_CUDA(cudaGraphNodeGetEnabled(exec, set, &enabled));
  CHECK(enabled == 0);
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  unsigned char first = 0xff;
  REQUIRE_CUDA(cudaMemcpy(&first, dev, 1, cudaMemcpyDeviceToHost));
  CHECK(first == 0);
  REQUIRE_CUDA(cudaGraphNodeSetEnabled(exec, set, 1));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  REQUIRE_CUDA(cudaMemcpy(&first, dev, 1, cudaMemcpyDeviceToHost));
  CHECK(first == 0x44);
  CHECK(name(cudaGraphNodeSetEnabled(exec, empty, 0)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGraphNodeGetEnabled(exec, set, nullptr)) == "cudaErrorInvalidValue");

  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaFree(dev));
}

TEST_CASE("runtime: the generic node calls", "[runtime][graph]") {
  register_kernel(reinterpret_cast<const void*>(&graph_stub), "_Z9graphstepv");
  void* dev = zeroed_device(256);
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNodeParams set{};
  set.type = cudaGraphNodeTypeMemset;
  set.memset = cudaMemsetParamsV2{dev, 0, 0x21, 1, 8, 1};
  cudaGraphNode_t set_node = nullptr, kernel_node = nullptr, copy_node = nullptr;
  REQUIRE_CUDA(cudaGraphAddNode(&set_node, graph, nullptr, nullptr, 0, &set));
  cudaGraphNodeParams kernel{};
  kernel.type = cudaGraphNodeTypeKernel;
  kernel.kernel.func = reinterpret_cast<void*>(&graph_stub);
  kernel.kernel.gridDim = dim3(1);
  kernel.kernel.blockDim = dim3(32);
  REQUIRE_CUDA(cudaGraphAddNode(&kernel_node, graph, &set_node, nullptr, 1, &kernel));
  unsigned char host[8] = {};
  cudaGraphNodeParams copy{};
  copy.type = cudaGraphNodeTypeMemcpy;
  copy.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(dev, 8, 8, 1);
  copy.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(host, 8, 8, 1);
  copy.memcpy.copyParams.extent = make_cudaExtent(8, 1, 1);
  copy.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
  REQUIRE_CUDA(cudaGraphAddNode(&copy_node, graph, &kernel_node, nullptr, 1, &copy));
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  REQUIRE_CUDA(cudaGraphNodeGetType(kernel_node, &type));
  CHECK(type == cudaGraphNodeTypeKernel);

  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  CHECK(host[7] == 0x21);
  set.memset.value = 0x32;
  REQUIRE_CUDA(cudaGraphExecNodeSetParams(exec, set_node, &set));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  CHECK(host[0] == 0x32);
  set.memset.value = 0x43;
  REQUIRE_CUDA(cudaGraphNodeSetParams(set_node, &set));
  cudaMemsetParams back{};
  REQUIRE_CUDA(cudaGraphMemsetNodeGetParams(set_node, &back));
  CHECK(back.value == 0x43);

  // Refusals: another node's type, the copy's reserved fields, an unregistered kernel, types not
  // simulated.
  CHECK(name(cudaGraphNodeSetParams(kernel_node, &set)) == "cudaErrorInvalidValue");
  copy.memcpy.flags = 1;
  cudaGraphNode_t bad = nullptr;
  CHECK(name(cudaGraphAddNode(&bad, graph, nullptr, nullptr, 0, &copy)) == "cudaErrorInvalidValue");
  kernel.kernel.func = reinterpret_cast<void*>(&unregistered_stub);
  CHECK(name(cudaGraphAddNode(&bad, graph, nullptr, nullptr, 0, &kernel)) == "cudaErrorInvalidDeviceFunction");
  cudaGraphNodeParams semaphore{};  // a type not simulated
  semaphore.type = cudaGraphNodeTypeExtSemaphoreSignal;
  CHECK(name(cudaGraphAddNode(&bad, graph, nullptr, nullptr, 0, &semaphore)) == "cudaErrorNotSupported");
  CHECK(name(cudaGraphAddNode(&bad, graph, nullptr, nullptr, 0, nullptr)) == "cudaErrorInvalidValue");

  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaFree(dev));
}
