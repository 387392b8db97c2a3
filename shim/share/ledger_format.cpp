// The ledger file's header and slots: initialisation, validation and clamped reading.
#include "share/ledger_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "policy/share_values.h"

namespace gpumem::shim::share {

void initialise_header(LedgerHeader& header, std::uint64_t device_total, const std::uint8_t (&uuid)[16]) noexcept {
  std::memset(&header, 0, sizeof header);
  header.version = kLedgerVersion;
  header.header_bytes = kLedgerHeaderBytes;
  header.slot_count = kLedgerSlots;
  header.slot_bytes = sizeof(LedgerSlot);
  header.device_total = device_total;
  std::memcpy(header.uuid, uuid, sizeof header.uuid);
  std::memcpy(header.magic, kLedgerMagic, sizeof header.magic);  // last: a file with it is complete
}

HeaderCheck check_header(const LedgerHeader& header, std::size_t file_bytes, std::uint64_t device_total,
                         const std::uint8_t (&uuid)[16]) noexcept {
  static constexpr char kZeros[8] = {};
  if (file_bytes == 0 || std::memcmp(header.magic, kZeros, sizeof kZeros) == 0) return HeaderCheck::uninitialised;
  if (file_bytes < sizeof header.magic || std::memcmp(header.magic, kLedgerMagic, sizeof kLedgerMagic) != 0) {
    return HeaderCheck::not_a_ledger;
  }
  if (file_bytes < sizeof(LedgerHeader)) return HeaderCheck::malformed;
  if (header.version != kLedgerVersion) return HeaderCheck::other_version;
  if (header.header_bytes != kLedgerHeaderBytes || header.slot_bytes != sizeof(LedgerSlot) ||
      header.slot_count != kLedgerSlots || file_bytes < kLedgerFileBytes) {
    return HeaderCheck::malformed;
  }
  if (std::memcmp(header.uuid, uuid, sizeof header.uuid) != 0) return HeaderCheck::other_gpu;
  if (header.device_total != device_total) return HeaderCheck::other_total;
  return HeaderCheck::valid;
}

std::string describe(HeaderCheck check, const LedgerHeader& header) {
  switch (check) {
    case HeaderCheck::valid: return "valid";
    case HeaderCheck::uninitialised: return "not initialised";
    case HeaderCheck::not_a_ledger: return "not a gpumem ledger (wrong magic)";
    case HeaderCheck::other_version:
      return fmt::format("made by another gpumem version (ledger format {}, this one reads {})", header.version,
                         kLedgerVersion);
    case HeaderCheck::malformed:
      return fmt::format("malformed (header {} bytes, {} slots of {} bytes)", header.header_bytes, header.slot_count,
                         header.slot_bytes);
    case HeaderCheck::other_gpu: return "the ledger of another GPU";
    case HeaderCheck::other_total:
      return fmt::format("for a device of {} bytes, while the driver reports another size", header.device_total);
  }
  return "?";
}

Claim claim_of(const LedgerSlot& slot, std::uint64_t device_total, std::uint64_t now_ns) noexcept {
  Claim claim;
  claim.weight_milli =
      slot.weight_milli == 0 || slot.weight_milli > kMaxShareWeightMilli ? 1000 : slot.weight_milli;
  claim.floor = std::min(slot.min_bytes, device_total);
  claim.cap = slot.cap_bytes == 0 ? device_total : std::min(slot.cap_bytes, device_total);
  claim.held = std::min(slot.held, device_total);
  claim.waiting = slot.waiting_bytes != 0;
  // Written by its owner without the lock (a figure): read once. Lendable only where a reclaim thread
  // answers for it.
  const std::uint64_t idle = __atomic_load_n(&slot.idle_bytes, __ATOMIC_RELAXED);
  claim.idle = (slot.flags & kSlotReclaims) != 0 ? std::min(idle, claim.held) : 0;
  const bool growing = claim.waiting || now_ns < slot.active_until_ns;
  claim.demand = growing ? kUnbounded : claim.held;
  return claim;
}

std::string comm_of(const LedgerSlot& slot) { return identity_text(slot.comm); }

std::string identity_text(const char* field, std::size_t size) {
  std::string text;
  for (std::size_t i = 0; i < size && field[i] != '\0'; ++i) {
    const auto byte = static_cast<unsigned char>(field[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\' && byte != '"') {
      text += static_cast<char>(byte);
    } else {
      text += fmt::format("\\x{:02x}", byte);
    }
  }
  return text;
}

std::string uuid_text(const std::uint8_t (&b)[16]) {
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                     b[15]);
}

std::string ledger_file_name(const std::uint8_t (&uuid)[16]) {
  std::string name = "gpu-";
  for (const std::uint8_t byte : uuid) name += fmt::format("{:02x}", byte);
  return name + ".ledger";
}

}  // namespace gpumem::shim::share
