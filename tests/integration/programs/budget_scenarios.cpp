// Programs shaped like the frameworks' own memory paths, through the CUDA driver API, for the budget
// tests (test_budget.py). Each grows until the driver (or gpumem's budget) refuses, prints `key=value`
// lines, and checks at every step that cuMemGetInfo, cuDeviceTotalMem and NVML (when it can be
// loaded) agree. Exits 0 when every call behaved as documented, 3 on an unexpected error.
//
//   expandable STEP_MIB [STEPS]   PyTorch's expandable segments: one reserved range, grown by mapping
//                                 STEP_MIB physical chunks (entry points through cuGetProcAddress)
//   xla_vmm SIZE_MIB [COUNT]      XLA's VMM allocator: reserve + create + map + set access per block
//   nccl                          NCCL's cuMem buffers: a POSIX-fd exportable allocation, exported,
//                                 imported and mapped twice; bytes written through one mapping are
//                                 read through the other
//   vllm_sleep SIZE_MIB CHUNKS    vLLM's sleep mode: weights mapped, unmapped and released to sleep,
//                                 created and mapped again to wake, contents restored and checked
//   rmm_async SIZE_MIB [COUNT]    RMM's async resource: its own pool, cuMemAllocFromPoolAsync
//   cupy_managed SIZE_MIB [COUNT] CuPy's managed memory: cuMemAllocManaged
//   texture SIDE [COUNT]          CUDA arrays (float4, SIDE x SIDE) as textures use
//   workspaces_then_vmm STEP_MIB  a few small cuMemAlloc workspaces (cuBLAS), then a VMM heap
//   vmm_then_workspaces STEP_MIB  a VMM heap first, then the workspaces
//   malloc_free_then_vmm STEP_MIB cuMemAlloc blocks, all freed, then a VMM heap as large as it gets
//   pool_then_create SIZE_MIB     cuMemAlloc and cuMemFree of SIZE (cuda_async mode: its pool keeps it),
//                                 a context synchronisation, then cuMemCreate of SIZE
//   own_pool_then_malloc SIZE_MIB the program's own pool, release threshold at its maximum (it keeps
//                                 everything): SIZE allocated and freed there, then cuMemAlloc of SIZE
//   pool_threads THREADS          THREADS threads allocating and freeing 2 to 8 MiB blocks, stream-ordered
//                                 on streams of their own: four blocks each, held by all the threads at
//                                 once, then 200 operations each
//   array_threads THREADS         THREADS threads creating and destroying 1024 x 1024 float4 arrays
//                                 (16 MiB), three at a time, 50 times each
//   info                          the three answers, once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <unistd.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "driver_check.h"

// NVML as a program loads it (dlopen + dlsym), with the types nvml.h declares (same names, so a
// call through these pointers has the callee's own function type).
typedef enum nvmlReturn_enum { NVML_RETURN_SUCCESS = 0 } nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlMemory_st {
  unsigned long long total, free, used;
} NvmlMemory;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;


struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlDevice_t device = nullptr;
  bool loaded = false;
};

Nvml load_nvml() {
  Nvml nvml;
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (library == nullptr) return nvml;
  nvml.init = reinterpret_cast<decltype(nvml.init)>(dlsym(library, "nvmlInit_v2"));
  nvml.handle_by_index = reinterpret_cast<decltype(nvml.handle_by_index)>(dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
  nvml.memory_info = reinterpret_cast<decltype(nvml.memory_info)>(dlsym(library, "nvmlDeviceGetMemoryInfo"));
  nvml.loaded = nvml.init != nullptr && nvml.handle_by_index != nullptr && nvml.memory_info != nullptr &&
                nvml.init() == 0 && nvml.handle_by_index(0, &nvml.device) == 0;
  return nvml;
}

struct Program {
  CUdevice device = 0;
  CUcontext context = nullptr;
  Nvml nvml;
  int disagreements = 0;
  std::size_t first_total = 0;

  Program() {
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGet(&device, 0));
    CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
    CHECK_CU(cuCtxSetCurrent(context));
    nvml = load_nvml();
  }

  // The three answers must agree: the same total everywhere; NVML's used + free is that total, and
  // its free (the device's view: memory nobody holds) is at most cuMemGetInfo's (the program's view,
  // which adds what the arena holds unused and would hand out).
  void check(const char* where) {
    std::size_t free = 0, total = 0, device_total = 0;
    CHECK_CU(cuMemGetInfo(&free, &total));
    CHECK_CU(cuDeviceTotalMem(&device_total, device));
    if (first_total == 0) first_total = total;
    bool agree = total == device_total && total == first_total && free <= total;
    NvmlMemory memory{};
    if (nvml.loaded && nvml.memory_info(nvml.device, &memory) == 0) {
      agree = agree && memory.total == total && memory.used + memory.free == memory.total && memory.free <= free;
    }
    if (!agree) {
      ++disagreements;
      std::fprintf(stderr, "%s: cuMemGetInfo %zu/%zu, cuDeviceTotalMem %zu, NVML %llu/%llu (used %llu)\n", where, free,
                   total, device_total, memory.free, memory.total, memory.used);
    }
  }

  int finish() const {
    std::size_t free = 0, total = 0;
    CHECK_CU(cuMemGetInfo(&free, &total));
    std::printf("total=%zu\nfinal_free=%zu\nnvml=%s\ndisagreements=%d\n", first_total, free,
                nvml.loaded ? "loaded" : "absent", disagreements);
    return disagreements == 0 ? 0 : 4;
  }
};

CUmemAllocationProp device_prop(CUdevice device, bool exportable = false) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

void set_access(CUdeviceptr ptr, std::size_t size, CUdevice device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(ptr, size, &access, 1));
}

// PyTorch reaches the VMM calls through cudaGetDriverEntryPoint, i.e. cuGetProcAddress.
template <typename Function>
Function entry_point(const char* name, int version) {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  CHECK_CU(cuGetProcAddress(name, &function, version, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  return reinterpret_cast<Function>(function);
}

// One reserved range grown by mapping chunks; unmapped and released at the end. Returns bytes mapped.
std::size_t grow_segment(Program& program, std::size_t step, std::size_t max_steps, const char* prefix) {
  const auto create = entry_point<PFN_cuMemCreate_v10020>("cuMemCreate", 10020);
  const auto map = entry_point<PFN_cuMemMap_v10020>("cuMemMap", 10020);
  const auto unmap = entry_point<PFN_cuMemUnmap_v10020>("cuMemUnmap", 10020);
  const auto release = entry_point<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);
  const CUmemAllocationProp prop = device_prop(program.device);
  std::size_t granularity = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  step = (step + granularity - 1) / granularity * granularity;
  std::size_t device_total = 0;
  CHECK_CU(cuDeviceTotalMem(&device_total, program.device));
  const std::size_t range = (device_total + step - 1) / step * step + step;  // as PyTorch: the whole device
  CUdeviceptr base = 0;
  CHECK_CU(cuMemAddressReserve(&base, range, 0, 0, 0));
  std::vector<CUmemGenericAllocationHandle> handles;
  CUresult refused = CUDA_SUCCESS;
  while (handles.size() < max_steps && (handles.size() + 1) * step <= range) {
    CUmemGenericAllocationHandle handle{};
    refused = create(&handle, step, &prop, 0);
    if (refused != CUDA_SUCCESS) break;
    const CUdeviceptr at = base + handles.size() * step;
    CHECK_CU(map(at, step, 0, handle, 0));
    set_access(at, step, program.device);
    CHECK_CU(cuMemsetD8(at, static_cast<unsigned char>(handles.size()), step));
    handles.push_back(handle);
    if (handles.size() % 8 == 0) program.check("growing");
  }
  const std::size_t mapped = handles.size() * step;
  unsigned char probe = 0;
  if (!handles.empty()) CHECK_CU(cuMemcpyDtoH(&probe, base + mapped - 1, 1));
  std::printf("%s_mapped=%zu\n%s_steps=%zu\n%s_stopped_by=%s\n%s_data_ok=%d\n", prefix, mapped, prefix,
              handles.size(), prefix, refused == CUDA_SUCCESS ? "count" : cu_error_name(refused), prefix,
              handles.empty() || probe == static_cast<unsigned char>(handles.size() - 1) ? 1 : 0);
  program.check("grown");
  for (std::size_t i = 0; i < handles.size(); ++i) {
    CHECK_CU(unmap(base + i * step, step));
    CHECK_CU(release(handles[i]));
  }
  CHECK_CU(cuMemAddressFree(base, range));
  program.check("shrunk");
  return mapped;
}

struct VmmBlock {
  CUdeviceptr ptr;
  std::size_t size;
  CUmemGenericAllocationHandle handle;
};

CUresult vmm_allocate(Program& program, std::size_t size, VmmBlock& out) {
  const CUmemAllocationProp prop = device_prop(program.device);
  CUmemGenericAllocationHandle handle{};
  const CUresult created = cuMemCreate(&handle, size, &prop, 0);
  if (created != CUDA_SUCCESS) return created;
  CUdeviceptr ptr = 0;
  CHECK_CU(cuMemAddressReserve(&ptr, size, 0, 0, 0));
  CHECK_CU(cuMemMap(ptr, size, 0, handle, 0));
  set_access(ptr, size, program.device);
  out = VmmBlock{ptr, size, handle};
  return CUDA_SUCCESS;
}

void vmm_free(const VmmBlock& block) {
  CHECK_CU(cuMemUnmap(block.ptr, block.size));
  CHECK_CU(cuMemRelease(block.handle));
  CHECK_CU(cuMemAddressFree(block.ptr, block.size));
}

int xla_vmm(Program& program, std::size_t size, std::size_t count) {
  std::vector<VmmBlock> blocks;
  CUresult refused = CUDA_SUCCESS;
  while (blocks.size() < count) {
    VmmBlock block{};
    refused = vmm_allocate(program, size, block);
    if (refused != CUDA_SUCCESS) break;
    blocks.push_back(block);
    program.check("allocated");
  }
  std::printf("blocks=%zu\nbytes=%zu\nstopped_by=%s\n", blocks.size(), blocks.size() * size,
              refused == CUDA_SUCCESS ? "count" : cu_error_name(refused));
  for (const VmmBlock& block : blocks) vmm_free(block);
  program.check("freed");
  return program.finish();
}

int nccl(Program& program) {
  const CUmemAllocationProp prop = device_prop(program.device, /*exportable=*/true);
  std::size_t size = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CUmemGenericAllocationHandle handle{};
  CHECK_CU(cuMemCreate(&handle, size, &prop, 0));
  program.check("created");
  int fd = -1;
  CHECK_CU(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemGenericAllocationHandle imported{};
  CHECK_CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  CUdeviceptr first = 0, second = 0;
  CHECK_CU(cuMemAddressReserve(&first, size, 0, 0, 0));
  CHECK_CU(cuMemAddressReserve(&second, size, 0, 0, 0));
  CHECK_CU(cuMemMap(first, size, 0, handle, 0));
  CHECK_CU(cuMemMap(second, size, 0, imported, 0));
  set_access(first, size, program.device);
  set_access(second, size, program.device);
  CHECK_CU(cuMemsetD32(first, 0x6e63636cu, size / 4));
  unsigned int seen = 0;
  CHECK_CU(cuMemcpyDtoH(&seen, second + size - 4, 4));
  program.check("mapped twice");
  std::printf("shared_data_ok=%d\n", seen == 0x6e63636cu ? 1 : 0);
  CHECK_CU(cuMemUnmap(first, size));
  CHECK_CU(cuMemUnmap(second, size));
  CHECK_CU(cuMemRelease(handle));
  CHECK_CU(cuMemRelease(imported));
  CHECK_CU(cuMemAddressFree(first, size));
  CHECK_CU(cuMemAddressFree(second, size));
  program.check("released");
  return program.finish();
}

int vllm_sleep(Program& program, std::size_t chunk, std::size_t chunks) {
  std::vector<VmmBlock> weights(chunks);
  for (std::size_t i = 0; i < chunks; ++i) {
    CHECK_CU(vmm_allocate(program, chunk, weights[i]));
    CHECK_CU(cuMemsetD8(weights[i].ptr, static_cast<unsigned char>(0x40 + i), chunk));
  }
  std::size_t awake_free = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&awake_free, &total));
  program.check("awake");
  // Sleep: back up to the host, then unmap and release the physical memory (the ranges stay).
  std::vector<std::vector<unsigned char>> backup(chunks, std::vector<unsigned char>(chunk));
  for (std::size_t i = 0; i < chunks; ++i) {
    CHECK_CU(cuMemcpyDtoH(backup[i].data(), weights[i].ptr, chunk));
    CHECK_CU(cuMemUnmap(weights[i].ptr, chunk));
    CHECK_CU(cuMemRelease(weights[i].handle));
  }
  std::size_t asleep_free = 0;
  CHECK_CU(cuMemGetInfo(&asleep_free, &total));
  program.check("asleep");
  // Wake: new physical memory under the same ranges, contents restored.
  const CUmemAllocationProp prop = device_prop(program.device);
  bool intact = true;
  for (std::size_t i = 0; i < chunks; ++i) {
    CHECK_CU(cuMemCreate(&weights[i].handle, chunk, &prop, 0));
    CHECK_CU(cuMemMap(weights[i].ptr, chunk, 0, weights[i].handle, 0));
    set_access(weights[i].ptr, chunk, program.device);
    CHECK_CU(cuMemcpyHtoD(weights[i].ptr, backup[i].data(), chunk));
    unsigned char last = 0;
    CHECK_CU(cuMemcpyDtoH(&last, weights[i].ptr + chunk - 1, 1));
    intact = intact && last == static_cast<unsigned char>(0x40 + i);
  }
  program.check("woken");
  std::printf("freed_by_sleep=%zu\nwoken_data_ok=%d\n", asleep_free - awake_free, intact ? 1 : 0);
  for (const VmmBlock& block : weights) vmm_free(block);
  return program.finish();
}

int rmm_async(Program& program, std::size_t size, std::size_t count) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = program.device;
  CUmemoryPool pool = nullptr;
  CHECK_CU(cuMemPoolCreate(&pool, &props));
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<CUdeviceptr> blocks;
  CUresult refused = CUDA_SUCCESS;
  while (blocks.size() < count) {
    CUdeviceptr ptr = 0;
    refused = cuMemAllocFromPoolAsync(&ptr, size, pool, stream);
    if (refused != CUDA_SUCCESS) break;
    blocks.push_back(ptr);
    CHECK_CU(cuStreamSynchronize(stream));
    program.check("allocated");
  }
  std::printf("blocks=%zu\nbytes=%zu\nstopped_by=%s\n", blocks.size(), blocks.size() * size,
              refused == CUDA_SUCCESS ? "count" : cu_error_name(refused));
  for (CUdeviceptr ptr : blocks) CHECK_CU(cuMemFreeAsync(ptr, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemPoolTrimTo(pool, 0));
  CHECK_CU(cuMemPoolDestroy(pool));
  CHECK_CU(cuStreamDestroy(stream));
  program.check("freed");
  return program.finish();
}

int cupy_managed(Program& program, std::size_t size, std::size_t count) {
  std::vector<CUdeviceptr> blocks;
  CUresult refused = CUDA_SUCCESS;
  while (blocks.size() < count) {
    CUdeviceptr ptr = 0;
    refused = cuMemAllocManaged(&ptr, size, CU_MEM_ATTACH_GLOBAL);
    if (refused != CUDA_SUCCESS) break;
    CHECK_CU(cuMemsetD8(ptr, 0x5a, size));
    CHECK_CU(cuCtxSynchronize());  // the set is queued on the stream; the host reads after it ran
    blocks.push_back(ptr);
    program.check("allocated");
  }
  const bool host_sees = blocks.empty() || *reinterpret_cast<unsigned char*>(blocks.back() + size - 1) == 0x5a;
  std::printf("blocks=%zu\nbytes=%zu\nstopped_by=%s\nhost_data_ok=%d\n", blocks.size(), blocks.size() * size,
              refused == CUDA_SUCCESS ? "count" : cu_error_name(refused), host_sees ? 1 : 0);
  for (CUdeviceptr ptr : blocks) CHECK_CU(cuMemFree(ptr));
  program.check("freed");
  return program.finish();
}

int texture(Program& program, std::size_t side, std::size_t count) {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  descriptor.Width = side;
  descriptor.Height = side;
  descriptor.Format = CU_AD_FORMAT_FLOAT;
  descriptor.NumChannels = 4;
  std::vector<CUarray> arrays;
  CUresult refused = CUDA_SUCCESS;
  while (arrays.size() < count) {
    CUarray array = nullptr;
    refused = cuArray3DCreate(&array, &descriptor);
    if (refused != CUDA_SUCCESS) break;
    arrays.push_back(array);
    program.check("created");
  }
  std::printf("arrays=%zu\nstopped_by=%s\n", arrays.size(), refused == CUDA_SUCCESS ? "count" : cu_error_name(refused));
  for (CUarray array : arrays) CHECK_CU(cuArrayDestroy(array));
  program.check("destroyed");
  return program.finish();
}

// cuBLAS-style workspaces: a few small cuMemAlloc blocks, kept for the whole run.
std::vector<CUdeviceptr> workspaces(Program& program) {
  std::vector<CUdeviceptr> blocks(3);
  for (CUdeviceptr& block : blocks) CHECK_CU(cuMemAlloc(&block, 4 * kMiB));
  program.check("workspaces");
  return blocks;
}

int workspaces_and_vmm(Program& program, std::size_t step, bool workspaces_first) {
  std::vector<CUdeviceptr> blocks;
  if (workspaces_first) blocks = workspaces(program);
  std::size_t budget = 0, free = 0;
  CHECK_CU(cuMemGetInfo(&free, &budget));
  if (workspaces_first) {
    grow_segment(program, step, static_cast<std::size_t>(-1), "heap");
  } else {
    // A VMM heap of most of the memory first, kept while the workspaces come, then grown to the end.
    VmmBlock heap{};
    CHECK_CU(vmm_allocate(program, (budget / 2) / (2 * kMiB) * (2 * kMiB), heap));
    blocks = workspaces(program);
    grow_segment(program, step, static_cast<std::size_t>(-1), "heap");
    std::printf("first_heap=%zu\n", heap.size);
    vmm_free(heap);
  }
  std::printf("budget=%zu\n", budget);
  for (CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
  return program.finish();
}

int malloc_free_then_vmm(Program& program, std::size_t step) {
  std::vector<CUdeviceptr> blocks(8);
  for (CUdeviceptr& block : blocks) CHECK_CU(cuMemAlloc(&block, 32 * kMiB));
  for (CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
  program.check("freed");
  grow_segment(program, step, static_cast<std::size_t>(-1), "heap");
  return program.finish();
}

// Creates (and releases) one physical allocation of `size`, rounded up to the granularity.
CUresult create_once(Program& program, std::size_t size) {
  const CUmemAllocationProp prop = device_prop(program.device);
  std::size_t granularity = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CUmemGenericAllocationHandle handle{};
  const CUresult created = cuMemCreate(&handle, (size + granularity - 1) / granularity * granularity, &prop, 0);
  if (created == CUDA_SUCCESS) CHECK_CU(cuMemRelease(handle));
  return created;
}

int pool_then_create(Program& program, std::size_t size) {
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAlloc(&block, size));
  CHECK_CU(cuMemFree(block));
  CHECK_CU(cuCtxSynchronize());
  program.check("freed");
  std::printf("created=%s\n", cu_error_name(create_once(program, size)));
  program.check("created");
  return program.finish();
}

int own_pool_then_malloc(Program& program, std::size_t size) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = program.device;
  CUmemoryPool pool = nullptr;
  CHECK_CU(cuMemPoolCreate(&pool, &props));
  cuuint64_t keep_everything = ~cuuint64_t{0};
  CHECK_CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_everything));
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr block = 0;
  CHECK_CU(cuMemAllocFromPoolAsync(&block, size, pool, stream));
  CHECK_CU(cuMemFreeAsync(block, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  program.check("freed");
  CUdeviceptr plain = 0;
  const CUresult allocated = cuMemAlloc(&plain, size);
  std::printf("allocated=%s\n", cu_error_name(allocated));
  if (allocated == CUDA_SUCCESS) CHECK_CU(cuMemFree(plain));
  program.check("allocated");
  CHECK_CU(cuStreamDestroy(stream));
  CHECK_CU(cuMemPoolDestroy(pool));
  return program.finish();
}

int pool_threads(Program& program, std::size_t threads) {
  std::vector<std::thread> workers;
  std::vector<int> refusals(threads, 0);
  // Every thread first takes its four blocks and waits for the others to have theirs, so that the
  // threads hold their blocks at the same time, however the scheduler runs them: on a loaded
  // machine each could otherwise run its whole loop alone, below the limit.
  std::barrier filled(static_cast<std::ptrdiff_t>(threads));
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&program, &refusals, &filled, t] {
      CHECK_CU(cuCtxSetCurrent(program.context));
      CUstream stream = nullptr;
      CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
      unsigned seed = static_cast<unsigned>(t) * 2654435761u + 1;
      std::vector<CUdeviceptr> live;
      const auto allocate = [&] {
        CUdeviceptr ptr = 0;
        if (cuMemAllocAsync(&ptr, (1 + (seed >> 8) % 4) * 2 * kMiB, stream) == CUDA_SUCCESS) {
          live.push_back(ptr);
        } else {
          ++refusals[t];
        }
      };
      for (int i = 0; i < 4; ++i) {
        seed = seed * 1103515245u + 12345u;
        allocate();
      }
      filled.arrive_and_wait();
      for (int i = 0; i < 200; ++i) {
        seed = seed * 1103515245u + 12345u;
        if (live.size() < 4 && (seed >> 16) % 3 != 0) {
          allocate();
        } else if (!live.empty()) {
          CHECK_CU(cuMemFreeAsync(live.back(), stream));
          live.pop_back();
        }
      }
      for (CUdeviceptr ptr : live) CHECK_CU(cuMemFreeAsync(ptr, stream));
      CHECK_CU(cuStreamSynchronize(stream));
      CHECK_CU(cuStreamDestroy(stream));
    });
  }
  for (std::thread& worker : workers) worker.join();
  int refused = 0;
  for (int r : refusals) refused += r;
  std::printf("refusals=%d\n", refused);
  program.check("done");
  return program.finish();
}

int array_threads(Program& program, std::size_t threads) {
  std::vector<std::thread> workers;
  std::vector<int> refusals(threads, 0);
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&program, &refusals, t] {
      CHECK_CU(cuCtxSetCurrent(program.context));
      CUDA_ARRAY3D_DESCRIPTOR descriptor{};
      descriptor.Width = 1024;
      descriptor.Height = 1024;
      descriptor.Format = CU_AD_FORMAT_FLOAT;
      descriptor.NumChannels = 4;
      for (int i = 0; i < 50; ++i) {
        CUarray arrays[3] = {nullptr, nullptr, nullptr};
        for (CUarray& array : arrays) {
          if (cuArray3DCreate(&array, &descriptor) != CUDA_SUCCESS) ++refusals[t];
        }
        for (CUarray array : arrays) {
          if (array != nullptr) CHECK_CU(cuArrayDestroy(array));
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  int refused = 0;
  for (int r : refusals) refused += r;
  std::printf("refusals=%d\n", refused);
  program.check("done");
  return program.finish();
}

std::size_t number(int argc, char** argv, int index, std::size_t fallback) {
  return argc > index ? std::strtoull(argv[index], nullptr, 10) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  Program program;
  constexpr std::size_t kAll = static_cast<std::size_t>(-1);
  if (scenario == "info") {
    program.check("info");
    return program.finish();
  }
  if (scenario == "expandable") {
    grow_segment(program, number(argc, argv, 2, 2) * kMiB, number(argc, argv, 3, kAll), "segment");
    return program.finish();
  }
  if (scenario == "xla_vmm") return xla_vmm(program, number(argc, argv, 2, 2) * kMiB, number(argc, argv, 3, kAll));
  if (scenario == "nccl") return nccl(program);
  if (scenario == "vllm_sleep") return vllm_sleep(program, number(argc, argv, 2, 2) * kMiB, number(argc, argv, 3, 4));
  if (scenario == "pool_then_create") return pool_then_create(program, number(argc, argv, 2, 40) * kMiB);
  if (scenario == "own_pool_then_malloc") return own_pool_then_malloc(program, number(argc, argv, 2, 40) * kMiB);
  if (scenario == "pool_threads") return pool_threads(program, number(argc, argv, 2, 8));
  if (scenario == "array_threads") return array_threads(program, number(argc, argv, 2, 8));
  if (scenario == "rmm_async") return rmm_async(program, number(argc, argv, 2, 2) * kMiB, number(argc, argv, 3, kAll));
  if (scenario == "cupy_managed") {
    return cupy_managed(program, number(argc, argv, 2, 2) * kMiB, number(argc, argv, 3, kAll));
  }
  if (scenario == "texture") return texture(program, number(argc, argv, 2, 512), number(argc, argv, 3, kAll));
  if (scenario == "workspaces_then_vmm") return workspaces_and_vmm(program, number(argc, argv, 2, 2) * kMiB, true);
  if (scenario == "vmm_then_workspaces") return workspaces_and_vmm(program, number(argc, argv, 2, 2) * kMiB, false);
  if (scenario == "malloc_free_then_vmm") return malloc_free_then_vmm(program, number(argc, argv, 2, 2) * kMiB);
  std::fprintf(stderr, "%s: unknown scenario '%s' (see the comment at the top of budget_scenarios.cpp)\n", argv[0],
               scenario.c_str());
  return 2;
}
