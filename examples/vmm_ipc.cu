// vmm_ipc: virtual memory management and sharing its memory with another process, in the shape of
// NVIDIA's memMapIPCDrv and vectorAddMMAP samples. The parent creates two physical allocations on
// device 0 that can be exported as POSIX file descriptors (cuMemCreate, sized to the allocation
// granularity), maps them next to each other in one reserved address range (cuMemAddressReserve,
// cuMemMap) and makes the range readable and writable by device 0, and by device 1 where there is
// one (cuMemSetAccess). It fills the first allocation, exports both (cuMemExportToShareableHandle)
// and starts itself again as the child, passing the descriptors over a Unix socket. The child
// imports them (cuMemImportFromShareableHandle), maps them in a range of its own, checks the
// parent's data, writes its own into the second allocation, then unmaps and releases everything.
// The parent checks what the child wrote; with two devices it copies that to device 1 and runs a
// kernel there reading the first allocation across devices; then a kernel on device 0 adds the two
// allocations. Kernel results are verified unless --no-kernel-check.
//
//   vmm_ipc [--no-kernel-check] [SCALE]    SCALE x 256 Ki ints per allocation (default 1)
#include <cstdint>
#include <vector>

#include "check.h"
#include "driver_check.h"
#include "ipc_socket.h"

namespace {

constexpr int kAllocations = 2;  // the parent's data, then the child's

__global__ void add(const int* a, const int* b, int* out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

void launch_add(const int* a, const int* b, int* out, std::size_t n) {
  add<<<static_cast<unsigned>((n + 255) / 256), 256>>>(a, b, out, n);
  CHECK(cudaGetLastError());
}

int parent_value(std::size_t i) { return static_cast<int>((i * 2654435761u) % 999983); }
int child_value(std::size_t i) { return static_cast<int>((i * 40503u + 17) % 999979); }

// What comes with each descriptor.
struct AllocationMessage {
  std::uint64_t ints;  // the data in it
  std::uint64_t size;  // the physical allocation's size, a multiple of the granularity
};

CUmemAllocationProp device_allocation(int device) {
  return {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
          .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
          .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
}

std::size_t granularity(const CUmemAllocationProp& prop) {
  std::size_t bytes = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return bytes;
}

// Maps `handles` one after another at the start of a new reservation of `size` bytes, and gives
// each device in `devices` read-write access to all of it.
CUdeviceptr map_contiguously(const CUmemGenericAllocationHandle* handles, const std::size_t* sizes, std::size_t size,
                             const std::vector<int>& devices) {
  CUdeviceptr base = 0;
  CU_CHECK(cuMemAddressReserve(&base, size, 0, 0, 0));
  std::size_t offset = 0;
  for (int a = 0; a < kAllocations; ++a) {
    CU_CHECK(cuMemMap(base + offset, sizes[a], 0, handles[a], 0));
    offset += sizes[a];
  }
  std::vector<CUmemAccessDesc> access(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) {
    access[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[d].location.id = devices[d];
    access[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CU_CHECK(cuMemSetAccess(base, size, access.data(), access.size()));
  return base;
}

void unmap_and_release(CUdeviceptr base, std::size_t size, const CUmemGenericAllocationHandle* handles) {
  CU_CHECK(cuMemUnmap(base, size));
  for (int a = 0; a < kAllocations; ++a) CU_CHECK(cuMemRelease(handles[a]));
  CU_CHECK(cuMemAddressFree(base, size));
}

void check_ints(const std::vector<int>& seen, int (*expected)(std::size_t), const char* what) {
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != expected(i)) examples::fail("%s: element %zu is %d, expected %d", what, i, seen[i], expected(i));
  }
}

CUdevice device(int ordinal) {
  CUdevice handle = 0;
  CU_CHECK(cuDeviceGet(&handle, ordinal));
  return handle;
}

CUcontext primary_context(int ordinal) {
  CUcontext context = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, device(ordinal)));
  return context;
}

int child(int socket) {
  CU_CHECK(cuInit(0));
  CUcontext context = primary_context(0);
  CU_CHECK(cuCtxSetCurrent(context));
  CUmemGenericAllocationHandle handles[kAllocations] = {};
  std::size_t sizes[kAllocations] = {};
  std::size_t total = 0;
  std::uint64_t ints = 0;
  for (int a = 0; a < kAllocations; ++a) {
    AllocationMessage message{};
    const int fd = examples::receive_message(socket, &message, sizeof message);
    if (fd == -1) examples::fail("child: allocation %d came without its descriptor", a);
    CU_CHECK(cuMemImportFromShareableHandle(&handles[a], reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);  // the handle holds the memory now
    sizes[a] = message.size;
    total += message.size;
    ints = message.ints;
  }
  const std::size_t unit = granularity(device_allocation(0));
  for (int a = 0; a < kAllocations; ++a) {
    if (sizes[a] % unit != 0) examples::fail("child: allocation %d's size %zu is no multiple of %zu", a, sizes[a], unit);
  }
  // Mapped at addresses of this process's choosing: the data is the same, the pointers are not.
  const CUdeviceptr base = map_contiguously(handles, sizes, total, {0});
  std::vector<int> seen(ints);
  CU_CHECK(cuMemcpyDtoH(seen.data(), base, ints * sizeof(int)));
  check_ints(seen, parent_value, "child");
  std::vector<int> own(ints);
  for (std::size_t i = 0; i < ints; ++i) own[i] = child_value(i);
  CU_CHECK(cuMemcpyHtoD(base + sizes[0], own.data(), ints * sizeof(int)));
  CU_CHECK(cuCtxSynchronize());
  unmap_and_release(base, total, handles);
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(device(0)));
  return 0;
}

// With a second device that can reach device 0: the child's data is copied to device 1, and a
// kernel there reads the parent's allocation in place through the access cuMemSetAccess gave.
void use_from_peer(CUcontext context0, CUdeviceptr parent_data, CUdeviceptr child_data, std::size_t ints,
                          examples::Checksum& checksum, examples::KernelResults& kernel_results) {
  CUmemLocation peer{};
  peer.type = CU_MEM_LOCATION_TYPE_DEVICE;
  peer.id = 1;
  unsigned long long access = 0;
  CU_CHECK(cuMemGetAccess(&access, &peer, parent_data));
  if (access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) examples::fail("device 1 has access %llu to the mapping, not read-write", access);

  CUcontext context1 = primary_context(1);
  CU_CHECK(cuCtxSetCurrent(context1));
  CHECK(cudaSetDevice(1));
  const std::size_t bytes = ints * sizeof(int);
  CUdeviceptr copy = 0;
  CUdeviceptr sum = 0;
  CU_CHECK(cuMemAlloc(&copy, bytes));
  CU_CHECK(cuMemAlloc(&sum, bytes));
  CU_CHECK(cuMemcpyPeer(copy, context1, child_data, context0, bytes));
  launch_add(reinterpret_cast<const int*>(parent_data), reinterpret_cast<const int*>(copy), reinterpret_cast<int*>(sum),
             ints);
  std::vector<int> copied(ints), summed(ints);
  CU_CHECK(cuMemcpyDtoH(copied.data(), copy, bytes));
  CU_CHECK(cuMemcpyDtoH(summed.data(), sum, bytes));
  CU_CHECK(cuMemFree(copy));
  CU_CHECK(cuMemFree(sum));
  CHECK(cudaSetDevice(0));
  CU_CHECK(cuCtxSetCurrent(context0));
  CU_CHECK(cuDevicePrimaryCtxRelease(device(1)));

  check_ints(copied, child_value, "device 1's copy");
  if (kernel_results.checked) {
    for (std::size_t i = 0; i < ints; ++i) {
      if (summed[i] != parent_value(i) + child_value(i)) {
        examples::fail("device 1's kernel: element %zu is %d, expected %d", i, summed[i], parent_value(i) + child_value(i));
      }
    }
  }
  checksum.add(copied.data(), bytes);
  kernel_results.add(checksum, summed.data(), bytes);
}

}  // namespace

int main(int argc, char** argv) {
  examples::KernelResults kernel_results = examples::KernelResults::from_arguments(argc, argv);
  if (const int socket = examples::child_socket(argc, argv); socket != -1) return child(socket);
  const std::size_t ints = (std::size_t{1} << 18) * examples::parse_argument(argc, argv, 1, "SCALE");
  const std::size_t bytes = ints * sizeof(int);

  CU_CHECK(cuInit(0));
  const CUdevice device0 = device(0);
  int supported = 0;
  CU_CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device0));
  if (!supported) examples::fail("device 0 does not support virtual memory management");
  CU_CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device0));
  if (!supported) examples::fail("device 0's memory cannot be exported as POSIX file descriptors");
  int devices = 0;
  CU_CHECK(cuDeviceGetCount(&devices));
  int peer_capable = 0;
  if (devices >= 2) CU_CHECK(cuDeviceCanAccessPeer(&peer_capable, device(1), device0));
  CUcontext context = primary_context(0);
  CU_CHECK(cuCtxSetCurrent(context));
  CHECK(cudaSetDevice(0));  // the kernels go through the runtime, on the same primary context

  const CUmemAllocationProp prop = device_allocation(0);
  const std::size_t unit = granularity(prop);
  const std::size_t padded = (bytes + unit - 1) / unit * unit;
  const std::size_t sizes[kAllocations] = {padded, padded};
  CUmemGenericAllocationHandle handles[kAllocations] = {};
  for (int a = 0; a < kAllocations; ++a) CU_CHECK(cuMemCreate(&handles[a], sizes[a], &prop, 0));
  std::vector<int> access_devices{0};
  if (peer_capable) access_devices.push_back(1);
  const CUdeviceptr base = map_contiguously(handles, sizes, 2 * padded, access_devices);
  const CUdeviceptr parent_data = base;
  const CUdeviceptr child_data = base + sizes[0];
  std::vector<int> host(ints);
  for (std::size_t i = 0; i < ints; ++i) host[i] = parent_value(i);
  CU_CHECK(cuMemcpyHtoD(parent_data, host.data(), bytes));
  CU_CHECK(cuMemsetD32(child_data, 0, ints));
  CU_CHECK(cuCtxSynchronize());

  examples::Stopwatch stopwatch;
  examples::ChildProcess process = examples::start_child();
  for (int a = 0; a < kAllocations; ++a) {
    int fd = -1;
    CU_CHECK(cuMemExportToShareableHandle(&fd, handles[a], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    const AllocationMessage message{ints, sizes[a]};
    examples::send_message(process.socket, &message, sizeof message, fd);
    close(fd);
  }
  examples::wait_for_child(process);
  const double child_ms = stopwatch.elapsed_ms();

  examples::Checksum checksum;
  std::vector<int> from_child(ints);
  CU_CHECK(cuMemcpyDtoH(from_child.data(), child_data, bytes));
  check_ints(from_child, child_value, "from the child");
  checksum.add(from_child.data(), bytes);
  if (peer_capable) use_from_peer(context, parent_data, child_data, ints, checksum, kernel_results);

  // The two allocations read as one array each through the contiguous mapping.
  launch_add(reinterpret_cast<const int*>(parent_data), reinterpret_cast<const int*>(child_data),
             reinterpret_cast<int*>(child_data), ints);
  std::vector<int> summed(ints);
  CU_CHECK(cuMemcpyDtoH(summed.data(), child_data, bytes));
  if (kernel_results.checked) {
    for (std::size_t i = 0; i < ints; ++i) {
      if (summed[i] != parent_value(i) + child_value(i)) {
        examples::fail("element %zu is %d after the kernel, expected %d", i, summed[i], parent_value(i) + child_value(i));
      }
    }
  }
  kernel_results.add(checksum, summed.data(), bytes);
  CU_CHECK(cuCtxSynchronize());
  unmap_and_release(base, 2 * padded, handles);
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(device0));

  std::printf("vmm_ipc: %d allocations of %zu ints (%s, %s with the granularity) mapped side by side, shared with a child process, results %s\n",
              kAllocations, ints, examples::format_bytes(bytes).c_str(), examples::format_bytes(padded).c_str(),
              kernel_results.checked ? "verified" : "not checked");
  std::printf("  child imported both, mapped them, checked the first and wrote the second, released them: %.3f ms\n",
              child_ms);
  std::printf("  peer: %s\n", peer_capable ? "device 1 given read-write access to the mapping; the child's data copied to "
                                            "device 1 and added there to the parent's by a kernel"
                                          : "no second device that can access device 0, not shown");
  kernel_results.print();
  checksum.print();
  return 0;
}
