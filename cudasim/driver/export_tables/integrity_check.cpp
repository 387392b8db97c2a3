// The integrity check ({D4082055-BDE6-704B-8D34-BA123C66E1F2}): NVIDIA's runtime asks the driver
// for a keyed digest of the process, the calling thread, the driver's tables and the devices, and
// compares it with its own, to know it talks to NVIDIA's driver. The digest, as the public record
// gives it: HMAC-MD2 under a fixed key of (driver version, the caller's protocol version, process
// id, thread, the runtime interface table's address, this table's address, this entry's address,
// the caller's time in seconds), then each device's (UUID, PCI domain, bus, device). Protocol
// versions ending in 0 or 1 expect fixed answers.
#include "export_tables.h"
#include "hmac_md2.h"

#include "../state.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>

using namespace cudasim;
using namespace cudasim::export_tables;

namespace {

constexpr Table kTable = Table::IntegrityCheck;

// The key: the digest of a first pass that reads no input.
constexpr Md2Digest kKey = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                            0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};

// The first part of the message, laid out as the caller lays it out (48 bytes, no padding).
struct ProcessRecord {
  std::uint32_t driver_version;
  std::uint32_t protocol_version;
  std::uint32_t process;
  std::uint32_t thread;
  const void* runtime_table;
  const void* integrity_table;
  const void* check_entry;
  std::uint64_t seconds;
};
static_assert(sizeof(ProcessRecord) == 48);

// Then one per device, in CUDA ordinal order (28 bytes each).
struct DeviceRecord {
  CUuuid uuid;
  std::int32_t pci_domain;
  std::int32_t pci_bus;
  std::int32_t pci_device;
};
static_assert(sizeof(DeviceRecord) == 28);

CUresult device_record(CUdevice device, DeviceRecord* out) {
  if (CUresult rc = cuDeviceGetUuid_v2(&out->uuid, device); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuDeviceGetAttribute(&out->pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device); rc != CUDA_SUCCESS)
    return rc;
  if (CUresult rc = cuDeviceGetAttribute(&out->pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device); rc != CUDA_SUCCESS)
    return rc;
  return cuDeviceGetAttribute(&out->pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device);
}

CUresult check(std::uint32_t protocol_version, std::uint64_t seconds, std::uint64_t (*digest)[2]) {
  if (digest == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (protocol_version % 10) {
    case 0:
      (*digest)[0] = 0x3341181C03CB675C, (*digest)[1] = 0x8ED383AA1F4CD1E8;
      return CUDA_SUCCESS;
    case 1:
      (*digest)[0] = 0x1841181C03CB675C, (*digest)[1] = 0x8ED383AA1F4CD1E8;
      return CUDA_SUCCESS;
    default: break;
  }
  int count = 0;
  if (CUresult rc = cuDeviceGetCount(&count); rc != CUDA_SUCCESS) return rc;
  const TableInfo& self = integrity_check();
  const ProcessRecord process{static_cast<std::uint32_t>(driver_version()),
                              protocol_version,
                              static_cast<std::uint32_t>(getpid()),
                              static_cast<std::uint32_t>(pthread_self()),
                              cudart_interface().slots,
                              self.slots,
                              self.slots[1],
                              seconds};
  HmacMd2 hmac(kKey);
  hmac.update(&process, sizeof process);
  for (CUdevice device = 0; device < count; ++device) {
    DeviceRecord record{};
    if (CUresult rc = device_record(device, &record); rc != CUDA_SUCCESS) return rc;
    hmac.update(&record, sizeof record);
  }
  const Md2Digest result = hmac.finish();
  std::memcpy(*digest, result.data(), result.size());
  return CUDA_SUCCESS;
}

}  // namespace

const TableInfo& cudasim::export_tables::integrity_check() {
  return define_table<kTable, 3>("INTEGRITY_CHECK", uuid("{D4082055-BDE6-704B-8D34-BA123C66E1F2}"), true, [](auto& b) {
    b.template set<1, check>(Knowledge::Known, "the keyed digest of the process, thread, tables and devices");
  });
}
