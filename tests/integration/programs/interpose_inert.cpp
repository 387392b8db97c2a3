// A program that never touches CUDA. Prints what is mapped and how many threads exist, then exits
// with the status given as its first argument, so a test can check that preloading the shim changes
// nothing in such a process.
#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int count_threads() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  int threads = 0;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] != '.') ++threads;
  }
  closedir(tasks);
  return threads;
}

}  // namespace

int main(int argc, char** argv) {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return 100;
  bool cuda_mapped = false;
  bool shim_mapped = false;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    if (std::strstr(line, "libcuda") != nullptr)
      cuda_mapped = true;  // libcuda.so.1, libcudart.so.13
    if (std::strstr(line, "libgpumem") != nullptr) shim_mapped = true;
  }
  std::fclose(maps);
  std::printf("cuda_libraries_mapped=%d\nshim_mapped=%d\nthreads=%d\n", cuda_mapped ? 1 : 0,
              shim_mapped ? 1 : 0, count_threads());
  return argc > 1 ? std::atoi(argv[1]) : 0;
}
