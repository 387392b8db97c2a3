// Copies with rows and slices, copies to and from arrays, 2D/3D sets and copies by symbol through
// the simulated runtime: cudaMemcpy2D*, cudaMemcpy3D* (array positions and widths in elements),
// cudaMemcpy3DPeer*, cudaMemset2D/3D*, cudaMemcpyToSymbol / FromSymbol*, cudaGetSymbolAddress /
// Size and the symbol copy nodes of graphs. Two devices.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "runtime_support.h"

using namespace runtime_test;

// nvcc's generated code declares these itself (crt/host_runtime.h).
extern "C" {
void** __cudaRegisterFatBinary(void* fatCubin);
void __cudaRegisterFatBinaryEnd(void** fatCubinHandle);
void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress, const char* deviceName, int ext,
                       size_t size, int constant, int global);
}

namespace {

std::vector<unsigned char> pattern(size_t bytes, unsigned char seed = 1) {
  std::vector<unsigned char> v(bytes);
  std::iota(v.begin(), v.end(), seed);
  return v;
}

// The host shadows of two __device__ variables, as nvcc's host code defines them (with their
// initialisers), registered once per process.
int g_counter[4] = {10, 20, 30, 40};
double g_scale = 2.5;

void register_variables() {
  static bool done = [] {
    static FakeFatbin fatbin("_Z6kernelv");
    void** handle = __cudaRegisterFatBinary(&fatbin.wrapper);
    __cudaRegisterVar(handle, reinterpret_cast<char*>(g_counter), reinterpret_cast<char*>(g_counter), "g_counter", 0,
                      sizeof g_counter, 0, 0);
    __cudaRegisterVar(handle, reinterpret_cast<char*>(&g_scale), reinterpret_cast<char*>(&g_scale), "g_scale", 0,
                      sizeof g_scale, 1, 0);
    __cudaRegisterFatBinaryEnd(handle);
    return true;
  }();
  (void)done;
}

}  // namespace

TEST_CASE("runtime copies: cudaMemcpy2D between pitched memory, and its errors", "[runtime][copies]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  void* dev = nullptr;
  size_t pitch = 0;
  REQUIRE_CUDA(cudaMallocPitch(&dev, &pitch, 100, 6));
  REQUIRE(pitch >= 100);
  REQUIRE_CUDA(cudaMemset2D(dev, pitch, 0x11, 100, 6));
  const auto src = pattern(40 * 3);
  REQUIRE_CUDA(cudaMemcpy2D(static_cast<char*>(dev) + pitch + 10, pitch, src.data(), 40, 40, 3, cudaMemcpyHostToDevice));
  std::vector<unsigned char> back(100 * 6, 0);
  REQUIRE_CUDA(cudaMemcpy2D(back.data(), 100, dev, pitch, 100, 6, cudaMemcpyDefault));
  for (size_t y = 0; y < 6; ++y) {
    for (size_t x = 0; x < 100; ++x) {
      const bool inside = y >= 1 && y < 4 && x >= 10 && x < 50;
      REQUIRE(back[y * 100 + x] == (inside ? src[(y - 1) * 40 + (x - 10)] : 0x11));
    }
  }
  CHECK(name(cudaMemcpy2D(back.data(), 50, dev, pitch, 100, 2, cudaMemcpyDeviceToHost)) == "cudaErrorInvalidPitchValue");
  CHECK(name(cudaMemcpy2D(back.data(), 50, dev, pitch, 100, 1, cudaMemcpyDeviceToHost)) == "cudaErrorInvalidPitchValue");
  CHECK(name(cudaMemcpy2D(back.data(), 100, dev, pitch, 100, 2, static_cast<cudaMemcpyKind>(9))) ==
        "cudaErrorInvalidMemcpyDirection");
  CHECK(name(cudaMemcpy2D(back.data(), 100, dev, pitch, 100, 7, cudaMemcpyDeviceToHost)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemset2D(dev, 50, 0, 100, 2)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFree(dev));
}

TEST_CASE("runtime copies: async 2D copies and sets keep stream order", "[runtime][copies]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* dev = nullptr;
  size_t pitch = 0;
  REQUIRE_CUDA(cudaMallocPitch(&dev, &pitch, 64, 4));
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  REQUIRE_CUDA(cudaMemset2DAsync(dev, pitch, 0x22, 64, 4, stream));
  auto src = pattern(16 * 2, 5);
  REQUIRE_CUDA(cudaMemcpy2DAsync(static_cast<char*>(dev) + 8, pitch, src.data(), 16, 16, 2, cudaMemcpyHostToDevice,
                                 stream));
  const auto sent = src;
  std::fill(src.begin(), src.end(), 0);  // staged at the call
  std::vector<unsigned char> back(64 * 4, 0);
  REQUIRE_CUDA(cudaMemcpy2DAsync(back.data(), 64, dev, pitch, 64, 4, cudaMemcpyDeviceToHost, stream));
  CHECK(name(cudaStreamQuery(stream)) == "cudaErrorNotReady");
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  for (size_t y = 0; y < 4; ++y) {
    for (size_t x = 0; x < 64; ++x) {
      const bool inside = y < 2 && x >= 8 && x < 24;
      REQUIRE(back[y * 64 + x] == (inside ? sent[y * 16 + (x - 8)] : 0x22));
    }
  }
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(dev));
}

TEST_CASE("runtime copies: cudaMemcpy3D and cudaMemset3D over pitched slices", "[runtime][copies]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaExtent extent = make_cudaExtent(24, 3, 4);  // bytes, rows, slices
  cudaPitchedPtr dev{};
  void* base = nullptr;
  size_t pitch = 0;
  REQUIRE_CUDA(cudaMallocPitch(&base, &pitch, extent.width, extent.height * extent.depth));
  dev = make_cudaPitchedPtr(base, pitch, extent.width, extent.height);
  REQUIRE_CUDA(cudaMemset3D(dev, 0x33, extent));
  // Slices 1..2, rows 1..2, bytes 4..11 from a packed host block.
  const auto block = pattern(8 * 2 * 2, 70);
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(const_cast<unsigned char*>(block.data()), 8, 8, 2);
  in.dstPtr = dev;
  in.dstPos = make_cudaPos(4, 1, 1);
  in.extent = make_cudaExtent(8, 2, 2);
  in.kind = cudaMemcpyHostToDevice;
  REQUIRE_CUDA(cudaMemcpy3D(&in));
  // A 3D set of one slice's middle, asynchronously.
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreate(&stream));
  cudaPitchedPtr last = dev;
  last.ptr = static_cast<char*>(base) + 3 * pitch * extent.height;
  REQUIRE_CUDA(cudaMemset3DAsync(last, 0x44, make_cudaExtent(2, 3, 1), stream));
  std::vector<unsigned char> all(24 * 3 * 4, 0);
  cudaMemcpy3DParms out{};
  out.srcPtr = dev;
  out.dstPtr = make_cudaPitchedPtr(all.data(), 24, 24, 3);
  out.extent = extent;
  out.kind = cudaMemcpyDeviceToHost;
  REQUIRE_CUDA(cudaMemcpy3DAsync(&out, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  for (size_t z = 0; z < 4; ++z) {
    for (size_t y = 0; y < 3; ++y) {
      for (size_t x = 0; x < 24; ++x) {
        unsigned char want = 0x33;
        if (z >= 1 && z < 3 && y >= 1 && x >= 4 && x < 12) want = block[((z - 1) * 2 + (y - 1)) * 8 + (x - 4)];
        if (z == 3 && x < 2) want = 0x44;
        REQUIRE(all[(z * 3 + y) * 24 + x] == want);
      }
    }
  }
  // The slice height must hold the rows once there is more than one slice.
  cudaPitchedPtr short_slices = dev;
  short_slices.ysize = 2;
  CHECK(name(cudaMemset3D(short_slices, 0, extent)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpy3D(nullptr)) == "cudaErrorInvalidValue");
  out.kind = static_cast<cudaMemcpyKind>(7);
  CHECK(name(cudaMemcpy3D(&out)) == "cudaErrorInvalidMemcpyDirection");
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(base));
}

TEST_CASE("runtime copies: arrays through 2D copies (bytes) and 3D copies (elements)", "[runtime][copies]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaChannelFormatDesc pair = cudaCreateChannelDesc(32, 32, 0, 0, cudaChannelFormatKindFloat);  // 8 bytes
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &pair, 8, 4));  // rows of 64 bytes
  const auto src = pattern(64 * 4, 21);
  REQUIRE_CUDA(cudaMemcpy2DToArray(array, 0, 0, src.data(), 64, 64, 4, cudaMemcpyHostToDevice));
  std::vector<unsigned char> back(16 * 2, 0);
  REQUIRE_CUDA(cudaMemcpy2DFromArray(back.data(), 16, array, 8, 2, 16, 2, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < 2; ++y) CHECK(std::memcmp(back.data() + y * 16, src.data() + (2 + y) * 64 + 8, 16) == 0);
  CHECK(name(cudaMemcpy2DFromArray(back.data(), 16, array, 4, 0, 16, 1, cudaMemcpyDeviceToHost)) ==
        "cudaErrorInvalidValue");  // not a whole element
  CHECK(name(cudaMemcpy2DFromArray(back.data(), 16, array, 0, 3, 16, 2, cudaMemcpyDeviceToHost)) ==
        "cudaErrorInvalidValue");  // past the last row

  // Array to array, then out through cudaMemcpy3D with element positions.
  cudaArray_t copy = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&copy, &pair, 8, 4));
  REQUIRE_CUDA(cudaMemcpy2DArrayToArray(copy, 0, 0, array, 0, 0, 64, 4, cudaMemcpyDeviceToDevice));
  CHECK(name(cudaMemcpy2DArrayToArray(copy, 0, 0, array, 0, 0, 64, 4, cudaMemcpyHostToDevice)) ==
        "cudaErrorInvalidMemcpyDirection");
  std::vector<unsigned char> elements(2 * 8, 0);
  cudaMemcpy3DParms out{};
  out.srcArray = copy;
  out.srcPos = make_cudaPos(3, 1, 0);  // element 3 of row 1: byte 24
  out.dstPtr = make_cudaPitchedPtr(elements.data(), 16, 2, 1);
  out.extent = make_cudaExtent(2, 1, 1);  // two elements: 16 bytes
  out.kind = cudaMemcpyDeviceToHost;
  REQUIRE_CUDA(cudaMemcpy3D(&out));
  CHECK(std::memcmp(elements.data(), src.data() + 64 + 24, 16) == 0);
  // In through cudaMemcpy3DAsync on the per-thread stream, and back.
  cudaMemcpy3DParms in{};
  const auto fresh = pattern(16, 200);
  in.srcPtr = make_cudaPitchedPtr(const_cast<unsigned char*>(fresh.data()), 16, 2, 1);
  in.dstArray = copy;
  in.dstPos = make_cudaPos(6, 3, 0);
  in.extent = make_cudaExtent(2, 1, 1);
  in.kind = cudaMemcpyHostToDevice;
  REQUIRE_CUDA(cudaMemcpy3DAsync(&in, cudaStreamPerThread));
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  out.srcPos = make_cudaPos(6, 3, 0);
  REQUIRE_CUDA(cudaMemcpy3D(&out));
  CHECK(std::memcmp(elements.data(), fresh.data(), 16) == 0);
  in.dstPos = make_cudaPos(7, 3, 0);  // two elements from the last one
  CHECK(name(cudaMemcpy3D(&in)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFreeArray(copy));
  REQUIRE_CUDA(cudaFreeArray(array));
}

TEST_CASE("runtime copies: cudaMemcpy3DPeer between two devices", "[runtime][copies]") {
  REQUIRE_CUDA(cudaSetDevice(1));
  void* far = nullptr;
  REQUIRE_CUDA(cudaMalloc(&far, 256));
  REQUIRE_CUDA(cudaMemset(far, 0, 256));
  REQUIRE_CUDA(cudaDeviceSynchronize());  // sets only queue, and the copies below are device 0's
  REQUIRE_CUDA(cudaSetDevice(0));
  void* near = nullptr;
  REQUIRE_CUDA(cudaMalloc(&near, 256));
  const auto src = pattern(256, 60);
  REQUIRE_CUDA(cudaMemcpy(near, src.data(), 256, cudaMemcpyHostToDevice));
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = make_cudaPitchedPtr(near, 32, 16, 4);
  p.srcDevice = 0;
  p.dstPtr = make_cudaPitchedPtr(far, 64, 16, 4);
  p.dstDevice = 1;
  p.extent = make_cudaExtent(16, 4, 1);
  REQUIRE_CUDA(cudaMemcpy3DPeer(&p));
  p.dstPos = make_cudaPos(32, 0, 0);
  REQUIRE_CUDA(cudaMemcpy3DPeerAsync(&p, nullptr));
  std::vector<unsigned char> back(256, 0xff);
  REQUIRE_CUDA(cudaMemcpy(back.data(), far, 256, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < 4; ++y) {
    CHECK(std::memcmp(back.data() + y * 64, src.data() + y * 32, 16) == 0);
    CHECK(std::memcmp(back.data() + y * 64 + 32, src.data() + y * 32, 16) == 0);
    CHECK(back[y * 64 + 16] == 0);
  }
  p.dstDevice = 7;
  CHECK(name(cudaMemcpy3DPeer(&p)) == "cudaErrorInvalidDevice");
  CHECK(name(cudaMemcpy3DPeer(nullptr)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFree(near));
  REQUIRE_CUDA(cudaFree(far));
}

TEST_CASE("runtime copies: __device__ variables by symbol", "[runtime][copies][symbols]") {
  register_variables();
  REQUIRE_CUDA(cudaSetDevice(0));
  size_t size = 0;
  REQUIRE_CUDA(cudaGetSymbolSize(&size, g_counter));
  CHECK(size == sizeof g_counter);
  void* address = nullptr;
  REQUIRE_CUDA(cudaGetSymbolAddress(&address, g_counter));
  void* again = nullptr;
  REQUIRE_CUDA(cudaGetSymbolAddress(&again, g_counter));
  CHECK(address == again);
  cudaPointerAttributes attributes{};
  REQUIRE_CUDA(cudaPointerGetAttributes(&attributes, address));
  CHECK((attributes.type == cudaMemoryTypeDevice && attributes.device == 0));

  // The device copy starts with the initialiser (the host shadow's bytes), then goes its own way.
  int read[4] = {};
  REQUIRE_CUDA(cudaMemcpyFromSymbol(read, g_counter, sizeof read));
  CHECK((read[0] == 10 && read[3] == 40));
  const int two[2] = {7, 8};
  REQUIRE_CUDA(cudaMemcpyToSymbol(g_counter, two, sizeof two, sizeof(int)));
  REQUIRE_CUDA(cudaMemcpyFromSymbol(read, g_counter, sizeof read, 0, cudaMemcpyDefault));
  CHECK((read[0] == 10 && read[1] == 7 && read[2] == 8 && read[3] == 40));
  CHECK(g_counter[1] == 20);  // the host shadow is not the device variable
  // The symbol's address is ordinary device memory.
  int direct = 0;
  REQUIRE_CUDA(cudaMemcpy(&direct, static_cast<int*>(address) + 2, sizeof direct, cudaMemcpyDeviceToHost));
  CHECK(direct == 8);

  // Async forms, in order on a stream, device to device included.
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Gate gate;
  REQUIRE_CUDA(cudaLaunchHostFunc(stream, Gate::wait, &gate));
  const double scale = -1.25;
  REQUIRE_CUDA(cudaMemcpyToSymbolAsync(static_cast<const void*>(&g_scale), &scale, sizeof scale, 0, cudaMemcpyHostToDevice, stream));
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, sizeof(double)));
  REQUIRE_CUDA(cudaMemcpyFromSymbolAsync(dev, static_cast<const void*>(&g_scale), sizeof(double), 0, cudaMemcpyDeviceToDevice, stream));
  double seen = 0;
  REQUIRE_CUDA(cudaMemcpyAsync(&seen, dev, sizeof seen, cudaMemcpyDeviceToHost, stream));
  CHECK(seen == 0);
  gate.open();
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(seen == -1.25);

  // The documented refusals.
  int unregistered = 0;
  CHECK(name(cudaGetSymbolAddress(&address, &unregistered)) == "cudaErrorInvalidSymbol");
  CHECK(name(cudaGetSymbolSize(&size, nullptr)) == "cudaErrorInvalidSymbol");
  CHECK(name(cudaMemcpyToSymbol(g_counter, two, sizeof two, 3 * sizeof(int))) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpyToSymbol(g_counter, two, sizeof two, 0, cudaMemcpyDeviceToHost)) ==
        "cudaErrorInvalidMemcpyDirection");
  CHECK(name(cudaMemcpyFromSymbol(read, g_counter, sizeof read, 0, cudaMemcpyHostToDevice)) ==
        "cudaErrorInvalidMemcpyDirection");
  CHECK(name(cudaGetSymbolSize(nullptr, g_counter)) == "cudaErrorInvalidValue");
  CHECK(name(cudaGetLastError()) == "cudaErrorInvalidValue");

  // Each device has its own copy of the variable.
  REQUIRE_CUDA(cudaSetDevice(1));
  void* other = nullptr;
  REQUIRE_CUDA(cudaGetSymbolAddress(&other, g_counter));
  CHECK(other != address);
  REQUIRE_CUDA(cudaMemcpyFromSymbol(read, g_counter, sizeof read));
  CHECK(read[1] == 20);
  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(dev));
}

TEST_CASE("runtime copies: symbol copy nodes of graphs", "[runtime][copies][symbols][graphs]") {
  register_variables();
  REQUIRE_CUDA(cudaSetDevice(0));
  const int values[4] = {1, 2, 3, 4};
  int out[4] = {};
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t to = nullptr, from = nullptr;
  REQUIRE_CUDA(cudaGraphAddMemcpyNodeToSymbol(&to, graph, nullptr, 0, g_counter, values, sizeof values, 0,
                                              cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaGraphAddMemcpyNodeFromSymbol(&from, graph, &to, 1, out, g_counter, sizeof out, 0,
                                                cudaMemcpyDeviceToHost));
  CHECK(name(cudaGraphAddMemcpyNodeToSymbol(&to, graph, nullptr, 0, g_counter, values, sizeof values, 4,
                                            cudaMemcpyHostToDevice)) == "cudaErrorInvalidValue");
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  CHECK((out[0] == 1 && out[3] == 4));

  // Node parameters replaced in the graph and in the executable graph.
  const int later[2] = {50, 60};
  REQUIRE_CUDA(cudaGraphMemcpyNodeSetParamsToSymbol(to, g_counter, later, sizeof later, 2 * sizeof(int),
                                                    cudaMemcpyHostToDevice));
  cudaMemcpy3DParms params{};
  REQUIRE_CUDA(cudaGraphMemcpyNodeGetParams(to, &params));
  void* address = nullptr;
  REQUIRE_CUDA(cudaGetSymbolAddress(&address, g_counter));
  CHECK(params.dstPtr.ptr == static_cast<int*>(address) + 2);
  REQUIRE_CUDA(cudaGraphExecMemcpyNodeSetParamsToSymbol(exec, to, g_counter, later, sizeof later, 0,
                                                        cudaMemcpyHostToDevice));
  int first_two[2] = {};
  REQUIRE_CUDA(cudaGraphExecMemcpyNodeSetParamsFromSymbol(exec, from, first_two, g_counter, sizeof first_two, 0,
                                                          cudaMemcpyDeviceToHost));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  CHECK((first_two[0] == 50 && first_two[1] == 60));
  REQUIRE_CUDA(cudaGraphMemcpyNodeSetParamsFromSymbol(from, out, g_counter, sizeof out, 0, cudaMemcpyDefault));
  CHECK(name(cudaGraphMemcpyNodeSetParamsFromSymbol(from, out, g_counter, sizeof out, 0, cudaMemcpyHostToDevice)) ==
        "cudaErrorInvalidMemcpyDirection");
  CHECK(name(cudaGraphExecMemcpyNodeSetParamsToSymbol(exec, to, static_cast<const void*>(&later), later, sizeof later, 0, cudaMemcpyHostToDevice)) ==
        "cudaErrorInvalidSymbol");
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
}

TEST_CASE("runtime copies: cudaDeviceReset gives variables fresh storage", "[runtime][copies][symbols]") {
  register_variables();
  REQUIRE_CUDA(cudaSetDevice(0));
  const int marker = 99;
  REQUIRE_CUDA(cudaMemcpyToSymbol(g_counter, &marker, sizeof marker));
  REQUIRE_CUDA(cudaDeviceReset());
  int read[4] = {};
  REQUIRE_CUDA(cudaMemcpyFromSymbol(read, g_counter, sizeof read));
  CHECK(read[0] == g_counter[0]);  // initialised again from the shadow, not the freed storage
}

TEST_CASE("runtime copies: batches over the driver's", "[runtime][copies][batch]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, 256));
  const auto src = pattern(256, 33);
  std::vector<unsigned char> back(128, 0);
  void* dsts[2] = {dev, back.data()};
  const void* srcs[2] = {src.data(), dev};
  size_t sizes[2] = {256, 128};
  cudaMemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t starts[2] = {0, 1};
  // Two batches: the second reads what the first wrote, in stream order.
  REQUIRE_CUDA(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, attrs, starts, 1, stream));
  REQUIRE_CUDA(cudaMemcpyBatchAsync(dsts + 1, srcs + 1, sizes + 1, 1, attrs + 1, starts, 1, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  CHECK(std::memcmp(back.data(), src.data(), 128) == 0);
  CHECK(name(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, starts, 2, nullptr)) == "cudaErrorInvalidValue");

  cudaArray_t array = nullptr;
  const cudaChannelFormatDesc bytes = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
  REQUIRE_CUDA(cudaMallocArray(&array, &bytes, 16, 4));
  cudaMemcpy3DBatchOp op{};
  op.src.type = cudaMemcpyOperandTypePointer;
  op.src.op.ptr.ptr = const_cast<unsigned char*>(src.data());
  op.src.op.ptr.rowLength = 32;  // rows of the source are 32 elements apart
  op.dst.type = cudaMemcpyOperandTypeArray;
  op.dst.op.array.array = array;
  op.extent = make_cudaExtent(16, 4, 1);
  op.srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
  REQUIRE_CUDA(cudaMemcpy3DBatchAsync(1, &op, 0, cudaStreamPerThread));
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  std::vector<unsigned char> rows(16 * 4, 0);
  REQUIRE_CUDA(cudaMemcpy2DFromArray(rows.data(), 16, array, 0, 0, 16, 4, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < 4; ++y) CHECK(std::memcmp(rows.data() + y * 16, src.data() + y * 32, 16) == 0);
  CHECK(name(cudaMemcpy3DBatchAsync(1, &op, 1, stream)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaFreeArray(array));
  REQUIRE_CUDA(cudaStreamDestroy(stream));
  REQUIRE_CUDA(cudaFree(dev));
}

// Deprecated, still exported: tested as such.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("runtime copies: the deprecated 1D array copies run on from row to row", "[runtime][copies]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaChannelFormatDesc word = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindUnsigned);
  cudaArray_t array = nullptr, other = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &word, 4, 5));  // rows of 16 bytes, 5 rows
  REQUIRE_CUDA(cudaMallocArray(&other, &word, 3, 8));  // rows of 12 bytes, 8 rows
  std::vector<unsigned char> zeros(80, 0);
  REQUIRE_CUDA(cudaMemcpy2DToArray(array, 0, 0, zeros.data(), 16, 16, 5, cudaMemcpyHostToDevice));
  // 40 bytes from byte 8 of row 1: the rest of row 1, rows 2 and 3, 8 bytes of row 4.
  const auto src = pattern(40, 9);
  REQUIRE_CUDA(cudaMemcpyToArray(array, 8, 1, src.data(), 40, cudaMemcpyHostToDevice));
  std::vector<unsigned char> all(80, 0xff);
  REQUIRE_CUDA(cudaMemcpy2DFromArray(all.data(), 16, array, 0, 0, 16, 5, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 80; ++i) REQUIRE(all[i] == (i >= 24 && i < 64 ? src[i - 24] : 0));
  // Back out the same way, asynchronously, from device memory and to it.
  std::vector<unsigned char> back(40, 0);
  REQUIRE_CUDA(cudaMemcpyFromArrayAsync(back.data(), array, 8, 1, 40, cudaMemcpyDeviceToHost, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  CHECK(back == src);
  void* dev = nullptr;
  REQUIRE_CUDA(cudaMalloc(&dev, 40));
  REQUIRE_CUDA(cudaMemcpyFromArray(dev, array, 8, 1, 40, cudaMemcpyDeviceToDevice));
  REQUIRE_CUDA(cudaMemcpyToArrayAsync(other, 4, 0, dev, 40, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
  REQUIRE_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  // Array to array across rows of different widths.
  REQUIRE_CUDA(cudaMemcpyArrayToArray(array, 0, 0, other, 4, 0, 40));
  REQUIRE_CUDA(cudaMemcpyFromArray(back.data(), array, 0, 0, 40, cudaMemcpyDefault));
  CHECK(back == src);
  // The run must fit the array, offsets included.
  CHECK(name(cudaMemcpyToArray(array, 8, 4, src.data(), 16, cudaMemcpyHostToDevice)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpyToArray(array, 16, 0, src.data(), 4, cudaMemcpyHostToDevice)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpyFromArray(back.data(), array, 0, 5, 4, cudaMemcpyDeviceToHost)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpyArrayToArray(array, 0, 0, other, 0, 7, 16)) == "cudaErrorInvalidValue");
  CHECK(name(cudaMemcpyArrayToArray(array, 0, 0, other, 0, 0, 4, cudaMemcpyHostToDevice)) ==
        "cudaErrorInvalidMemcpyDirection");
  CHECK(name(cudaMemcpyToArray(array, 0, 0, src.data(), 4, static_cast<cudaMemcpyKind>(8))) ==
        "cudaErrorInvalidMemcpyDirection");
  REQUIRE_CUDA(cudaFree(dev));
  REQUIRE_CUDA(cudaFreeArray(other));
  REQUIRE_CUDA(cudaFreeArray(array));
  CHECK(name(cudaMemcpyToArray(array, 0, 0, src.data(), 4, cudaMemcpyHostToDevice)) == "cudaErrorInvalidValue");
}
#pragma GCC diagnostic pop

TEST_CASE("runtime copies: graph copy nodes with arrays take elements", "[runtime][copies][graphs]") {
  REQUIRE_CUDA(cudaSetDevice(0));
  const cudaChannelFormatDesc word = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array = nullptr;
  REQUIRE_CUDA(cudaMallocArray(&array, &word, 8, 2));  // rows of 32 bytes
  const auto src = pattern(12, 77);
  cudaMemcpy3DParms in{};
  in.srcPtr = make_cudaPitchedPtr(const_cast<unsigned char*>(src.data()), 12, 3, 1);
  in.dstArray = array;
  in.dstPos = make_cudaPos(5, 1, 0);  // element 5 of row 1
  in.extent = make_cudaExtent(3, 1, 1);  // three elements
  in.kind = cudaMemcpyHostToDevice;
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t node = nullptr;
  REQUIRE_CUDA(cudaGraphAddMemcpyNode(&node, graph, nullptr, 0, &in));
  cudaMemcpy3DParms read{};
  REQUIRE_CUDA(cudaGraphMemcpyNodeGetParams(node, &read));
  CHECK((read.dstArray == array && read.dstPos.x == 5 && read.extent.width == 3));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, nullptr));
  REQUIRE_CUDA(cudaStreamSynchronize(nullptr));
  std::vector<unsigned char> row(32, 0);
  REQUIRE_CUDA(cudaMemcpy2DFromArray(row.data(), 32, array, 0, 1, 32, 1, cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(row.data() + 20, src.data(), 12) == 0);
  in.dstPos = make_cudaPos(6, 1, 0);  // three elements from element 6 of 8
  CHECK(name(cudaGraphMemcpyNodeSetParams(node, &in)) == "cudaErrorInvalidValue");
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaFreeArray(array));
}
