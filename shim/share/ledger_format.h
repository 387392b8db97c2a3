// The ledger file of one GPU shared by processes (docs/sharing.md has the format): a header page,
// then one fixed-size slot per member, mapped shared by every member. Everything here is plain data
// and pure checks: whatever another process wrote is untrusted, so a file is validated before it is
// used and every figure read from a slot is clamped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "share/fair_share.h"

namespace gpumem::shim::share {

inline constexpr char kLedgerMagic[8] = {'G', 'P', 'U', 'M', 'E', 'M', 'L', 'D'};
inline constexpr std::uint32_t kLedgerVersion = 1;
inline constexpr std::uint32_t kLedgerHeaderBytes = 4096;  // slot 0 starts here
inline constexpr std::uint32_t kLedgerSlots = kMaxMembers;
// Byte-range locks (OFD): the ledger lock on byte 0, held for one update; each member holds the byte
// kSlotLockBase + its slot for its whole life, so a slot whose byte no one holds is a dead member's.
inline constexpr long kLedgerLockByte = 0;
inline constexpr long kSlotLockBase = 4096;

enum SlotState : std::uint32_t { kSlotFree = 0, kSlotLive = 1 };
// LedgerSlot::flags. kSlotReclaims: a reclaim thread answers the slot's requests without waiting for the
// program's next call (a slot written by an older gpumem of format 1 has none: flags read 0).
inline constexpr std::uint32_t kSlotReclaims = 1;

// Invariant (of a valid file): magic and version as above, header_bytes == kLedgerHeaderBytes,
// slot_bytes == sizeof(LedgerSlot), slot_count == kLedgerSlots, and the file holds them all
// (kLedgerFileBytes): version 1 has one size only.
struct LedgerHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;
  std::uint32_t slot_count;
  std::uint32_t slot_bytes;
  std::uint64_t device_total;   // bytes, as the driver reports the device's total
  std::uint8_t uuid[16];        // the GPU's UUID (cuDeviceGetUuid_v2)
  std::uint64_t generation;     // bumped before and after every change: odd while one is written
  std::uint64_t outside_bytes;  // device memory no member holds (contexts, other programs): last estimate
  std::uint64_t members;        // live slots after the last change (for readers)
  std::uint64_t capacity;       // what the members share at the last change: the total less outside_bytes
                                // and the room kept for one more process's context
  std::uint64_t lower_since_ns; // CLOCK_MONOTONIC: estimates have read below outside_bytes since then (0: not)
  std::uint64_t lower_max;      // the highest of those lower estimates
  std::uint64_t spare[4];
};
static_assert(sizeof(LedgerHeader) == 128);

// One member. Written by its owner under the ledger lock, except reclaim_request and reclaim_wake (any
// member, under the lock; the owner reads them without), in_use and idle_bytes (its owner alone, without
// the lock: figures) and reserving (its owner alone: raised under the lock with held, lowered without it
// when the driver answers).
struct LedgerSlot {
  std::int32_t pid;
  std::uint32_t state;            // SlotState
  std::uint64_t start_time;       // /proc/<pid>/stat starttime (clock ticks after boot): tells a reused pid
  std::uint32_t uid;
  std::uint32_t weight_milli;     // GPUMEM_SHARE_WEIGHT in thousandths
  std::uint64_t min_bytes;        // GPUMEM_SHARE_MIN
  std::uint64_t cap_bytes;        // GPUMEM_LIMIT or a cluster's bound, else the device's total
  std::uint64_t held;             // bytes its budget has charged: what it holds of the device
  std::uint64_t in_use;           // live bytes in its blocks (approximate, informational)
  std::uint64_t demand;           // what it asks for: kUnbounded while growing or waiting, else held
  std::uint64_t guarantee;        // its share at the last change (for readers)
  std::uint64_t allowance;        // its budget at the last change (for readers)
  std::uint64_t waiting_bytes;    // bytes it waits for (0: not waiting)
  std::uint64_t reclaim_request;  // bytes others ask it to give back (0: none)
  std::uint64_t given_back_bytes; // given back on request, in total
  std::uint64_t peak_borrowed;    // most it held beyond its guarantee
  std::uint64_t refusals;         // requests refused (after waiting, where it waited)
  std::uint64_t active_until_ns;  // CLOCK_MONOTONIC: growing (demand unbounded) until then
  char comm[16];                  // its command name, NUL-padded
  std::uint64_t reclaim_until_ns; // CLOCK_MONOTONIC: the request holds until then (a waiter renews it)
  std::uint64_t reserving;        // of held, bytes whose driver call has not answered yet: not on the device
                                  // yet (its owner, without the lock)
  std::uint32_t reclaim_wake;     // a futex word: bumped by a member that raises reclaim_request; the owner's
                                  // reclaim thread sleeps on it (FUTEX_WAIT on the shared mapping)
  std::uint32_t reclaim_answered; // the reclaim_wake its reclaim thread last answered (gave back what it could)
  std::uint64_t idle_bytes;       // of held, bytes it holds unused that its reclaim thread can give back, as it
                                  // last looked (its owner, without the lock)
  std::uint32_t flags;            // kSlotReclaims: it has a reclaim thread
  // Who it is beyond its pid, which only means something in its own pid namespace (containers, pods).
  // All 0 in a slot written by an older gpumem of format 1: not known.
  std::int32_t host_pid;          // its pid in the outermost namespace its /proc shows (NSpid's first), or 0
  std::uint64_t pid_namespace;    // the inode of /proc/self/ns/pid: (pid_namespace, pid) names one process
  std::uint64_t user_namespace;   // the inode of /proc/self/ns/user: uid is as that namespace sees it
  std::uint64_t identity_tag;     // nonzero: its MemberIdentity (below) is the record carrying the same tag
  std::uint64_t spare[6];
};
static_assert(sizeof(LedgerSlot) == 256);

inline constexpr std::size_t kLedgerFileBytes = kLedgerHeaderBytes + std::size_t{kLedgerSlots} * sizeof(LedgerSlot);

// The names an operator knows a member by, one record per slot after the slots (at
// kIdentityTableOffset). Format 1 still: a file without the table (made by an older gpumem, 69,632
// bytes) is grown to hold it by the next member that joins, and a record counts only while its tag
// is its slot's identity_tag, so an older member in a slot a newer one left is never named by the
// record left behind. Written once by its owner, under the ledger lock, before its slot goes live.
// Every text is NUL-padded, cut to fit, and untrusted when read: read up to the first NUL within the
// field, control characters escaped (identity_text).
struct MemberIdentity {
  std::uint64_t tag;            // the slot's identity_tag
  char host_name[64];           // gethostname(): the UTS namespace's (a pod's own name in Kubernetes)
  char pod_namespace[64];       // POD_NAMESPACE (the downward API's metadata.namespace), if set
  char pod_name[256];           // POD_NAME (metadata.name), if set
  char container_id[72];        // the last 64-hex-digit name in the cgroup path (docker, containerd, CRI-O)
  char cgroup[256];             // that cgroup path (/proc/self/cgroup: the v2 entry, else the first v1 one
                                // that is not "/"); the end kept when longer
  char command_line[256];       // /proc/self/cmdline, arguments joined by spaces; cut when longer
  char spare[48];
};
static_assert(sizeof(MemberIdentity) == 1024);

inline constexpr std::size_t kIdentityTableOffset = kLedgerFileBytes;
// The file with its identity table (331,776 bytes).
inline constexpr std::size_t kLedgerFileWithIdentityBytes =
    kIdentityTableOffset + std::size_t{kLedgerSlots} * sizeof(MemberIdentity);

// A fresh header for `device_total` bytes and `uuid`.
void initialise_header(LedgerHeader& header, std::uint64_t device_total, const std::uint8_t (&uuid)[16]) noexcept;

// What a header found in a file of `file_bytes` says, checked against the GPU it should describe.
enum class HeaderCheck : std::uint8_t {
  valid,
  uninitialised,   // all-zero magic: a file its creator did not finish; to be initialised
  not_a_ledger,    // another magic
  other_version,   // a ledger of another format version
  malformed,       // sizes or counts out of range, or a file too short for them
  other_gpu,       // another GPU's UUID
  other_total,     // the same GPU with another total (another driver, or a simulator's setting)
};
HeaderCheck check_header(const LedgerHeader& header, std::size_t file_bytes, std::uint64_t device_total,
                         const std::uint8_t (&uuid)[16]) noexcept;
// The reason, for the one error line ("made by another gpumem version (format 7, this is 1)", ...).
std::string describe(HeaderCheck check, const LedgerHeader& header);

// A slot read as a claim on the device, every figure clamped: held and floor to the device's total,
// a weight out of range to 1. `now_ns`: CLOCK_MONOTONIC, to tell whether it is still growing.
Claim claim_of(const LedgerSlot& slot, std::uint64_t device_total, std::uint64_t now_ns) noexcept;

// The slot's command name as text (at most 15 bytes, identity_text).
std::string comm_of(const LedgerSlot& slot);
// A text field of a ledger (untrusted) as text: up to its first NUL within `size` bytes, every byte
// outside printable ASCII, and the backslash and double quote, written as \xNN, so a member cannot
// send a terminal escape sequences or break the line it is quoted in.
std::string identity_text(const char* field, std::size_t size);
template <std::size_t N>
std::string identity_text(const char (&field)[N]) {
  return identity_text(field, N);
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" as nvidia-smi prints it; the file is gpu-<32 hex>.ledger.
std::string uuid_text(const std::uint8_t (&uuid)[16]);
std::string ledger_file_name(const std::uint8_t (&uuid)[16]);

}  // namespace gpumem::shim::share
