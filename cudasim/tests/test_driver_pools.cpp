// The simulated driver's stream-ordered pools: reuse rules, the release threshold, attributes.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <cstdint>

using namespace driver_test;

namespace {

cuuint64_t attribute(CUmemoryPool pool, CUmemPool_attribute attr) {
  cuuint64_t value = ~cuuint64_t{0};
  REQUIRE(cuMemPoolGetAttribute(pool, attr, &value) == CUDA_SUCCESS);
  return value;
}

CUmemoryPool default_pool() {
  CUmemoryPool pool = nullptr;
  REQUIRE(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  return pool;
}

// The properties of a pinned pool on device 0 that never reserves more than `max_size` (0: no limit
// but the device).
CUmemPoolProps device0_pool_props(size_t max_size) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  props.maxSize = max_size;
  return props;
}

}  // namespace

TEST_CASE("freed pool memory is reused at once on the same stream", "[driver][pools]") {
  primary_context();
  CUmemoryPool pool = default_pool();
  CUmemoryPool current = nullptr;
  REQUIRE(cuDeviceGetMemPool(&current, 0) == CUDA_SUCCESS);
  CHECK(current == pool);
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(stream, Gate::wait, &gate) == CUDA_SUCCESS);
  CUdeviceptr first = 0, second = 0;
  REQUIRE(cuMemAllocAsync(&first, 1000, stream) == CUDA_SUCCESS);
  CHECK(first % 512 == 0);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= 1000);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >= attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  REQUIRE(cuMemFreeAsync(first, stream) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
  REQUIRE(cuMemAllocAsync(&second, 1000, stream) == CUDA_SUCCESS);
  CHECK(second == first);  // stream order makes the reuse safe even though nothing ran yet
  CHECK_FALSE(gate.ran());
  gate.open();
  REQUIRE(cuMemFreeAsync(second, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  // The default release threshold is 0: a synchronisation gives everything back.
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("another stream reuses pool memory only after the free has executed", "[driver][pools]") {
  primary_context();
  CUmemoryPool pool = default_pool();
  cuuint64_t keep = 64 * kMiB;
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS);
  CUstream a = nullptr, b = nullptr;
  REQUIRE(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);

  // 2 MiB each: every allocation has a chunk of its own.
  CUdeviceptr ptr = 0, other = 0, again = 0;
  REQUIRE(cuMemAllocAsync(&ptr, 2 * kMiB, a) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &gate) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(ptr, a) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocAsync(&other, 2 * kMiB, b) == CUDA_SUCCESS);
  CHECK(other != ptr);  // a's free has not run: b must not get that memory
  gate.open();
  REQUIRE(cuStreamSynchronize(a) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocAsync(&again, 2 * kMiB, b) == CUDA_SUCCESS);
  CHECK(again == ptr);  // now it may
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * kMiB);

  REQUIRE(cuMemFreeAsync(other, b) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(again, b) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(b) == CUDA_SUCCESS);
  // Below the threshold the memory stays in the pool; trimming gives it back.
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * kMiB);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
  REQUIRE(cuMemPoolTrimTo(pool, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * kMiB);
  REQUIRE(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);

  // High-water marks remember the peak until reset (only to 0, which means "to current").
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) >= 4 * kMiB);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= 4 * kMiB);
  cuuint64_t zero = 0, nonzero = 5;
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &nonzero) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 0);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0);
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 0);
  CHECK(cuStreamDestroy(a) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(b) == CUDA_SUCCESS);
}

TEST_CASE("a block reused on its stream waits for its latest free before other streams get it",
          "[driver][pools]") {
  primary_context();
  CUmemoryPool pool = default_pool();
  cuuint64_t keep = 64 * kMiB, zero = 0;
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS);
  CUstream a = nullptr, b = nullptr, c = nullptr;
  for (CUstream* s : {&a, &b, &c}) REQUIRE(cuStreamCreate(s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Gate gate_a, gate_b;
  CUdeviceptr first = 0, reused = 0, other = 0;
  REQUIRE(cuMemAllocAsync(&first, kMiB, a) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &gate_a) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(first, a) == CUDA_SUCCESS);       // free #1, held on a
  REQUIRE(cuMemAllocAsync(&reused, kMiB, a) == CUDA_SUCCESS);
  REQUIRE(reused == first);                                 // same stream: at once
  REQUIRE(cuLaunchHostFunc(b, Gate::wait, &gate_b) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(reused, b) == CUDA_SUCCESS);      // free #2, held on b
  gate_a.open();
  REQUIRE(cuStreamSynchronize(a) == CUDA_SUCCESS);          // free #1 has run, free #2 has not
  REQUIRE(cuMemAllocAsync(&other, kMiB, c) == CUDA_SUCCESS);
  CHECK(other != first);
  gate_b.open();
  REQUIRE(cuStreamSynchronize(b) == CUDA_SUCCESS);
  CUdeviceptr after = 0;
  REQUIRE(cuMemAllocAsync(&after, kMiB, c) == CUDA_SUCCESS);
  CHECK(after == first);
  REQUIRE(cuMemFreeAsync(other, c) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(after, c) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  for (CUstream s : {a, b, c}) CHECK(cuStreamDestroy(s) == CUDA_SUCCESS);
}

TEST_CASE("pool memory counts against the device and is validated like any other", "[driver][pools]") {
  primary_context();
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAllocAsync(&ptr, 3 * kMiB, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
  CHECK(free_before - free_after == 4 * kMiB);  // reserved in 2 MiB units
  CHECK(cuMemsetD8Async(ptr, 1, 3 * kMiB, nullptr) == CUDA_SUCCESS);
  CHECK(cuMemsetD8Async(ptr, 1, 3 * kMiB + 1, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool owner = nullptr;
  CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr) == CUDA_SUCCESS);
  CHECK(owner == default_pool());
  REQUIRE(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(ptr, nullptr) == CUDA_ERROR_INVALID_VALUE);  // double free
  CHECK(cuMemFree(ptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemsetD8Async(ptr, 1, 1, nullptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
  CHECK(free_after == free_before);

  CUdeviceptr sync = 0;
  REQUIRE(cuMemAlloc(&sync, 4096) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(sync, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemFree(sync) == CUDA_SUCCESS);
  CHECK(cuMemAllocAsync(nullptr, 16, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocAsync(&ptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocAsync(&ptr, 16, reinterpret_cast<CUstream>(0x1000)) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("cuMemFree frees pool memory at once, without synchronising", "[driver][pools]") {
  // cuda.h: cuMemFree accepts cuMemAllocAsync / cuMemAllocFromPoolAsync memory and performs no
  // implicit synchronisation for it; the caller has made sure nothing uses it any more.
  primary_context();
  CUmemoryPool pool = default_pool();
  cuuint64_t keep = 64 * kMiB, zero = 0;
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS);
  CUstream a = nullptr, b = nullptr;
  REQUIRE(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr ptr = 0, again = 0;
  REQUIRE(cuMemAllocAsync(&ptr, kMiB, a) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8Async(ptr, 1, kMiB, a) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(a) == CUDA_SUCCESS);
  Gate gate;
  REQUIRE(cuLaunchHostFunc(a, Gate::wait, &gate) == CUDA_SUCCESS);
  CHECK(cuMemFree(ptr) == CUDA_SUCCESS);  // returns although stream a is held
  CHECK_FALSE(gate.ran());
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
  CHECK(cuMemFree(ptr) == CUDA_ERROR_INVALID_VALUE);  // double free
  CHECK(cuMemFreeAsync(ptr, a) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemAllocAsync(&again, kMiB, b) == CUDA_SUCCESS);
  CHECK(again == ptr);  // freed at once: any stream may reuse the block
  gate.open();
  REQUIRE(cuMemFree(again) == CUDA_SUCCESS);

  // Memory of a destroyed pool goes back to the device when cuMemFree frees it.
  const CUmemPoolProps props = device0_pool_props(0);
  CUmemoryPool created = nullptr;
  REQUIRE(cuMemPoolCreate(&created, &props) == CUDA_SUCCESS);
  size_t free_before = 0, free_now = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocFromPoolAsync(&ptr, kMiB, created, b) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolDestroy(created) == CUDA_SUCCESS);
  REQUIRE(cuMemFree(ptr) == CUDA_SUCCESS);
  REQUIRE(cuMemGetInfo(&free_now, &total) == CUDA_SUCCESS);
  CHECK(free_now == free_before);

  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  CHECK(cuStreamDestroy(a) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(b) == CUDA_SUCCESS);
}

TEST_CASE("buffer ids are unique for the process lifetime, also for a reused address", "[driver][pools]") {
  primary_context();
  auto buffer_id = [](CUdeviceptr ptr) {
    unsigned long long id = 0;
    REQUIRE(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr) == CUDA_SUCCESS);
    return id;
  };
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr first = 0, second = 0, sync = 0;
  REQUIRE(cuMemAllocAsync(&first, kMiB, stream) == CUDA_SUCCESS);
  const unsigned long long first_id = buffer_id(first);
  CHECK(buffer_id(first + 100) == first_id);  // one id per allocation, whatever the offset
  REQUIRE(cuMemFreeAsync(first, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocAsync(&second, kMiB, stream) == CUDA_SUCCESS);
  REQUIRE(second == first);  // same stream: the block is reused at once
  CHECK(buffer_id(second) != first_id);
  REQUIRE(cuMemAlloc(&sync, 4096) == CUDA_SUCCESS);
  CHECK(buffer_id(sync) != first_id);
  CHECK(buffer_id(sync) != buffer_id(second));
  CHECK(cuMemFree(sync) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(second, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("pool growth and release cost the allocation and free latencies", "[driver][pools]") {
  int rc = in_child([] {
    CHILD_CHECK(start_with_test_latencies());
    CUdeviceptr ptr = 0;
    CHILD_CHECK(succeeds_slowly([&] { return cuMemAllocAsync(&ptr, kMiB, nullptr); }));  // the pool grows
    CHILD_CHECK(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
    // Release threshold 0: the block goes back to the driver at the synchronisation.
    CHILD_CHECK(succeeds_slowly([] { return cuStreamSynchronize(nullptr); }));
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("small allocations are packed into shared chunks", "[driver][pools]") {
  primary_context();
  CUmemoryPool pool = default_pool();
  REQUIRE(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  cuuint64_t keep = 64 * kMiB;
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS);
  const cuuint64_t reserved_before = attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  CUdeviceptr blocks[8] = {};
  for (CUdeviceptr& block : blocks) REQUIRE(cuMemAllocAsync(&block, 200 * 1024, nullptr) == CUDA_SUCCESS);
  // 512-byte granules one after another in one 2 MiB chunk.
  for (int i = 1; i < 8; ++i) CHECK(blocks[i] == blocks[i - 1] + 200 * 1024);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == reserved_before + 2 * kMiB);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 8 * 200 * 1024);
  CUdeviceptr odd = 0;  // rounded to 512 bytes
  REQUIRE(cuMemAllocAsync(&odd, 1000, nullptr) == CUDA_SUCCESS);
  CHECK(odd == blocks[7] + 200 * 1024);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 8 * 200 * 1024 + 1024);
  // One live block keeps its chunk: trimming gives back nothing until every block is idle.
  for (CUdeviceptr block : blocks) REQUIRE(cuMemFreeAsync(block, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * kMiB);
  // A freed block serves a request it fits without being twice as large.
  CUdeviceptr reused = 0;
  REQUIRE(cuMemAllocAsync(&reused, 150 * 1024, nullptr) == CUDA_SUCCESS);
  CHECK(reused == blocks[0]);
  REQUIRE(cuMemFreeAsync(reused, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(odd, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  keep = 0;
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS);
}

TEST_CASE("created pools", "[driver][pools]") {
  primary_context();
  CUmemPoolProps props = device0_pool_props(0);
  CUmemoryPool pool = nullptr;
  REQUIRE(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  CHECK(pool != default_pool());
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAllocFromPoolAsync(&ptr, kMiB, pool, nullptr) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == kMiB);
  CHECK(attribute(default_pool(), CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);

  // Made current, the pool serves cuMemAllocAsync.
  REQUIRE(cuDeviceSetMemPool(0, pool) == CUDA_SUCCESS);
  CUdeviceptr from_current = 0;
  REQUIRE(cuMemAllocAsync(&from_current, kMiB, nullptr) == CUDA_SUCCESS);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 2 * kMiB);
  REQUIRE(cuMemFreeAsync(from_current, nullptr) == CUDA_SUCCESS);

  // Destroying it while memory is outstanding is allowed; the memory stays usable.
  REQUIRE(cuMemPoolDestroy(pool) == CUDA_SUCCESS);
  CUmemoryPool current = nullptr;
  REQUIRE(cuDeviceGetMemPool(&current, 0) == CUDA_SUCCESS);
  CHECK(current == default_pool());
  CHECK(cuMemsetD8(ptr, 7, kMiB) == CUDA_SUCCESS);
  CHECK(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
  cuuint64_t value = 0;
  CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocFromPoolAsync(&ptr, kMiB, pool, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolDestroy(pool) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolDestroy(default_pool()) == CUDA_ERROR_INVALID_VALUE);

  props.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
  CHECK(cuMemPoolCreate(&pool, &props) == CUDA_ERROR_INVALID_VALUE);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.id = 9;
  CHECK(cuMemPoolCreate(&pool, &props) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuMemPoolCreate(&pool, nullptr) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("pools run out of device memory and give idle memory back to retry", "[driver][pools]") {
  int rc = in_child([] {
    setenv("CUDASIM_DEVICE_MEMORY", "1GiB", 1);
    setenv("CUDASIM_CONTEXT_OVERHEAD", "0", 1);
    CHILD_CHECK(start_primary_context());
    CUmemoryPool pool = nullptr;
    CHILD_CHECK(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
    cuuint64_t keep_all = ~cuuint64_t{0};
    CHILD_CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all) == CUDA_SUCCESS);
    CUdeviceptr big = 0, other = 0;
    CHILD_CHECK(cuMemAllocAsync(&big, 768 * kMiB, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAllocAsync(&other, 512 * kMiB, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_CHECK(cuMemFreeAsync(big, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);  // kept: threshold is "all"
    cuuint64_t reserved = 0;
    CHILD_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS);
    CHILD_CHECK(reserved == 768 * kMiB);
    // 512 MiB does not fit beside the idle 768 MiB block, which is too large to reuse: the pool
    // releases it and retries.
    CHILD_CHECK(cuMemAllocAsync(&other, 256 * kMiB + 1, nullptr) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemAllocAsync(&big, 512 * kMiB, nullptr) == CUDA_SUCCESS);
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("a created pool never reserves more than its maxSize", "[driver][pools]") {
  primary_context();
  CUmemPoolProps props = device0_pool_props(8 * kMiB);
  CUmemoryPool pool = nullptr;
  REQUIRE(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  cuuint64_t keep_all = ~cuuint64_t{0};
  REQUIRE(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all) == CUDA_SUCCESS);
  CUstream stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);

  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  REQUIRE(cuMemAllocFromPoolAsync(&a, 4 * kMiB, pool, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocFromPoolAsync(&b, 3 * kMiB, pool, stream) == CUDA_SUCCESS);  // a 4 MiB block: 8 MiB reserved
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
  CHECK(cuMemAllocFromPoolAsync(&c, 1, pool, stream) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAllocFromPoolAsync(&c, 9 * kMiB, pool, stream) == CUDA_ERROR_OUT_OF_MEMORY);
  REQUIRE(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
  CHECK(free_after == free_before);  // the device had room: the pool's limit refused
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * kMiB);

  // Freed memory is reused within the limit; an idle block too large to reuse is given back to
  // make room for a growth that fits the limit.
  REQUIRE(cuMemFreeAsync(b, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocFromPoolAsync(&c, 2 * kMiB, pool, stream) == CUDA_SUCCESS);
  CHECK(c == b);  // a 4 MiB block serves a 2 MiB request (at least half its size)
  REQUIRE(cuMemFreeAsync(a, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);  // the free has run; the threshold keeps the block
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 8 * kMiB);
  REQUIRE(cuMemAllocFromPoolAsync(&d, 1 * kMiB, pool, stream) == CUDA_SUCCESS);  // 4 MiB idle block too big
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 6 * kMiB);
  REQUIRE(cuMemFreeAsync(c, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(d, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolDestroy(pool) == CUDA_SUCCESS);

  // maxSize 0: limited by the device only, as before; the default pool has no limit either.
  props.maxSize = 0;
  REQUIRE(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  REQUIRE(cuMemAllocFromPoolAsync(&a, 64 * kMiB, pool, stream) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(a, stream) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolDestroy(pool) == CUDA_SUCCESS);
  // A limit below one 2 MiB unit admits nothing.
  props.maxSize = kMiB;
  REQUIRE(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  CHECK(cuMemAllocFromPoolAsync(&a, 512, pool, stream) == CUDA_ERROR_OUT_OF_MEMORY);
  REQUIRE(cuMemPoolDestroy(pool) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("a pool's maxSize refusal is not a device allocation attempt", "[driver][pools]") {
  int rc = in_child([] {
    setenv("CUDASIM_FAIL_ALLOC_AFTER", "2", 1);
    CHILD_CHECK(start_primary_context());
    const CUmemPoolProps props = device0_pool_props(2 * kMiB);
    CUmemoryPool pool = nullptr;
    CHILD_CHECK(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
    CUdeviceptr a = 0, b = 0;
    CHILD_CHECK(cuMemAllocFromPoolAsync(&a, kMiB, pool, nullptr) == CUDA_SUCCESS);  // attempt 1
    CHILD_CHECK(cuMemAllocFromPoolAsync(&b, 2 * kMiB, pool, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);  // the limit
    CHILD_CHECK(cuMemAllocAsync(&b, kMiB, nullptr) == CUDA_SUCCESS);  // attempt 2
    CUdeviceptr c = 0;
    CHILD_CHECK(cuMemAllocAsync(&c, 4 * kMiB, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);  // attempt 3
    return 0;
  });
  REQUIRE(rc == 0);
}

TEST_CASE("a huge request to a pool with a maxSize is refused by the limit, not wrapped past it", "[driver][pools]") {
  primary_context();
  cuuint64_t keep_all = ~cuuint64_t{0};
  // An idle block kept by the default pool: a device-wide out-of-memory retry would release it.
  CUmemoryPool default_one = default_pool();
  REQUIRE(cuMemPoolSetAttribute(default_one, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all) == CUDA_SUCCESS);
  CUdeviceptr idle = 0;
  REQUIRE(cuMemAllocAsync(&idle, kMiB, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemFreeAsync(idle, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  const cuuint64_t idle_reserved = attribute(default_one, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  REQUIRE(idle_reserved >= 2 * kMiB);

  const CUmemPoolProps props = device0_pool_props(8 * kMiB);
  CUmemoryPool pool = nullptr;
  REQUIRE(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  CUdeviceptr held = 0, ptr = 0;
  REQUIRE(cuMemAllocFromPoolAsync(&held, kMiB, pool, nullptr) == CUDA_SUCCESS);  // 2 MiB reserved
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
  // reserved + the rounded size would wrap below maxSize for each of these.
  for (const std::size_t huge : {SIZE_MAX, SIZE_MAX - 2 * kMiB + 1, SIZE_MAX - 4 * kMiB}) {
    INFO(huge);
    CHECK(cuMemAllocFromPoolAsync(&ptr, huge, pool, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
  }
  // Refused by the pool's limit without asking the device: no pool gave memory back.
  REQUIRE(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
  CHECK(free_after == free_before);
  CHECK(attribute(default_one, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == idle_reserved);
  CHECK(attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * kMiB);

  REQUIRE(cuMemFreeAsync(held, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolDestroy(pool) == CUDA_SUCCESS);
  cuuint64_t release_all = 0;
  REQUIRE(cuMemPoolSetAttribute(default_one, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &release_all) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolTrimTo(default_one, 0) == CUDA_SUCCESS);
}

TEST_CASE("cuMemPoolSetAccess opens a pool to peer devices; its own device always has access",
          "[driver][pools][peers]") {
  primary_context();
  CUmemoryPool pool = nullptr;
  REQUIRE(cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  CUmemLocation own{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemLocation peer{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemAccess_flags flags{};
  CHECK(cuMemPoolGetAccess(&flags, pool, &own) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CHECK(cuMemPoolGetAccess(&flags, pool, &peer) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);  // peer access to a context does not reach pools

  const CUmemAccessDesc open{peer, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  REQUIRE(cuMemPoolSetAccess(pool, &open, 1) == CUDA_SUCCESS);
  CHECK(cuMemPoolGetAccess(&flags, pool, &peer) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // Checked before anything applies: the owner cannot lose access, a location must be a device.
  const CUmemAccessDesc mixed[] = {{peer, CU_MEM_ACCESS_FLAGS_PROT_NONE}, {own, CU_MEM_ACCESS_FLAGS_PROT_NONE}};
  CHECK(cuMemPoolSetAccess(pool, mixed, 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolGetAccess(&flags, pool, &peer) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const CUmemAccessDesc host{{CU_MEM_LOCATION_TYPE_HOST, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHECK(cuMemPoolSetAccess(pool, &host, 1) == CUDA_ERROR_INVALID_VALUE);
  const CUmemAccessDesc no_device{{CU_MEM_LOCATION_TYPE_DEVICE, 7}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHECK(cuMemPoolSetAccess(pool, &no_device, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolSetAccess(pool, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolGetAccess(nullptr, pool, &peer) == CUDA_ERROR_INVALID_VALUE);

  REQUIRE(cuMemPoolSetAccess(pool, mixed, 1) == CUDA_SUCCESS);  // the peer's access alone goes
  CHECK(cuMemPoolGetAccess(&flags, pool, &peer) == CUDA_SUCCESS);
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);

  int rc = in_child([] {
    setenv("CUDASIM_PEER_ACCESS", "none", 1);
    CHILD_CHECK(start_primary_context());
    CUmemoryPool default_pool = nullptr;
    CHILD_CHECK(cuDeviceGetDefaultMemPool(&default_pool, 0) == CUDA_SUCCESS);
    const CUmemAccessDesc to_peer{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHILD_CHECK(cuMemPoolSetAccess(default_pool, &to_peer, 1) == CUDA_ERROR_INVALID_VALUE);  // no peer
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("the pools of a location and allocation type", "[driver][pools]") {
  primary_context();
  CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool by_location = nullptr;
  REQUIRE(cuMemGetDefaultMemPool(&by_location, &device0, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS);
  CHECK(by_location == default_pool());
  CUmemoryPool current = nullptr;
  REQUIRE(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS);
  CHECK(current == by_location);  // never set: the default pool
  const CUmemPoolProps props = device0_pool_props(0);
  CUmemoryPool own = nullptr;
  REQUIRE(cuMemPoolCreate(&own, &props) == CUDA_SUCCESS);
  REQUIRE(cuMemSetMemPool(&device0, CU_MEM_ALLOCATION_TYPE_PINNED, own) == CUDA_SUCCESS);
  REQUIRE(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS);
  CHECK(current == own);
  REQUIRE(cuDeviceGetMemPool(&current, 0) == CUDA_SUCCESS);
  CHECK(current == own);  // one current pool, whichever call set it
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAllocAsync(&ptr, 4096, nullptr) == CUDA_SUCCESS);
  CUmemoryPool holder = nullptr;
  REQUIRE(cuPointerGetAttribute(&holder, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr) == CUDA_SUCCESS);
  CHECK(holder == own);
  REQUIRE(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuCtxSynchronize() == CUDA_SUCCESS);
  // The documented refusals.
  CHECK(cuMemGetDefaultMemPool(nullptr, &device0, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetMemPool(&current, nullptr, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetMemPool(&current, &device0, CU_MEM_ALLOCATION_TYPE_INVALID) == CUDA_ERROR_INVALID_VALUE);
  CUmemLocation nowhere{CU_MEM_LOCATION_TYPE_NONE, 0};
  CHECK(cuMemGetMemPool(&current, &nowhere, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_ERROR_INVALID_VALUE);
  CUmemLocation device9{CU_MEM_LOCATION_TYPE_DEVICE, 9};
  CHECK(cuMemGetDefaultMemPool(&current, &device9, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_ERROR_INVALID_DEVICE);
  CUmemLocation device1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CHECK(cuMemSetMemPool(&device1, CU_MEM_ALLOCATION_TYPE_PINNED, own) == CUDA_ERROR_INVALID_VALUE);  // not its pool
  // Host and managed pools are valid in CUDA, not simulated.
  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  CHECK(cuMemGetDefaultMemPool(&current, &host, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuMemGetMemPool(&current, &nowhere, CU_MEM_ALLOCATION_TYPE_MANAGED) == CUDA_ERROR_NOT_SUPPORTED);
  REQUIRE(cuMemSetMemPool(&device0, CU_MEM_ALLOCATION_TYPE_PINNED, by_location) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolDestroy(own) == CUDA_SUCCESS);
}
