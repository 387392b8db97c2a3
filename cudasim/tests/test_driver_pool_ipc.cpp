// The simulated driver's sharing of stream-ordered pools between processes:
// cuMemPoolExportToShareableHandle, cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer,
// cuMemPoolImportPointer, and freeing imported pointers. Forked children start with a fresh driver
// and inherit the exported descriptor, as a process receiving it over a socket would hold it.
#include "driver_support.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace driver_test;

namespace {

constexpr std::size_t kSmallBytes = 1000;           // packed into a chunk with others
constexpr std::size_t kLargeBytes = 3 * kMiB + 100;  // a chunk of its own

std::vector<std::uint8_t> pattern(std::size_t bytes, std::uint8_t seed) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i * 13 + seed);
  return data;
}

CUmemPoolProps device0_props(CUmemAllocationHandleType handle_types) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = handle_types;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  return props;
}

CUmemoryPool exportable_pool() {
  const CUmemPoolProps props = device0_props(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemoryPool pool = nullptr;
  REQUIRE(cuMemPoolCreate(&pool, &props) == CUDA_SUCCESS);
  return pool;
}

CUdeviceptr allocate_filled(CUmemoryPool pool, std::size_t bytes, std::uint8_t seed) {
  CUdeviceptr ptr = 0;
  REQUIRE(cuMemAllocFromPoolAsync(&ptr, bytes, pool, nullptr) == CUDA_SUCCESS);
  const auto data = pattern(bytes, seed);
  REQUIRE(cuMemcpyHtoD(ptr, data.data(), bytes) == CUDA_SUCCESS);
  return ptr;
}

int export_fd(CUmemoryPool pool) {
  int fd = -1;
  REQUIRE(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  REQUIRE(fd >= 0);
  return fd;
}

void* as_handle(int fd) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)); }

bool holds(CUdeviceptr ptr, const std::vector<std::uint8_t>& expected) {
  std::vector<std::uint8_t> read(expected.size());
  return cuMemcpyDtoH(read.data(), ptr, read.size()) == CUDA_SUCCESS && read == expected;
}

}  // namespace

TEST_CASE("pointers of an exported pool map the same bytes in another process", "[driver][pool_ipc]") {
  primary_context();
  CUmemoryPool pool = exportable_pool();
  const CUdeviceptr filler = allocate_filled(pool, 512, 1);  // so the small block is not at a chunk's start
  const CUdeviceptr small = allocate_filled(pool, kSmallBytes, 2);
  const CUdeviceptr large = allocate_filled(pool, kLargeBytes, 3);
  const int fd = export_fd(pool);
  CUmemPoolPtrExportData small_data{}, large_data{}, inside_data{};
  REQUIRE(cuMemPoolExportPointer(&small_data, small) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolExportPointer(&large_data, large) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolExportPointer(&inside_data, large + 4096) == CUDA_SUCCESS);  // names the allocation
  CHECK(std::memcmp(large_data.reserved, inside_data.reserved, sizeof large_data.reserved) == 0);

  const int rc = in_child([&] {
    CHILD_CHECK(start_primary_context());
    size_t free_before = 0, free_after = 0, total = 0;
    CHILD_CHECK(cuMemGetInfo(&free_before, &total) == CUDA_SUCCESS);
    CUmemoryPool imported = nullptr;
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                   0) == CUDA_SUCCESS);
    close(fd);  // the driver keeps its own reference
    CUdeviceptr got_small = 0, got_large = 0;
    CHILD_CHECK(cuMemPoolImportPointer(&got_small, imported, &small_data) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemPoolImportPointer(&got_large, imported, &large_data) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemGetInfo(&free_after, &total) == CUDA_SUCCESS);
    CHILD_CHECK(free_after == free_before);  // the exporter's memory: nothing charged here
    CHILD_CHECK(got_small % 512 == 0 && got_large % 512 == 0);
    CHILD_CHECK(holds(got_small, pattern(kSmallBytes, 2)));
    CHILD_CHECK(holds(got_large, pattern(kLargeBytes, 3)));
    CUdeviceptr base = 0;
    size_t size = 0;
    CHILD_CHECK(cuMemGetAddressRange(&base, &size, got_large + 10) == CUDA_SUCCESS);
    CHILD_CHECK(base == got_large && size == kLargeBytes);
    // An imported pool allocates nothing, and cannot be made the device's pool.
    CUdeviceptr allocated = 0;
    CHILD_CHECK(cuMemAllocFromPoolAsync(&allocated, 4096, imported, nullptr) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuDeviceSetMemPool(0, imported) == CUDA_ERROR_INVALID_VALUE);
    // Not a legacy IPC mapping: it is freed, never closed.
    CHILD_CHECK(cuIpcCloseMemHandle(got_small) == CUDA_ERROR_INVALID_VALUE);
    const auto reply = pattern(kSmallBytes, 99);
    CHILD_CHECK(cuMemcpyHtoD(got_small, reply.data(), kSmallBytes) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(got_small) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFree(got_small) == CUDA_ERROR_INVALID_VALUE);
    std::uint8_t byte = 0;
    CHILD_CHECK(cuMemcpyDtoH(&byte, got_small, 1) == CUDA_ERROR_INVALID_VALUE);  // unmapped
    // cuMemFreeAsync unmaps once the stream reaches it.
    CUstream stream = nullptr;
    CHILD_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemFreeAsync(got_large, stream) == CUDA_SUCCESS);
    CHILD_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemcpyDtoH(&byte, got_large, 1) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolDestroy(imported) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
  CHECK(holds(small, pattern(kSmallBytes, 99)));  // the child's write, seen by the exporter
  CHECK(holds(large, pattern(kLargeBytes, 3)));
  close(fd);
  for (CUdeviceptr ptr : {filler, small, large}) CHECK(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(cuMemPoolDestroy(pool) == CUDA_SUCCESS);
}

TEST_CASE("an exportable pool gives released chunks' memory back", "[driver][pool_ipc]") {
  primary_context();
  CUmemoryPool pool = exportable_pool();
  const int fd = export_fd(pool);
  const CUdeviceptr ptr = allocate_filled(pool, kLargeBytes, 5);
  struct stat info {};
  REQUIRE(fstat(fd, &info) == 0);
  CHECK(info.st_blocks * 512 >= static_cast<blkcnt_t>(kLargeBytes));  // the written bytes live in the file
  REQUIRE(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  REQUIRE(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  REQUIRE(fstat(fd, &info) == 0);
  CHECK(info.st_blocks == 0);
  // A new chunk takes a new range of the file: a stale import of the old one never sees it.
  const CUdeviceptr again = allocate_filled(pool, kLargeBytes, 6);
  CHECK(cuMemFreeAsync(again, nullptr) == CUDA_SUCCESS);
  close(fd);
  CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(cuMemPoolDestroy(pool) == CUDA_SUCCESS);
}

TEST_CASE("pool sharing misuse returns the documented codes", "[driver][pool_ipc]") {
  primary_context();
  // Handle types: only POSIX descriptors exist here.
  CUmemoryPool refused = nullptr;
  CUmemPoolProps props = device0_props(CU_MEM_HANDLE_TYPE_WIN32);
  CHECK(cuMemPoolCreate(&refused, &props) == CUDA_ERROR_NOT_SUPPORTED);
  props = device0_props(CU_MEM_HANDLE_TYPE_FABRIC);
  CHECK(cuMemPoolCreate(&refused, &props) == CUDA_ERROR_NOT_SUPPORTED);
  props = device0_props(static_cast<CUmemAllocationHandleType>(0x100));
  CHECK(cuMemPoolCreate(&refused, &props) == CUDA_ERROR_INVALID_VALUE);

  // A pool created without the handle type, and the default pool, are not IPC capable.
  props = device0_props(CU_MEM_HANDLE_TYPE_NONE);
  CUmemoryPool plain = nullptr;
  REQUIRE(cuMemPoolCreate(&plain, &props) == CUDA_SUCCESS);
  int fd = -1;
  CHECK(cuMemPoolExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CUmemoryPool default_pool = nullptr;
  REQUIRE(cuDeviceGetDefaultMemPool(&default_pool, 0) == CUDA_SUCCESS);
  CHECK(cuMemPoolExportToShareableHandle(&fd, default_pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CUmemPoolPtrExportData data{};
  const CUdeviceptr plain_block = allocate_filled(plain, 4096, 1);
  CHECK(cuMemPoolExportPointer(&data, plain_block) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr synchronous = 0;
  REQUIRE(cuMemAlloc(&synchronous, 4096) == CUDA_SUCCESS);
  CHECK(cuMemPoolExportPointer(&data, synchronous) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolExportPointer(&data, 0x1234) == CUDA_ERROR_INVALID_VALUE);

  CUmemoryPool pool = exportable_pool();
  const CUdeviceptr block = allocate_filled(pool, 4096, 2);
  CHECK(cuMemPoolExportToShareableHandle(nullptr, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1) ==
        CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  CHECK(cuMemPoolExportPointer(nullptr, block) == CUDA_ERROR_INVALID_VALUE);
  fd = export_fd(pool);
  REQUIRE(cuMemPoolExportPointer(&data, block) == CUDA_SUCCESS);
  CUmemoryPool other = exportable_pool();
  const CUdeviceptr other_block = allocate_filled(other, 4096, 3);
  CUmemPoolPtrExportData other_data{};
  REQUIRE(cuMemPoolExportPointer(&other_data, other_block) == CUDA_SUCCESS);
  const int plain_file = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  REQUIRE(plain_file >= 0);

  const int rc = in_child([&] {
    CHILD_CHECK(start_primary_context());
    CUmemoryPool imported = nullptr;
    const auto posix = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(nullptr, as_handle(fd), posix, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), posix, 1) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(&imported, as_handle(plain_file), posix, 0) ==
                CUDA_ERROR_INVALID_VALUE);  // no pool's file
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(&imported, as_handle(-1), posix, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), CU_MEM_HANDLE_TYPE_WIN32, 0) ==
                CUDA_ERROR_NOT_SUPPORTED);
    CHILD_CHECK(cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), posix, 0) == CUDA_SUCCESS);
    CUdeviceptr got = 0;
    CHILD_CHECK(cuMemPoolImportPointer(nullptr, imported, &data) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolImportPointer(&got, imported, nullptr) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolImportPointer(&got, imported, &other_data) == CUDA_ERROR_INVALID_VALUE);  // another pool's
    CUmemPoolPtrExportData garbage{};
    std::memset(garbage.reserved, 0x5a, sizeof garbage.reserved);
    CHILD_CHECK(cuMemPoolImportPointer(&got, imported, &garbage) == CUDA_ERROR_INVALID_VALUE);
    CUmemoryPool default_here = nullptr;
    CHILD_CHECK(cuDeviceGetDefaultMemPool(&default_here, 0) == CUDA_SUCCESS);
    CHILD_CHECK(cuMemPoolImportPointer(&got, default_here, &data) == CUDA_ERROR_INVALID_VALUE);  // not imported
    int reexported = -1;
    CHILD_CHECK(cuMemPoolExportToShareableHandle(&reexported, imported, posix, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_CHECK(cuMemPoolImportPointer(&got, imported, &data) == CUDA_SUCCESS);
    CHILD_CHECK(holds(got, pattern(4096, 2)));
    CHILD_CHECK(cuMemFree(got) == CUDA_SUCCESS);
    return 0;
  });
  CHECK(rc == 0);
  close(plain_file);
  close(fd);
  for (CUdeviceptr ptr : {plain_block, block, other_block}) CHECK(cuMemFreeAsync(ptr, nullptr) == CUDA_SUCCESS);
  CHECK(cuMemFree(synchronous) == CUDA_SUCCESS);
  CHECK(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  for (CUmemoryPool created : {plain, pool, other}) CHECK(cuMemPoolDestroy(created) == CUDA_SUCCESS);
}
