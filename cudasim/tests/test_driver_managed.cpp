// Managed-memory hints through the driver API: cuMemAdvise, cuMemPrefetchAsync and the range
// attributes that answer what they were given, cuStreamAttachMemAsync, with the documented refusals.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace driver_test;

// The v1 and per-thread forms, which cuda.h declares only under __CUDA_API_VERSION_INTERNAL (it
// maps the plain names to the _v2 forms).
#undef cuMemAdvise
#undef cuMemPrefetchAsync
extern "C" CUresult cuMemAdvise(CUdeviceptr, size_t, CUmem_advise, CUdevice);
extern "C" CUresult cuMemPrefetchAsync(CUdeviceptr, size_t, CUdevice, CUstream);
extern "C" CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
extern "C" CUresult cuStreamAttachMemAsync_ptsz(CUstream, CUdeviceptr, size_t, unsigned int);

namespace {

constexpr size_t kPage = 4096;

CUmemLocation device_location(int device) { return CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device}; }
constexpr CUmemLocation kHost{CU_MEM_LOCATION_TYPE_HOST, 0};

// Managed memory attached globally.
CUdeviceptr managed_memory(size_t bytes) {
  CUdeviceptr managed = 0;
  REQUIRE(cuMemAllocManaged(&managed, bytes, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  return managed;
}

// A new non-blocking stream whose work waits behind the gate until it opens.
CUstream gated_stream(Gate* gate) {
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, gate) == CUDA_SUCCESS);
  return stream;
}

int attribute(CUmem_range_attribute attr, CUdeviceptr ptr, size_t count) {
  int value = 12345;
  REQUIRE(cuMemRangeGetAttribute(&value, sizeof value, attr, ptr, count) == CUDA_SUCCESS);
  return value;
}

}  // namespace

TEST_CASE("cuMemAdvise advice is remembered per page and answered by the range attributes", "[driver][managed]") {
  primary_context();
  CUdeviceptr managed = managed_memory(4 * kPage);

  // Nothing advised yet.
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 4 * kPage) == 0);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 4 * kPage) == CU_DEVICE_INVALID);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 4 * kPage) == CU_MEM_LOCATION_TYPE_INVALID);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 4 * kPage) == CU_DEVICE_INVALID);

  // Read-mostly on the first two pages; a range inside a page covers the whole page.
  REQUIRE(cuMemAdvise_v2(managed + 10, kPage + 1, CU_MEM_ADVISE_SET_READ_MOSTLY, kHost) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 2 * kPage) == 1);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed + kPage + 100, 8) == 1);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 3 * kPage) == 0);  // not every page
  REQUIRE(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_UNSET_READ_MOSTLY, kHost) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 2 * kPage) == 0);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed + kPage, kPage) == 1);

  // Preferred location: device 1 for the whole range, then the host for the last page.
  REQUIRE(cuMemAdvise_v2(managed, 4 * kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device_location(1)) ==
          CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 4 * kPage) == 1);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 4 * kPage) == CU_MEM_LOCATION_TYPE_DEVICE);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, managed, 4 * kPage) == 1);
  REQUIRE(cuMemAdvise(managed + 3 * kPage, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 4 * kPage) == CU_DEVICE_INVALID);  // mixed
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + 3 * kPage, kPage) == CU_DEVICE_CPU);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed + 3 * kPage, kPage) ==
        CU_MEM_LOCATION_TYPE_HOST);
  const CUmemLocation numa_current{CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 99};  // the id is ignored
  REQUIRE(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, numa_current) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, kPage) == CU_MEM_LOCATION_TYPE_HOST_NUMA);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID, managed, kPage) == 0);
  // Pages advised one by one, each its own location, then the middle two the same again.
  for (int page = 0; page < 4; ++page) {
    REQUIRE(cuMemAdvise_v2(managed + page * kPage, 1, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                           device_location(page % 2)) == CUDA_SUCCESS);
  }
  for (int page = 0; page < 4; ++page) {
    CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + page * kPage + 7, 1) == page % 2);
  }
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + kPage, 2 * kPage) == CU_DEVICE_INVALID);
  REQUIRE(cuMemAdvise_v2(managed + kPage, 2 * kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device_location(1)) ==
          CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed + kPage, 3 * kPage) == 1);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 2 * kPage) == CU_DEVICE_INVALID);
  REQUIRE(cuMemAdvise_v2(managed, 4 * kPage, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, kHost) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 4 * kPage) == CU_MEM_LOCATION_TYPE_INVALID);

  // Accessed-by: the processors advised for the whole range, CU_DEVICE_INVALID in the slots left.
  REQUIRE(cuMemAdvise_v2(managed, 4 * kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, device_location(1)) == CUDA_SUCCESS);
  REQUIRE(cuMemAdvise(managed, 2 * kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, 0) == CUDA_SUCCESS);
  REQUIRE(cuMemAdvise_v2(managed, 4 * kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, kHost) == CUDA_SUCCESS);
  int list[4] = {};
  REQUIRE(cuMemRangeGetAttribute(list, sizeof list, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, 4 * kPage) ==
          CUDA_SUCCESS);
  CHECK(list[0] == 1);
  CHECK(list[1] == CU_DEVICE_CPU);
  CHECK(list[2] == CU_DEVICE_INVALID);
  CHECK(list[3] == CU_DEVICE_INVALID);
  REQUIRE(cuMemRangeGetAttribute(list, sizeof list, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, kPage) ==
          CUDA_SUCCESS);
  CHECK(list[0] == 0);
  CHECK(list[1] == 1);
  CHECK(list[2] == CU_DEVICE_CPU);
  REQUIRE(cuMemRangeGetAttribute(list, 4, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, kPage) == CUDA_SUCCESS);
  CHECK(list[0] == 0);  // only as many as fit
  REQUIRE(cuMemAdvise_v2(managed, 4 * kPage, CU_MEM_ADVISE_UNSET_ACCESSED_BY, device_location(1)) == CUDA_SUCCESS);
  REQUIRE(cuMemRangeGetAttribute(list, 8, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, kPage) == CUDA_SUCCESS);
  CHECK(list[0] == 0);
  CHECK(list[1] == CU_DEVICE_CPU);

  // Refusals: not managed memory, beyond the allocation, no size, an unknown advice or device, a
  // location accessed-by does not take.
  CUdeviceptr device_memory = 0;
  REQUIRE(cuMemAlloc(&device_memory, kPage) == CUDA_SUCCESS);
  CHECK(cuMemAdvise_v2(device_memory, kPage, CU_MEM_ADVISE_SET_READ_MOSTLY, kHost) == CUDA_ERROR_INVALID_VALUE);
  std::vector<char> pageable(kPage);
  CHECK(cuMemAdvise_v2(reinterpret_cast<CUdeviceptr>(pageable.data()), kPage, CU_MEM_ADVISE_SET_READ_MOSTLY, kHost) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAdvise_v2(managed, 5 * kPage, CU_MEM_ADVISE_SET_READ_MOSTLY, kHost) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAdvise_v2(managed, 0, CU_MEM_ADVISE_SET_READ_MOSTLY, kHost) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAdvise_v2(managed, kPage, static_cast<CUmem_advise>(7), kHost) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device_location(5)) ==
        CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuMemAdvise(managed, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, 9) == CUDA_ERROR_INVALID_DEVICE);
  const CUmemLocation numa{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  CHECK(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, numa) == CUDA_ERROR_INVALID_VALUE);
  const CUmemLocation no_type{CU_MEM_LOCATION_TYPE_INVALID, 0};
  CHECK(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, no_type) == CUDA_ERROR_INVALID_VALUE);
  const CUmemLocation far_node{CU_MEM_LOCATION_TYPE_HOST_NUMA, 3};
  CHECK(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, far_node) == CUDA_ERROR_INVALID_VALUE);
  // The location is ignored for read-mostly.
  CHECK(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_READ_MOSTLY, device_location(42)) == CUDA_SUCCESS);

  // Freed, its advice goes with it: a new allocation at any address starts clean.
  CHECK(cuMemFree(managed) == CUDA_SUCCESS);
  CHECK(cuMemAdvise_v2(managed, kPage, CU_MEM_ADVISE_SET_READ_MOSTLY, kHost) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemAllocManaged(&managed, kPage, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kPage) == 0);
  CHECK(cuMemFree(managed) == CUDA_SUCCESS);
  CHECK(cuMemFree(device_memory) == CUDA_SUCCESS);
}

TEST_CASE("cuMemPrefetchAsync is ordered on its stream and recorded as the last prefetch location",
          "[driver][managed]") {
  primary_context();
  CUdeviceptr managed = managed_memory(2 * kPage);
  Gate gate;
  CUstream stream = gated_stream(&gate);
  REQUIRE(cuMemPrefetchAsync_v2(managed, 2 * kPage, device_location(1), 0, stream) == CUDA_SUCCESS);
  // Recorded when asked for, whether or not it ran; the stream has work queued behind the gate.
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 2 * kPage) == 1);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, managed, kPage) == CU_MEM_LOCATION_TYPE_DEVICE);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID, managed, kPage) == 1);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);

  REQUIRE(cuMemPrefetchAsync(managed, kPage, CU_DEVICE_CPU, stream) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, kPage) == CU_DEVICE_CPU);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 2 * kPage) == CU_DEVICE_INVALID);
  REQUIRE(cuMemPrefetchAsync_v2_ptsz(managed + kPage, kPage, kHost, 0, nullptr) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 2 * kPage) == CU_DEVICE_CPU);
  CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);

  // Several attributes at once.
  int read_mostly = 7, last = 7;
  CUmemLocationType last_type = CU_MEM_LOCATION_TYPE_INVALID;
  void* data[] = {&read_mostly, &last, &last_type};
  size_t sizes[] = {4, 4, sizeof last_type};
  CUmem_range_attribute attrs[] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                   CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE};
  REQUIRE(cuMemRangeGetAttributes(data, sizes, attrs, 3, managed, 2 * kPage) == CUDA_SUCCESS);
  CHECK(read_mostly == 0);
  CHECK(last == CU_DEVICE_CPU);
  CHECK(last_type == CU_MEM_LOCATION_TYPE_HOST);
  sizes[1] = 8;  // a 32-bit value's size must be 4
  CHECK(cuMemRangeGetAttributes(data, sizes, attrs, 3, managed, 2 * kPage) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttributes(data, sizes, attrs, 0, managed, 2 * kPage) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttributes(nullptr, sizes, attrs, 3, managed, 2 * kPage) == CUDA_ERROR_INVALID_VALUE);

  // Refusals: flags, an unknown device or location, memory that is not managed, bad sizes.
  CHECK(cuMemPrefetchAsync_v2(managed, kPage, kHost, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPrefetchAsync_v2(managed, kPage, device_location(3), 0, stream) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuMemPrefetchAsync(managed, kPage, 3, stream) == CUDA_ERROR_INVALID_DEVICE);
  const CUmemLocation no_type{CU_MEM_LOCATION_TYPE_INVALID, 0};
  CHECK(cuMemPrefetchAsync_v2(managed, kPage, no_type, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPrefetchAsync_v2(managed, 3 * kPage, kHost, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPrefetchAsync_v2(managed, 0, kHost, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr device_memory = 0;
  REQUIRE(cuMemAlloc(&device_memory, kPage) == CUDA_SUCCESS);
  CHECK(cuMemPrefetchAsync_v2(device_memory, kPage, kHost, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  int value = 0;
  CHECK(cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, device_memory, kPage) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttribute(&value, 2, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kPage) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttribute(&value, 6, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, kPage) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttribute(&value, 4, static_cast<CUmem_range_attribute>(99), managed, kPage) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttribute(nullptr, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kPage) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 0) == CUDA_ERROR_INVALID_VALUE);

  // A prefetch on a capturing stream is refused and ends the capture's chances.
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(cuMemPrefetchAsync_v2(managed, kPage, kHost, 0, stream) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  CHECK(cuMemFree(device_memory) == CUDA_SUCCESS);
  CHECK(cuMemFree(managed) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("cuStreamAttachMemAsync checks its arguments and is ordered on its stream", "[driver][managed]") {
  primary_context();
  CUdeviceptr managed = managed_memory(2 * kPage);
  Gate gate;
  CUstream stream = gated_stream(&gate);
  // Queued behind the gate: the stream is not done until it is.
  REQUIRE(cuStreamAttachMemAsync(stream, managed, 0, CU_MEM_ATTACH_SINGLE) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(cuStreamAttachMemAsync(stream, managed, 2 * kPage, CU_MEM_ATTACH_HOST) == CUDA_SUCCESS);
  CHECK(cuStreamAttachMemAsync(nullptr, managed, 0, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK(cuStreamAttachMemAsync_ptsz(nullptr, managed, 0, CU_MEM_ATTACH_SINGLE) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);

  // Refusals: singly to the NULL stream, flags that are not one of CUmemAttach_flags, part of an
  // allocation, memory that is not managed, a stream that does not exist.
  CHECK(cuStreamAttachMemAsync(nullptr, managed, 0, CU_MEM_ATTACH_SINGLE) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamAttachMemAsync(CU_STREAM_LEGACY, managed, 0, CU_MEM_ATTACH_SINGLE) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamAttachMemAsync(stream, managed, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamAttachMemAsync(stream, managed, 0, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamAttachMemAsync(stream, managed, kPage, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamAttachMemAsync(stream, managed + kPage, 0, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr device_memory = 0;
  REQUIRE(cuMemAlloc(&device_memory, kPage) == CUDA_SUCCESS);
  CHECK(cuStreamAttachMemAsync(stream, device_memory, 0, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamAttachMemAsync(reinterpret_cast<CUstream>(&gate), managed, 0, CU_MEM_ATTACH_GLOBAL) ==
        CUDA_ERROR_INVALID_HANDLE);

  // No graph node stands for it: refused on a capturing stream.
  REQUIRE(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(cuStreamAttachMemAsync(stream, managed, 0, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS);
  CUgraph graph = nullptr;
  CHECK(cuStreamEndCapture(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  CHECK(cuMemFree(device_memory) == CUDA_SUCCESS);
  CHECK(cuMemFree(managed) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("batch prefetches and discards check every range and record each prefetch", "[driver][managed]") {
  primary_context();
  CUdeviceptr managed = managed_memory(3 * kPage);
  Gate gate;
  CUstream stream = gated_stream(&gate);
  CUdeviceptr ranges[] = {managed, managed + kPage, managed + 2 * kPage};
  size_t sizes[] = {kPage, kPage, kPage};
  CUmemLocation locations[] = {device_location(1), kHost};
  size_t first_of[] = {0, 2};
  REQUIRE(cuMemPrefetchBatchAsync(ranges, sizes, 3, locations, first_of, 2, 0, stream) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 2 * kPage) == 1);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, ranges[2], kPage) == CU_DEVICE_CPU);
  CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY);  // ordered behind the gate
  gate.open();
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);

  // A discard keeps the recorded prefetches; discard and prefetch records the new location.
  REQUIRE(cuMemDiscardBatchAsync(ranges, sizes, 3, 0, stream) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, kPage) == 1);
  size_t from_zero[] = {0};
  REQUIRE(cuMemDiscardAndPrefetchBatchAsync(ranges, sizes, 3, locations + 1, from_zero, 1, 0, stream) == CUDA_SUCCESS);
  CHECK(attribute(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 3 * kPage) == CU_DEVICE_CPU);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);

  // Refusals: the legacy NULL stream, flags, the location indices, a range not managed, nothing.
  CHECK(cuMemDiscardBatchAsync(ranges, sizes, 3, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemDiscardBatchAsync(ranges, sizes, 3, 0, CU_STREAM_LEGACY) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemDiscardBatchAsync(ranges, sizes, 3, 1, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemDiscardBatchAsync(ranges, sizes, 0, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  size_t not_from_zero[] = {1, 2};
  CHECK(cuMemPrefetchBatchAsync(ranges, sizes, 3, locations, not_from_zero, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  size_t decreasing[] = {0, 0};
  CHECK(cuMemPrefetchBatchAsync(ranges, sizes, 3, locations, decreasing, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  size_t past_end[] = {0, 3};
  CHECK(cuMemPrefetchBatchAsync(ranges, sizes, 3, locations, past_end, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPrefetchBatchAsync(ranges, sizes, 1, locations, first_of, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPrefetchBatchAsync(ranges, sizes, 3, nullptr, first_of, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  CUmemLocation unknown[] = {device_location(5)};
  CHECK(cuMemPrefetchBatchAsync(ranges, sizes, 3, unknown, from_zero, 1, 0, stream) == CUDA_ERROR_INVALID_DEVICE);
  CUdeviceptr device_memory = 0;
  REQUIRE(cuMemAlloc(&device_memory, kPage) == CUDA_SUCCESS);
  CUdeviceptr mixed[] = {managed, device_memory};
  CHECK(cuMemDiscardBatchAsync(mixed, sizes, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);
  size_t too_long[] = {kPage, 3 * kPage};
  CHECK(cuMemDiscardBatchAsync(ranges, too_long, 2, 0, stream) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuMemFree(device_memory) == CUDA_SUCCESS);
  CHECK(cuMemFree(managed) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}
