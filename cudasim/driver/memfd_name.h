// The device a simulator memfd was created for, read back from the name it was given.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string_view>

namespace cudasim {

// The device number that follows `prefix` in the memfd name of `fd` (memfd_create(prefix + N)), or -1
// when `fd` is not a memfd of that name: a descriptor received from another process is checked so.
inline int memfd_device(int fd, std::string_view prefix) {
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char target[256] = {};
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return -1;
  constexpr std::string_view memfd_link = "/memfd:";
  const std::string_view name(target, static_cast<std::size_t>(n));
  if (!name.starts_with(memfd_link) || !name.substr(memfd_link.size()).starts_with(prefix)) return -1;
  int device = -1;
  return std::sscanf(target + memfd_link.size() + prefix.size(), "%d", &device) == 1 ? device : -1;
}

}  // namespace cudasim
