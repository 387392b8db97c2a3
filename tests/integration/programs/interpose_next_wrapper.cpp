// A wrapper library of the usual kind (profilers, MPI tools): it wraps libc's rand() and finds the
// wrapped function with dlsym(RTLD_NEXT, ...), which glibc answers relative to the calling object.
// interpose_next_report() prints where its RTLD_NEXT and RTLD_DEFAULT look-ups led.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {

const char* object_name(const void* address) {
  if (address == nullptr) return "none";
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash != nullptr ? slash + 1 : info.dli_fname;
}

using RandFunction = int (*)();

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int rand() {
  const auto next = reinterpret_cast<RandFunction>(dlsym(RTLD_NEXT, "rand"));
  if (next == nullptr || next == &rand) return -1;  // a wrong answer would recurse forever
  return next();
}

__attribute__((visibility("default"))) void interpose_next_report() {
  std::printf("rtld_next_rand=%s\n", object_name(dlsym(RTLD_NEXT, "rand")));
  // No object after this one defines this name: glibc must say so (and leave an error to read).
  const void* self = dlsym(RTLD_NEXT, "interpose_next_report");
  const char* error = dlerror();
  std::printf("rtld_next_self=%s\n", object_name(self));
  std::printf("rtld_next_self_error=%d\n", error != nullptr ? 1 : 0);
  std::printf("rtld_default_rand=%s\n", object_name(dlsym(RTLD_DEFAULT, "rand")));
}
}
