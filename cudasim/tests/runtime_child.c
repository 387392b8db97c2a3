/* A C program that uses the CUDA runtime through its public API only, run as a child process by
 * test_runtime_process.cpp. It is linked three ways: to the simulated static and shared runtimes
 * and, where the toolkit has it, to NVIDIA's libcudart_static.a, so that the simulator's answers
 * can be compared with NVIDIA's own. Prints one "key=value" line per observation.
 *
 *   runtime_child init   what every call answers when the runtime cannot initialise
 *   runtime_child lazy   when primary contexts come into existence (needs 2 devices)
 *   runtime_child calls  a representative set of calls, for the driver's report
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void print_status(const char* key, cudaError_t status) { printf("%s=%d\n", key, (int)status); }

static int scenario_init(void) {
  int count = -7;
  print_status("device_count", cudaGetDeviceCount(&count));
  printf("device_count.value=%d\n", count);
  int driver_version = -7;
  print_status("driver_version", cudaDriverGetVersion(&driver_version));
  printf("driver_version.value=%d\n", driver_version);
  print_status("peek_last_error", cudaPeekAtLastError());
  print_status("get_last_error", cudaGetLastError());
  print_status("get_last_error.again", cudaGetLastError());
  void* ptr = (void*)1;
  print_status("malloc", cudaMalloc(&ptr, 16));
  print_status("malloc_zero", cudaMalloc(&ptr, 0));
  printf("malloc_zero.untouched=%d\n", ptr == (void*)1);
  print_status("free_null", cudaFree(NULL));
  int runtime_version = 0;
  print_status("runtime_version", cudaRuntimeGetVersion(&runtime_version));
  printf("runtime_version.value=%d\n", runtime_version);
  print_status("runtime_version_null", cudaRuntimeGetVersion(NULL));
  return 0;
}

typedef CUresult (*GetProcAddress)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
typedef CUresult (*PrimaryCtxGetState)(CUdevice, unsigned int*, int*);

static PrimaryCtxGetState primary_state;

static void print_primary_states(const char* when) {
  for (int device = 0; device < 2; ++device) {
    unsigned int flags = 0;
    int active = -1;
    CUresult result = primary_state(device, &flags, &active);
    printf("%s.device%d=%d\n", when, device, result == CUDA_SUCCESS ? active : -1);
  }
}

static int scenario_lazy(void) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == NULL) return 2;
  GetProcAddress get_proc = NULL;
  *(void**)&get_proc = dlsym(driver, "cuGetProcAddress_v2"); /* the POSIX idiom for a function */
  CUresult (*init)(unsigned int) = NULL;
  if (get_proc == NULL || get_proc("cuInit", (void**)&init, 13000, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS ||
      get_proc("cuDevicePrimaryCtxGetState", (void**)&primary_state, 13000, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS ||
      init(0) != CUDA_SUCCESS)
    return 3;
  int count = 0;
  print_status("device_count", cudaGetDeviceCount(&count));
  print_primary_states("after_device_count");
  void* ptr = NULL;
  print_status("malloc", cudaMalloc(&ptr, 1 << 20));
  print_primary_states("after_malloc");
  print_status("set_device", cudaSetDevice(1));
  print_primary_states("after_set_device");
  print_status("reset", cudaDeviceReset());
  print_primary_states("after_reset");
  print_status("free_null", cudaFree(NULL));
  print_primary_states("after_free_null");
  print_status("set_device0", cudaSetDevice(0));
  print_status("free", cudaFree(ptr));
  return 0;
}

static void CUDART_CB nothing(void* data) { (void)data; }

static int scenario_calls(void) {
  int count = 0;
  print_status("device_count", cudaGetDeviceCount(&count));
  struct cudaDeviceProp prop;
  print_status("properties", cudaGetDeviceProperties(&prop, 0));
  size_t free_bytes = 0, total_bytes = 0;
  print_status("mem_info", cudaMemGetInfo(&free_bytes, &total_bytes));
  void* device = NULL;
  char host[64] = {0};
  print_status("malloc", cudaMalloc(&device, sizeof host));
  print_status("memcpy", cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice));
  print_status("memset", cudaMemset(device, 1, sizeof host));
  cudaStream_t stream = NULL;
  print_status("stream", cudaStreamCreate(&stream));
  cudaEvent_t event = NULL;
  print_status("event", cudaEventCreate(&event));
  print_status("host_func", cudaLaunchHostFunc(stream, nothing, NULL));
  print_status("record", cudaEventRecord(event, stream));
  void* pooled = NULL;
  print_status("malloc_async", cudaMallocAsync(&pooled, 1 << 20, stream));
  print_status("free_async", cudaFreeAsync(pooled, stream));
  print_status("stream_sync", cudaStreamSynchronize(stream));
  print_status("event_destroy", cudaEventDestroy(event));
  print_status("stream_destroy", cudaStreamDestroy(stream));
  print_status("free", cudaFree(device));
  print_status("device_sync", cudaDeviceSynchronize());
  return 0;
}

/* Every error code's name and text (no driver needed): "error.<code>=<name>|<text>". */
static int scenario_errors(void) {
  for (int code = 0; code <= 1100; ++code) {
    printf("error.%d=%s|%s\n", code, cudaGetErrorName((cudaError_t)code), cudaGetErrorString((cudaError_t)code));
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) return 64;
  int rc = 64;
  if (strcmp(argv[1], "init") == 0) rc = scenario_init();
  if (strcmp(argv[1], "lazy") == 0) rc = scenario_lazy();
  if (strcmp(argv[1], "calls") == 0) rc = scenario_calls();
  if (strcmp(argv[1], "errors") == 0) rc = scenario_errors();
  fflush(stdout);
  return rc;
}
