// Importing a VMM arena's block another process exported: its pieces mapped back to back.
#include "ipc/vmm_blocks.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/log.h"
#include "context/peer_access.h"
#include "driver/real_driver.h"
#include "exports/descriptor_protocol.h"
#include "ipc/descriptor_client.h"
#include "ipc/remote_descriptor.h"

namespace gpumem::shim::ipc {
namespace {

bool driver_can_import(const RealDriver& driver) {
  return driver.cuMemImportFromShareableHandle != nullptr && driver.cuMemAddressReserve != nullptr &&
         driver.cuMemAddressFree != nullptr && driver.cuMemMap != nullptr && driver.cuMemUnmap != nullptr &&
         driver.cuMemRelease != nullptr && driver.cuMemSetAccess != nullptr && driver.cuCtxGetDevice != nullptr;
}

// One batch's descriptors, each closed when it is given up (after its import, or on any failure).
struct DescriptorBatch {
  std::array<int, kBatchPieces> fds;
  DescriptorBatch() { fds.fill(-1); }
  ~DescriptorBatch() {
    for (int& fd : fds) close_one(fd);
  }
  DescriptorBatch(const DescriptorBatch&) = delete;
  DescriptorBatch& operator=(const DescriptorBatch&) = delete;
  static void close_one(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

}  // namespace

CUresult import_vmm_block(const Token& token, const ExportedBlock& block, ImportedSpan& span, CUdeviceptr* ptr) {
  const RealDriver& driver = real_driver();
  const std::uint32_t count = block.vmm.piece_count;
  if (!driver_can_import(driver)) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: the handle names a block of process {}'s virtual-memory arena, "
            "and this driver cannot import such memory", token.pid);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (count == 0 || count > kMaxVmmPieces) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: process {}'s export table names {} pieces for this block, "
            "expected 1 to {}", token.pid, count, kMaxVmmPieces);
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdevice device = 0;
  if (driver.cuCtxGetDevice(&device) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<VmmStretch> pieces;
  std::vector<CUmemGenericAllocationHandle> handles;
  try {
    pieces.reserve(count);
    handles.reserve(count);
    span.piece_sizes.reserve(count);
  } catch (...) {  // no host memory for the records
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::uint32_t mapped = 0;  // handles [mapped, handles.size()) are held; those before were released once mapped
  std::uint64_t total = 0;
  CUdeviceptr base = 0;
  const auto undo = [&](CUresult error) {
    for (std::uint64_t i = 0, at = 0; i < mapped; at += pieces[i].size, ++i) driver.cuMemUnmap(base + at, pieces[i].size);
    for (std::size_t i = mapped; i < handles.size(); ++i) driver.cuMemRelease(handles[i]);
    if (base != 0) driver.cuMemAddressFree(base, total);
    return error;
  };
  // The exporter's descriptor service sends the stretches and their descriptors a batch at a time
  // (fewer when this process is short of descriptors); each is imported, then closed, before the next
  // batch is asked for. The connection closes with `service`, on every path.
  std::string why;
  DescriptorClient service;
  if (!service.connect(token, why)) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: {}", why);
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::uint32_t batch = kBatchPieces;
  for (std::uint32_t first = 0; first < count;) {
    const std::uint32_t asked = std::min(batch, count - first);
    std::array<VmmStretch, kBatchPieces> stretches;
    DescriptorBatch fetched;
    bool too_few_descriptors = false;
    if (!service.fetch(first, asked, stretches, fetched.fds, too_few_descriptors, why)) {
      if (too_few_descriptors && asked > 1) {
        batch = asked / 2;  // ask again for fewer at a time
        continue;
      }
      log::at(LogLevel::error, "cuIpcOpenMemHandle: {}", why);
      return undo(CUDA_ERROR_INVALID_VALUE);
    }
    for (std::uint32_t i = 0; i < asked; ++i) {
      const std::uint32_t index = first + i;
      if (const char* what = not_shared_memory(fetched.fds[i])) {
        log::at(LogLevel::error, "cuIpcOpenMemHandle: process {}'s descriptor {} for piece {} is {}, not memory it "
                "shares (a stale or forged handle)", token.pid, fetched.fds[i], index, what);
        return undo(CUDA_ERROR_INVALID_VALUE);
      }
      CUmemGenericAllocationHandle handle = 0;
      const CUresult result = driver.cuMemImportFromShareableHandle(
          &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fetched.fds[i])),
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      DescriptorBatch::close_one(fetched.fds[i]);  // the driver keeps what it imported
      if (result != CUDA_SUCCESS) {
        log::at(LogLevel::error, "cuIpcOpenMemHandle: the driver refused piece {} of process {}'s block as memory "
                "(error {}): a corrupt or forged handle", index, token.pid, static_cast<int>(result));
        return undo(result);
      }
      handles.push_back(handle);  // room reserved above
      pieces.push_back(stretches[i]);
    }
    first += asked;
  }
  std::string what;
  if (!plausible_stretches(pieces, block.vmm.offset, block.size, what)) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: process {}'s export table describes the block impossibly ({}): "
            "a corrupt or forged handle", token.pid, what);
    return undo(CUDA_ERROR_INVALID_VALUE);
  }
  for (const VmmStretch& piece : pieces) total += piece.size;  // no overflow: checked just above
  // Still exported now, so the descriptors fetched were the block's pieces: the exporter withdraws a
  // block before its pieces can be released and their records reused for other memory.
  ExportedBlock again;
  if (!read_exported(token, again, why)) {
    log::at(LogLevel::error, "cuIpcOpenMemHandle: {}", why);
    return undo(CUDA_ERROR_INVALID_VALUE);
  }
  if (const CUresult result = driver.cuMemAddressReserve(&base, total, 0, 0, 0); result != CUDA_SUCCESS) {
    base = 0;
    return undo(result);
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (the one flag allowed): memory opened with it is reachable from
  // the devices that can access this one, as the driver's own would be; each is opened to them too,
  // where the driver lets it (the current device's access is what the open needs).
  const std::vector<CUdevice> peers = peer_access::devices_able_to_access(device);
  for (std::uint64_t at = 0; mapped < count; at += pieces[mapped].size, ++mapped) {
    const std::uint64_t size = pieces[mapped].size;
    CUresult result = driver.cuMemMap(base + at, size, pieces[mapped].offset, handles[mapped], 0);
    if (result != CUDA_SUCCESS) {
      log::at(LogLevel::error, "cuIpcOpenMemHandle: the driver refused to map {} bytes at offset {} of piece {} of "
              "process {}'s block (error {}): the piece is smaller, or the handle is corrupt or forged", size,
              pieces[mapped].offset, mapped, token.pid, static_cast<int>(result));
      return undo(result);
    }
    driver.cuMemRelease(handles[mapped]);  // the mapping keeps the memory until it is unmapped
    // cuMemUnmap and cuMemSetAccess take whole mappings: one piece at a time.
    result = driver.cuMemSetAccess(base + at, size, &access, 1);
    if (result != CUDA_SUCCESS) {
      ++mapped;
      return undo(result);
    }
    for (const CUdevice peer : peers) {
      const CUmemAccessDesc peer_access{{CU_MEM_LOCATION_TYPE_DEVICE, peer}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      driver.cuMemSetAccess(base + at, size, &peer_access, 1);  // refused: that device cannot reach it
    }
  }
  span.base = base;
  for (const VmmStretch& piece : pieces) span.piece_sizes.push_back(piece.size);  // room reserved above
  *ptr = base + block.vmm.offset;
  return CUDA_SUCCESS;
}

CUresult unmap_vmm_block(const ImportedSpan& span) {
  const RealDriver& driver = real_driver();
  CUresult first_error = CUDA_SUCCESS;
  std::uint64_t total = 0;
  for (const std::uint64_t size : span.piece_sizes) {
    const CUresult result = driver.cuMemUnmap(span.base + total, size);
    if (first_error == CUDA_SUCCESS) first_error = result;
    total += size;
  }
  const CUresult freed = driver.cuMemAddressFree(span.base, total);
  return first_error != CUDA_SUCCESS ? first_error : freed;
}

}  // namespace gpumem::shim::ipc
