// Who a member of a ledger is, in names an operator can use when members live in different pid,
// mount, UTS or user namespaces (containers, pods): there "pid 1" names a process in every one of
// them. docs/sharing.md ("Members in containers and pods") lists what is read and what is shown.
#pragma once

#include <cstdint>
#include <string>

#include "share/ledger_format.h"

namespace gpumem::shim::share {

// This process's identity: the slot's fields and its record. Read from /proc/self and the
// environment (POD_NAME, POD_NAMESPACE) when a device is joined; whatever cannot be read stays 0 or
// empty. No lock is taken.
struct OwnIdentity {
  std::int32_t host_pid = 0;
  std::uint64_t pid_namespace = 0;
  std::uint64_t user_namespace = 0;
  MemberIdentity record{};  // tag included (nonzero, random)
};
OwnIdentity read_own_identity() noexcept;

// The inode of /proc/self/ns/pid (0: unknown).
std::uint64_t own_pid_namespace() noexcept;

// The last run of exactly 64 hexadecimal digits in a cgroup path ("docker-<id>.scope",
// "cri-containerd-<id>.scope", ".../pod<uid>/<id>"), or empty.
std::string container_id_in(const std::string& cgroup_path);

// One member as a refusal line names it: `pid 1 in pid namespace 4026532174 (host pid 29535)
// (share_hold, this process; pod "default/trainer-a", host "trainer-a", container 0123456789ab, uid 0)`.
// The namespace and host pid are said only when the member's pid namespace is not `reader_pid_namespace`
// (its pid means something else there). `identity` is the member's record, or null when it has none
// (an older gpumem's slot, or a file without the table). Every text is escaped (identity_text).
std::string describe_member(const LedgerSlot& slot, const MemberIdentity* identity,
                            std::uint64_t reader_pid_namespace, bool self);

}  // namespace gpumem::shim::share
