#include "base/background_threads.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpumem::shim {

bool only_background_threads_left() noexcept {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  const auto self = static_cast<long>(syscall(SYS_gettid));
  const auto main_thread = static_cast<long>(getpid());
  bool alone = true;
  while (const dirent* entry = readdir(tasks)) {
    const long tid = std::strtol(entry->d_name, nullptr, 10);
    if (tid <= 0 || tid == self) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // ended meanwhile
    char text[1024];
    const ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0) continue;
    text[got] = '\0';
    // "tid (comm) state ...": the name may hold anything, so the state follows the last ')'. A main
    // thread that called pthread_exit stays listed, as a zombie, until the process ends.
    const char* open_paren = std::strchr(text, '(');
    const char* state = std::strrchr(text, ')');
    if (open_paren == nullptr || state == nullptr || state[1] != ' ') {
      alone = false;
      break;
    }
    if (state[2] == 'Z' || state[2] == 'X') continue;
    const std::size_t prefix = sizeof kBackgroundThreadPrefix - 1;
    const bool background = tid != main_thread && static_cast<std::size_t>(state - open_paren - 1) >= prefix &&
                            std::strncmp(open_paren + 1, kBackgroundThreadPrefix, prefix) == 0;
    if (!background) {
      alone = false;
      break;
    }
  }
  closedir(tasks);
  return alone;
}

}  // namespace gpumem::shim
