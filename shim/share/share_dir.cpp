// The ledgers' directory and the checks that decide who may join a ledger found there.
#include "share/share_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
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
  if (S_ISLNK(st.st_mode)) {
    why = fmt::format("\"{}\" is a symbolic link", dir.path);
    return std::nullopt;
  }
  if (!S_ISDIR(st.st_mode)) {
    why = fmt::format("\"{}\" is not a directory", dir.path);
    return std::nullopt;
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    why = fmt::format("\"{}\" is writable by every user (mode {:o}); use a directory of this user, or a group "
                      "directory (e.g. mode 2770)", dir.path, st.st_mode & 07777);
    return std::nullopt;
  }
  const uid_t me = geteuid();
  if (st.st_uid == me) {
    dir.group = (st.st_mode & S_IWGRP) != 0;
    dir.gid = st.st_gid;
    return dir;
  }
  if (st.st_uid == 0 && (st.st_mode & S_IWGRP) != 0 && (st.st_mode & S_ISGID) != 0 && in_group(st.st_gid)) {
    dir.group = true;
    dir.gid = st.st_gid;
    return dir;
  }
  why = fmt::format("\"{}\" belongs to uid {}, not to this user (uid {}); another user's directory is joined only "
                    "when root made it a group directory (setgid, group writable) of a group this user is in",
                    dir.path, static_cast<unsigned long>(st.st_uid), static_cast<unsigned long>(me));
  return std::nullopt;
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
