// Legacy interprocess memory sharing (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle).
//
// Every cuMemAlloc allocation is a memfd mapped MAP_SHARED (map_exportable_memory), whose descriptor
// the exporting process keeps open while the allocation lives. A handle names that descriptor: the
// exporter's pid and descriptor number, the file's inode, the allocation's buffer id and a random
// number drawn once per process. An importer opens /proc/<pid>/fd/<n> (the kernel lets only the same
// user do so), checks that the file it got is that very allocation (its memfd name carries the
// process number and buffer id, its inode the handle's), and maps it: both processes then see the
// same bytes. A freed allocation's descriptor is closed, so its handle no longer opens; a mapping
// already open keeps the memory (the file lives while someone maps it), as the driver keeps an
// exported allocation until its importers close it.
#include "contexts.h"
#include "state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

using namespace cudasim;

namespace cudasim {

// An opened handle in this process: the mapping cuIpcOpenMemHandle returned to `refs` callers.
struct IpcImport {
  std::uintptr_t base = 0;
  std::uint64_t buffer_id = 0;  // of the imported allocation here (to recognise a stale entry)
  std::uint64_t refs = 0;
};

struct IpcState {
  std::uint64_t process_number = 0;  // random, so a reused pid never makes an old handle valid again
  // By (opening context, exporter's process number, exporter's buffer id).
  std::map<std::tuple<CUctx_st*, std::uint64_t, std::uint64_t>, IpcImport> imports;
};

}  // namespace cudasim

namespace {

constexpr std::array<char, 8> kHandleMagic = {'c', 'u', 'd', 'a', 's', 'i', 'm', '1'};

// The 64 bytes of CUipcMemHandle::reserved as this driver fills them.
struct HandleLayout {
  std::array<char, 8> magic{};
  std::uint64_t process_number = 0;
  std::uint64_t buffer_id = 0;
  std::uint64_t size = 0;
  std::uint64_t inode = 0;
  std::int32_t pid = 0;
  std::int32_t fd = -1;
  std::int32_t device = 0;
  std::uint32_t unused = 0;
};
static_assert(sizeof(HandleLayout) <= sizeof(CUipcMemHandle::reserved));

IpcState& ipc_state(State& st) {
  if (!st.ipc) {
    st.ipc = std::make_shared<IpcState>();
    if (getrandom(&st.ipc->process_number, sizeof st.ipc->process_number, 0) !=
        static_cast<ssize_t>(sizeof st.ipc->process_number)) {
      st.ipc->process_number = static_cast<std::uint64_t>(getpid()) << 32 ^ reinterpret_cast<std::uintptr_t>(&st);
    }
  }
  return *st.ipc;
}

std::string memfd_name(std::uint64_t process_number, std::uint64_t buffer_id) {
  char name[64];
  std::snprintf(name, sizeof name, "cudasim-mem-%016llx-%llu", static_cast<unsigned long long>(process_number),
                static_cast<unsigned long long>(buffer_id));
  return name;
}

// Maps `fd` over the (already reserved) range of `mapping`, shared. False when the kernel refuses.
bool map_file_over(const Mapping& mapping, int fd) {
  void* at = mmap(mapping.addr, mapping.length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  return at == mapping.addr;
}

// Opens the exporter's allocation the handle names; -1 when it is gone (exporter exited, memory
// freed, descriptor reused) or belongs to another user.
int open_allocation_file(const HandleLayout& h) {
  return open_exported_file(h.pid, h.fd, h.inode, memfd_name(h.process_number, h.buffer_id), h.size);
}

// Opens the handle in the current context: a new shared mapping of the exporter's allocation.
CUresult import_allocation(State& st, CUctx_st* ctx, const HandleLayout& h, CUdeviceptr* out) {
  if (h.size == 0) return CUDA_ERROR_INVALID_VALUE;
  const int fd = open_allocation_file(h);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  Mapping mapping = map_device_memory(h.size);
  if (mapping.addr == nullptr || !map_file_over(mapping, fd)) {
    close(fd);
    if (mapping.addr != nullptr) munmap(mapping.addr, mapping.length);
    return CUDA_ERROR_MAP_FAILED;
  }
  mapping.fd = fd;
  const auto base = reinterpret_cast<std::uintptr_t>(mapping.addr);
  // Attributed to the exporter's device where this process has it; nothing is charged: the memory
  // is the exporter's.
  const int exporters = ordinal_of_physical(st, h.device);
  const int device = exporters >= 0 ? exporters : ctx->device;
  st.allocations[base] = Allocation{base, h.size, 0, device, ctx, AllocKind::Imported, nullptr, ++st.last_buffer_id};
  st.mappings[base] = mapping;
  *out = base;
  return CUDA_SUCCESS;
}

}  // namespace

namespace cudasim {

std::uint64_t ipc_process_number(State& st) { return ipc_state(st).process_number; }

int open_exported_file(int pid, int fd, std::uint64_t inode, const std::string& name, std::uint64_t min_size) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  // Non-blocking: a descriptor that is now a FIFO must not hang the open.
  const int opened = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (opened < 0) return -1;
  // What we hold now is checked, not what the path named a moment ago.
  struct stat info {};
  char link[64];
  char target[128] = {};
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", opened);
  const ssize_t length = readlink(link, target, sizeof target - 1);
  const std::string expected = "/memfd:" + name;
  if (length <= 0 || std::strncmp(target, expected.c_str(), expected.size()) != 0 ||
      (target[expected.size()] != '\0' && target[expected.size()] != ' ') || fstat(opened, &info) != 0 ||
      !S_ISREG(info.st_mode) || static_cast<std::uint64_t>(info.st_ino) != inode ||
      static_cast<std::uint64_t>(info.st_size) < min_size) {
    close(opened);
    return -1;
  }
  return opened;
}

Mapping map_exportable_memory(State& st, std::size_t bytes, std::uint64_t buffer_id) {
  Mapping mapping = map_device_memory(bytes);
  if (mapping.addr == nullptr) return mapping;
  const int fd = memfd_create(memfd_name(ipc_state(st).process_number, buffer_id).c_str(), MFD_CLOEXEC);
  // Without a descriptor (the process is out of them) the memory stays private: usable, not exportable.
  if (fd < 0) return mapping;
  if (!size_memory_file(fd, mapping.length) || !map_file_over(mapping, fd)) {
    close(fd);
    return mapping;
  }
  mapping.fd = fd;
  return mapping;
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Allocation* a = find_allocation(l.st, dptr, 1);
  // Only cuMemAlloc memory can be exported this way; pool memory needs cuMemPoolExportPointer, and
  // an imported mapping is not this process's to export.
  if (a == nullptr || a->kind != AllocKind::Sync) return CUDA_ERROR_INVALID_VALUE;
  const Mapping& mapping = l.st.mappings.at(a->base);
  struct stat info {};
  if (mapping.fd < 0 || fstat(mapping.fd, &info) != 0) return CUDA_ERROR_MAP_FAILED;
  HandleLayout h;
  h.magic = kHandleMagic;
  h.process_number = ipc_state(l.st).process_number;
  h.buffer_id = a->buffer_id;
  h.size = a->size;
  h.inode = static_cast<std::uint64_t>(info.st_ino);
  h.pid = getpid();
  h.fd = mapping.fd;
  h.device = l.st.device(a->device).physical;  // the device's number: the importer may see it under another ordinal
  std::memset(pHandle->reserved, 0, sizeof pHandle->reserved);
  std::memcpy(pHandle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (pdptr == nullptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  HandleLayout h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kHandleMagic) return CUDA_ERROR_INVALID_VALUE;
  IpcState& ipc = ipc_state(l.st);
  // A process cannot open its own handles (NVIDIA's driver answers "invalid device context").
  if (h.pid == getpid() && h.process_number == ipc.process_number) return CUDA_ERROR_INVALID_CONTEXT;
  const auto key = std::make_tuple(ctx, h.process_number, h.buffer_id);
  if (auto it = ipc.imports.find(key); it != ipc.imports.end()) {
    // Already open in this context: one more reference, the same pointer (as documented). An entry
    // whose mapping went with a destroyed context is stale.
    auto live = l.st.allocations.find(it->second.base);
    if (live != l.st.allocations.end() && live->second.kind == AllocKind::Imported &&
        live->second.buffer_id == it->second.buffer_id) {
      ++it->second.refs;
      *pdptr = it->second.base;
      return CUDA_SUCCESS;
    }
    ipc.imports.erase(it);
  }
  CUdeviceptr base = 0;
  if (CUresult rc = import_allocation(l.st, ctx, h, &base); rc != CUDA_SUCCESS) return rc;
  ipc.imports[key] = IpcImport{base, l.st.allocations.at(base).buffer_id, 1};
  *pdptr = base;
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  CUctx_st* ctx = nullptr;
  {
    Locked l;
    if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
    auto live = l.st.allocations.find(dptr);
    if (live == l.st.allocations.end() || live->second.kind != AllocKind::Imported || !l.st.ipc) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto& imports = l.st.ipc->imports;
    auto it = imports.begin();
    while (it != imports.end() && !(it->second.base == dptr && it->second.buffer_id == live->second.buffer_id)) ++it;
    if (it == imports.end()) return CUDA_ERROR_INVALID_VALUE;
    if (--it->second.refs > 0) return CUDA_SUCCESS;
    imports.erase(it);
    ctx = live->second.ctx;
  }
  // The last reference unmaps: work still queued on the mapping finishes first, whichever context
  // (of whichever device, the mapping being open to its peers) queued it.
  wait_for_all_queued_work();
  synchronize_context(ctx);  // and the context's pools are trimmed, as after any synchronisation
  Locked l;
  auto live = l.st.allocations.find(dptr);
  if (live == l.st.allocations.end() || live->second.kind != AllocKind::Imported) return CUDA_SUCCESS;  // context gone meanwhile
  retire_mapping(l.st, l.st.mappings.extract(dptr).mapped());
  l.st.allocations.erase(live);
  return CUDA_SUCCESS;
}
