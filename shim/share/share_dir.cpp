// The ledgers' directory and the checks that decide who may join a ledger found there.
#include "share/share_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace gpumem::shim::share {
namespace {

bool in_group(gid_t gid) {
  if (getegid() == gid) return true;
  const int count = getgroups(0, nullptr);
  if (count <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(count));
  const int got = getgroups(count, groups.data());
  for (int i = 0; i < got; ++i) {
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  }
  return false;
}

}  // namespace

std::string default_share_dir() {
  struct stat st {};
  const bool shm = lstat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);
  return fmt::format("{}/gpumem-{}", shm ? "/dev/shm" : "/tmp", static_cast<unsigned long>(geteuid()));
}

namespace {

// What `path`'s status says against using it; empty when it may be used. `group`: it is a group
// directory (its group's members may join).
std::string refusal(const std::string& path, const struct stat& st, bool& group) {
  if (S_ISLNK(st.st_mode)) return fmt::format("\"{}\" is a symbolic link", path);
  if (!S_ISDIR(st.st_mode)) return fmt::format("\"{}\" is not a directory", path);
  if ((st.st_mode & S_IWOTH) != 0) {
    return fmt::format("\"{}\" is writable by every user (mode {:o}); use a directory of this user, or a group "
                       "directory (e.g. mode 2770)", path, st.st_mode & 07777);
  }
  const uid_t me = geteuid();
  const bool group_writable = (st.st_mode & S_IWGRP) != 0;
  // A group directory is one root made: group writable and setgid. Any other directory another user
  // can write to would let that user plant a ledger for this one's processes.
  const bool group_directory = st.st_uid == 0 && group_writable && (st.st_mode & S_ISGID) != 0;
  group = group_directory;
  if (st.st_uid == me && (!group_writable || group_directory)) return {};
  if (st.st_uid == me) {
    return fmt::format("\"{}\" is writable by its group (mode {:o}) but is no group directory (one root made, "
                       "setgid, group writable): make it private (chmod g-w) or have root make a group "
                       "directory", path, st.st_mode & 07777);
  }
  if (group_directory && in_group(st.st_gid)) return {};
  return fmt::format("\"{}\" belongs to uid {}, not to this user (uid {}); another user's directory is joined only "
                     "when root made it a group directory (setgid, group writable) of a group this user is in",
                     path, static_cast<unsigned long>(st.st_uid), static_cast<unsigned long>(me));
}

// Where the ledgers go when another user took the default directory first (anyone may make
// /dev/shm/gpumem-<uid>): $XDG_RUNTIME_DIR/gpumem, in the directory the system made for this user
// alone. Empty when there is none.
std::string private_runtime_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime == nullptr || runtime[0] != '/') return {};
  struct stat st {};
  if (lstat(runtime, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return {};
  }
  return fmt::format("{}/gpumem", runtime);
}

}  // namespace

std::optional<ShareDir> open_share_dir(const std::string& configured, std::string& why) {
  ShareDir dir;
  dir.path = configured.empty() ? default_share_dir() : configured;
  // Only the default is made here: a directory named on purpose is the administrator's to make.
  if (configured.empty() && mkdir(dir.path.c_str(), 0700) != 0 && errno != EEXIST) {
    why = fmt::format("\"{}\" cannot be created ({})", dir.path, std::strerror(errno));
    return std::nullopt;
  }
  struct stat st {};
  if (lstat(dir.path.c_str(), &st) != 0) {
    why = fmt::format("\"{}\" cannot be read ({})", dir.path, std::strerror(errno));
    return std::nullopt;
  }
  why = refusal(dir.path, st, dir.group);
  if (why.empty()) {
    dir.gid = st.st_gid;
    return dir;
  }
  if (!configured.empty() || st.st_uid == geteuid()) return std::nullopt;
  // The default, made by someone else: squatted. This user's runtime directory instead, if it has one.
  const std::string runtime = private_runtime_dir();
  if (runtime.empty()) {
    why += "; set GPUMEM_SHARE_DIR to a directory of this user (or XDG_RUNTIME_DIR, where gpumem then shares)";
    return std::nullopt;
  }
  std::string runtime_why;
  std::optional<ShareDir> fallback = open_share_dir(runtime, runtime_why);
  if ((!fallback && mkdir(runtime.c_str(), 0700) == 0) || (!fallback && errno == EEXIST)) {
    fallback = open_share_dir(runtime, runtime_why);
  }
  if (!fallback) {
    why += fmt::format("; and {}", runtime_why);
    return std::nullopt;
  }
  why = fmt::format("{}; sharing through \"{}\" instead", why, runtime);
  return fallback;
}

bool ledger_file_trusted(const struct stat& st, const ShareDir& dir, std::string& why) {
  if (!S_ISREG(st.st_mode)) {
    why = "is not a regular file";
    return false;
  }
  if (st.st_nlink != 1) {
    why = fmt::format("has {} hard links", static_cast<unsigned long>(st.st_nlink));
    return false;
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    why = "is writable by every user";
    return false;
  }
  if (st.st_uid == geteuid() && (dir.group || (st.st_mode & S_IWGRP) == 0)) return true;
  if (dir.group && st.st_gid == dir.gid) return true;
  why = dir.group ? fmt::format("belongs neither to this user nor to the directory's group {}",
                                static_cast<unsigned long>(dir.gid))
                  : "does not belong to this user alone";
  return false;
}

}  // namespace gpumem::shim::share
