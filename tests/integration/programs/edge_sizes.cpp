// Sizes at the edges of size_t through every driver entry point that takes device memory by size
// (test_edge_sizes.py). Each entry point is called with each size below; one line per call,
//   call=NAME size=SIZE result=CUDA_ERROR_NAME
// and a block that was granted is given back at once. Then the program takes 16 MiB blocks with
// cuMemAlloc until it is refused, holds them, and prints `filled=BYTES` and `refused_by=ERROR`:
// a cap must still hold after every hostile call. Exits 0, or 3 when a call the program needs fails.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "driver_check.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGranule = 2 * kMiB;
constexpr std::size_t kMax = SIZE_MAX;
// A negative size cast (-1, -4), past 2^64 once rounded to a 2 MiB granule, 2^63 and just above, and
// the smallest sizes.
constexpr std::size_t kSizes[] = {kMax,        kMax - 3, kMax - kGranule + 2, std::size_t{1} << 63,
                                  (std::size_t{1} << 63) + 1, 0,        1};

void say(const char* call, std::size_t size, CUresult result) {
  std::printf("call=%s size=%zu result=%s\n", call, size, cu_error_name(result));
}

CUarray_format kFloat = CU_AD_FORMAT_FLOAT;

}  // namespace

int main() {
  CHECK_CU(cuInit(0));
  CUdevice device = 0;
  CHECK_CU(cuDeviceGet(&device, 0));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUmemoryPool pool = nullptr;
  CHECK_CU(cuDeviceGetDefaultMemPool(&pool, device));

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  // One granule to map through cuMemMap with hostile sizes and offsets.
  CUmemGenericAllocationHandle granule = 0;
  CHECK_CU(cuMemCreate(&granule, kGranule, &prop, 0));
  CUdeviceptr range = 0;
  CHECK_CU(cuMemAddressReserve(&range, 4 * kGranule, 0, 0, 0));

  for (const std::size_t size : kSizes) {
    CUdeviceptr ptr = 0;
    CUresult result = cuMemAlloc(&ptr, size);
    say("cuMemAlloc", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemFree(ptr));

    std::size_t pitch = 0;
    result = cuMemAllocPitch(&ptr, &pitch, size, 1, 4);
    say("cuMemAllocPitch.width", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemFree(ptr));
    result = cuMemAllocPitch(&ptr, &pitch, 4096, size, 4);
    say("cuMemAllocPitch.height", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemFree(ptr));

    result = cuMemAllocAsync(&ptr, size, stream);
    say("cuMemAllocAsync", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemFreeAsync(ptr, stream));
    result = cuMemAllocFromPoolAsync(&ptr, size, pool, stream);
    say("cuMemAllocFromPoolAsync", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemFreeAsync(ptr, stream));
    CHECK_CU(cuStreamSynchronize(stream));

    result = cuMemAllocManaged(&ptr, size, CU_MEM_ATTACH_GLOBAL);
    say("cuMemAllocManaged", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemFree(ptr));

    CUmemGenericAllocationHandle handle = 0;
    result = cuMemCreate(&handle, size, &prop, 0);
    say("cuMemCreate", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemRelease(handle));

    result = cuMemMap(range, size, 0, granule, 0);
    say("cuMemMap.size", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemUnmap(range, size));
    result = cuMemMap(range, kGranule, size, granule, 0);
    say("cuMemMap.offset", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMemUnmap(range, kGranule));

    CUDA_ARRAY_DESCRIPTOR flat{};
    flat.Width = size;
    flat.Height = 1;
    flat.Format = kFloat;
    flat.NumChannels = 4;
    CUarray array = nullptr;
    result = cuArrayCreate(&array, &flat);
    say("cuArrayCreate", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuArrayDestroy(array));

    CUDA_ARRAY3D_DESCRIPTOR shape{};
    shape.Width = 1024;
    shape.Height = 1024;
    shape.Depth = size;
    shape.Format = kFloat;
    shape.NumChannels = 4;
    result = cuArray3DCreate(&array, &shape);
    say("cuArray3DCreate", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuArrayDestroy(array));

    CUmipmappedArray mipmapped = nullptr;
    shape.Depth = 0;
    shape.Width = size;
    result = cuMipmappedArrayCreate(&mipmapped, &shape, 4);
    say("cuMipmappedArrayCreate", size, result);
    if (result == CUDA_SUCCESS) CHECK_CU(cuMipmappedArrayDestroy(mipmapped));
  }
  CHECK_CU(cuMemAddressFree(range, 4 * kGranule));
  CHECK_CU(cuMemRelease(granule));

  // What the cap still allows, held at once.
  std::vector<CUdeviceptr> blocks;
  CUresult refused = CUDA_SUCCESS;
  for (int i = 0; i < 4096 && refused == CUDA_SUCCESS; ++i) {
    CUdeviceptr ptr = 0;
    refused = cuMemAlloc(&ptr, 16 * kMiB);
    if (refused == CUDA_SUCCESS) blocks.push_back(ptr);
  }
  std::printf("filled=%zu\nrefused_by=%s\n", blocks.size() * 16 * kMiB, cu_error_name(refused));
  for (const CUdeviceptr ptr : blocks) CHECK_CU(cuMemFree(ptr));
  CHECK_CU(cuStreamDestroy(stream));
  CHECK_CU(cuDevicePrimaryCtxRelease(device));
  return 0;
}
