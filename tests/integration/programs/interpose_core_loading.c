// When libgpumem.so loads its core: prints whether libgpumem-core.so is mapped at start, after a look-up
// in the driver of a name the shim does not hook, and after one of a name it hooks.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int core_mapped(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return -1;
  char line[4096];
  int mapped = 0;
  while (fgets(line, sizeof line, maps) != NULL) {
    if (strstr(line, "libgpumem-core.so") != NULL) mapped = 1;
  }
  fclose(maps);
  return mapped;
}

int main(void) {
  printf("core_mapped_at_start=%d\n", core_mapped());
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == NULL) return 2;
  printf("core_mapped_after_unhooked_lookup=%d\n", dlsym(driver, "cuInit") != NULL ? core_mapped() : -1);
  printf("core_mapped_after_hooked_lookup=%d\n", dlsym(driver, "cuMemGetInfo_v2") != NULL ? core_mapped() : -1);
  return 0;
}
