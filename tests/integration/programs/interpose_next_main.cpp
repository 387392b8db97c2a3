// Linked against libinterpose_next_wrapper.so: prints where the wrapper's RTLD_NEXT look-ups led
// and whether the wrapped rand() still reaches libc.
#include <cstdio>
#include <cstdlib>

extern "C" void interpose_next_report();

int main() {
  interpose_next_report();
  std::printf("rand_ok=%d\n", std::rand() >= 0 ? 1 : 0);
  return 0;
}
