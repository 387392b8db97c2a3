// Interprocess events (cuIpcGetEventHandle, cuIpcOpenEventHandle). An event created with
// CU_EVENT_INTERPROCESS keeps two counters in a page of a memfd of its own, mapped shared: each
// record takes the next generation (`recorded`), and the stream that reaches the record raises
// `completed` to it. The event is complete when `completed` reaches `recorded`, whichever process
// recorded it, so a process that opened the event's handle (which maps the same page) can query it,
// synchronise with it and make its streams wait for it; it may record it too. The handle names the
// exporter's pid, the descriptor and inode of that memfd and the exporter's random process number;
// the importer opens /proc/<pid>/fd/<n> (same user only), checks the file is that page, maps it.
#include "contexts.h"
#include "state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

using namespace cudasim;

namespace {

constexpr std::array<char, 8> kPageMagic = {'c', 'u', 'd', 'a', 's', 'i', 'm', 'E'};
constexpr std::array<char, 8> kHandleMagic = {'c', 'u', 'd', 'a', 's', 'i', 'm', 'e'};
constexpr std::size_t kPageBytes = 4096;

// The shared page. Lock-free 64-bit atomics are address-free, so both processes may use them.
struct SharedCounters {
  std::array<char, 8> magic;
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(sizeof(SharedCounters) <= kPageBytes);

// The 64 bytes of CUipcEventHandle::reserved as this driver fills them.
struct HandleLayout {
  std::array<char, 8> magic{};
  std::uint64_t process_number = 0;
  std::uint64_t inode = 0;
  std::int32_t pid = 0;
  std::int32_t fd = -1;
};
static_assert(sizeof(HandleLayout) <= sizeof(CUipcEventHandle::reserved));

std::string page_name(std::uint64_t process_number) {
  char name[64];
  std::snprintf(name, sizeof name, "cudasim-event-%016llx", static_cast<unsigned long long>(process_number));
  return name;
}

}  // namespace

namespace cudasim {

// Invariant: `counters` maps the page while the object lives; `fd` (the exporter's only) stays open
// so that importers can open the page through /proc.
struct IpcEventPage {
  SharedCounters* counters = nullptr;
  int fd = -1;
  std::uint64_t inode = 0;
  std::uint64_t process_number = 0;  // of the process that created it
  IpcEventPage() = default;
  IpcEventPage(const IpcEventPage&) = delete;
  IpcEventPage& operator=(const IpcEventPage&) = delete;
  ~IpcEventPage() {
    if (counters != nullptr) munmap(counters, kPageBytes);
    if (fd >= 0) close(fd);
  }
};

std::shared_ptr<IpcEventPage> create_ipc_event_page(State& st) {
  auto page = std::make_shared<IpcEventPage>();
  page->process_number = ipc_process_number(st);
  page->fd = memfd_create(page_name(page->process_number).c_str(), MFD_CLOEXEC);
  struct stat info {};
  if (page->fd < 0 || ftruncate(page->fd, kPageBytes) != 0 || fstat(page->fd, &info) != 0) return nullptr;
  void* at = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, page->fd, 0);
  if (at == MAP_FAILED) return nullptr;
  page->inode = static_cast<std::uint64_t>(info.st_ino);
  page->counters = new (at) SharedCounters{kPageMagic, {0}, {0}};
  return page;
}

std::uint64_t begin_ipc_record(IpcEventPage& page) { return page.counters->recorded.fetch_add(1) + 1; }

void complete_ipc_record(IpcEventPage& page, std::uint64_t generation) {
  std::uint64_t seen = page.counters->completed.load();
  while (seen < generation && !page.counters->completed.compare_exchange_weak(seen, generation)) {
  }
}

std::uint64_t latest_ipc_record(const IpcEventPage& page) { return page.counters->recorded.load(); }

bool ipc_record_done(const IpcEventPage& page, std::uint64_t generation) {
  return page.counters->completed.load() >= generation;
}

void wait_ipc_record(const IpcEventPage& page, std::uint64_t generation) {
  while (!ipc_record_done(page, generation)) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

}  // namespace cudasim

CUDASIM_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = l.st.events.find(event);
  if (it == l.st.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  const std::shared_ptr<IpcEventPage>& page = it->second->ipc;
  // Only an event this process created with CU_EVENT_INTERPROCESS (an opened one is not its to export).
  if (!page || page->fd < 0) return CUDA_ERROR_INVALID_VALUE;
  HandleLayout h;
  h.magic = kHandleMagic;
  h.process_number = page->process_number;
  h.inode = page->inode;
  h.pid = getpid();
  h.fd = page->fd;
  std::memset(pHandle->reserved, 0, sizeof pHandle->reserved);
  std::memcpy(pHandle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUDASIM_EXPORT CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  Locked l;
  if (CUresult rc = l.init_status(); rc != CUDA_SUCCESS) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = current_context(l.st, &ctx); rc != CUDA_SUCCESS) return rc;
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  HandleLayout h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kHandleMagic) return CUDA_ERROR_INVALID_VALUE;
  // A process cannot open its own handles (as with memory handles).
  if (h.pid == getpid() && h.process_number == ipc_process_number(l.st)) return CUDA_ERROR_INVALID_CONTEXT;
  const int fd = open_exported_file(h.pid, h.fd, h.inode, page_name(h.process_number), kPageBytes);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;  // gone, another user's, or not such a page
  void* at = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the page
  if (at == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  auto page = std::make_shared<IpcEventPage>();
  page->counters = static_cast<SharedCounters*>(at);
  page->process_number = h.process_number;
  if (page->counters->magic != kPageMagic) return CUDA_ERROR_INVALID_VALUE;
  auto ev = std::make_shared<CUevent_st>();
  ev->ctx = ctx;
  ev->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  ev->ipc = std::move(page);
  l.st.events.emplace(ev.get(), ev);
  *phEvent = ev.get();
  return CUDA_SUCCESS;
}
