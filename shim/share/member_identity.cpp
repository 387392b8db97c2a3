// Reading this process's identity from /proc/self and the environment, and naming members by theirs.
#include "share/member_identity.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace gpumem::shim::share {
namespace {

// The whole of a small /proc file (at most `limit` bytes), or empty.
std::string read_small_file(const char* path, std::size_t limit) {
  std::string text(limit, '\0');
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::size_t got = 0;
  while (got < limit) {
    const ssize_t n = read(fd, text.data() + got, limit - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  text.resize(got);
  return text;
}

std::uint64_t namespace_inode(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

// `text` into a NUL-padded field; `keep_end`: a longer text keeps its end (a path's most specific part).
template <std::size_t N>
void copy_field(char (&field)[N], std::string_view text, bool keep_end = false) {
  std::memset(field, 0, N);
  if (text.size() > N - 1) text = keep_end ? text.substr(text.size() - (N - 1)) : text.substr(0, N - 1);
  std::memcpy(field, text.data(), text.size());
}

// NSpid's first entry when it has more than one: this /proc belongs to an outer pid namespace, and
// that is the pid there. 0 when /proc shows this namespace's pid alone (a container's own /proc).
std::int32_t outer_pid() {
  const std::string status = read_small_file("/proc/self/status", 8192);
  const std::size_t at = status.find("\nNSpid:");
  if (at == std::string::npos) return 0;
  const std::size_t end = status.find('\n', at + 1);
  const std::string line = status.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  char* rest = nullptr;
  const long first = std::strtol(line.c_str(), &rest, 10);
  char* after = nullptr;
  std::strtol(rest, &after, 10);
  const bool nested = after != rest;  // a second entry follows
  return nested && first > 0 && first <= INT32_MAX ? static_cast<std::int32_t>(first) : 0;
}

// The cgroup path that says the most: cgroup v2's ("0::<path>"), else the first v1 hierarchy's that
// is not the root.
std::string cgroup_path() {
  const std::string text = read_small_file("/proc/self/cgroup", 16384);
  std::string v1;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view path = line.substr(second + 1);
    if (line.substr(0, second + 1) == "0::") {
      if (path != "/") return std::string(path);
    } else if (v1.empty() && path != "/") {
      v1 = path;
    }
  }
  return v1;
}

std::uint64_t random_tag() {
  std::uint64_t tag = 0;
  if (getrandom(&tag, sizeof tag, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof tag)) {
    tag = static_cast<std::uint64_t>(getpid()) * 0x9e3779b97f4a7c15ULL ^ reinterpret_cast<std::uintptr_t>(&tag);
  }
  return tag == 0 ? 1 : tag;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

std::uint64_t own_pid_namespace() noexcept { return namespace_inode("/proc/self/ns/pid"); }

std::string container_id_in(const std::string& path) {
  std::string found;
  std::size_t i = 0;
  while (i < path.size()) {
    if (!is_hex(path[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < path.size() && is_hex(path[end])) ++end;
    if (end - i == 64) found = path.substr(i, 64);
    i = end;
  }
  return found;
}

OwnIdentity read_own_identity() noexcept {
  OwnIdentity own;
  try {
    own.pid_namespace = own_pid_namespace();
    own.user_namespace = namespace_inode("/proc/self/ns/user");
    own.host_pid = outer_pid();
    MemberIdentity& record = own.record;
    record.tag = random_tag();
    char host[sizeof record.host_name + 1] = {};
    if (gethostname(host, sizeof host - 1) == 0) copy_field(record.host_name, host);
    if (const char* name = std::getenv("POD_NAME")) copy_field(record.pod_name, name);
    if (const char* name = std::getenv("POD_NAMESPACE")) copy_field(record.pod_namespace, name);
    const std::string cgroup = cgroup_path();
    copy_field(record.cgroup, cgroup, /*keep_end=*/true);
    copy_field(record.container_id, container_id_in(cgroup));
    std::string command = read_small_file("/proc/self/cmdline", sizeof record.command_line);
    while (!command.empty() && command.back() == '\0') command.pop_back();
    std::replace(command.begin(), command.end(), '\0', ' ');
    copy_field(record.command_line, command);
  } catch (...) {  // no host memory: what was read so far
  }
  return own;
}

std::string describe_member(const LedgerSlot& slot, const MemberIdentity* identity,
                            std::uint64_t reader_pid_namespace, bool self) {
  std::string text = fmt::format("pid {}", slot.pid);
  if (slot.pid_namespace != 0 && slot.pid_namespace != reader_pid_namespace) {
    text += fmt::format(" in pid namespace {}", slot.pid_namespace);
    if (slot.host_pid > 0) text += fmt::format(" (host pid {})", slot.host_pid);
  }
  text += fmt::format(" ({}{}", comm_of(slot), self ? ", this process" : "");
  std::string where;
  if (identity != nullptr) {
    const std::string pod = identity_text(identity->pod_name);
    const std::string pod_namespace = identity_text(identity->pod_namespace);
    const std::string host = identity_text(identity->host_name);
    const std::string container = identity_text(identity->container_id);
    if (!pod.empty()) where += fmt::format(", pod \"{}{}{}\"", pod_namespace, pod_namespace.empty() ? "" : "/", pod);
    if (!host.empty()) where += fmt::format(", host \"{}\"", host);
    if (!container.empty()) {
      where += fmt::format(", container {}", container.substr(0, 12));
    } else if (const std::string cgroup = identity_text(identity->cgroup); !cgroup.empty()) {
      where += fmt::format(", cgroup \"{}\"", cgroup);
    }
  }
  text += fmt::format("{}{}, uid {})", where.empty() ? "" : ";", where.empty() ? "" : where.substr(1), slot.uid);
  return text;
}

}  // namespace gpumem::shim::share
