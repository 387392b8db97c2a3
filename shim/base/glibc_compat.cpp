// libstdc++ is linked into the shim statically (a process that is not C++ then loads no
// libstdc++.so: 0.6 ms less at the start of every shell and tool a preloaded environment runs).
// Its archive references arc4random (std::random_device), which glibc has only since 2.36; the shim
// promises glibc 2.34. This hidden definition satisfies that reference inside the shim, so the shim
// imports nothing newer. The shim itself never asks for random device bytes.
#include <sys/random.h>

#include <cstdint>

extern "C" __attribute__((visibility("hidden"))) std::uint32_t arc4random() {
  std::uint32_t value = 0;
  // getrandom (glibc 2.25) blocks only until the kernel's pool is first initialised, as
  // arc4random does; a short read is retried.
  while (getrandom(&value, sizeof value, 0) != static_cast<ssize_t>(sizeof value)) {
  }
  return value;
}
