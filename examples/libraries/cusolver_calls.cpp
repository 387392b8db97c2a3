// cuSOLVER: a dense handle on a stream, the work area of a Cholesky factorisation asked for,
// allocated and used, the handle destroyed.
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include "library_calls.h"

int main() {
  constexpr int n = 256;
  cudaStream_t stream = nullptr;
  cusolverDnHandle_t handle = nullptr;
  float* a = nullptr;
  float* work = nullptr;
  int* info = nullptr;
  int work_elements = 0;
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cusolver", cusolverDnCreate(&handle));
  CALL("cusolver", cusolverDnSetStream(handle, stream));
  CALL("cudart", cudaMalloc(&a, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&info, sizeof(int)));
  CALL("cusolver", cusolverDnSpotrf_bufferSize(handle, CUBLAS_FILL_MODE_LOWER, n, a, n, &work_elements));
  CALL("cudart", cudaMalloc(&work, (work_elements > 0 ? work_elements : 1) * sizeof(float)));
  CALL("cusolver", cusolverDnSpotrf(handle, CUBLAS_FILL_MODE_LOWER, n, a, n, work, work_elements, info));
  CALL("cudart", cudaStreamSynchronize(stream));
  CALL("cusolver", cusolverDnDestroy(handle));
  CALL("cudart", cudaFree(work));
  CALL("cudart", cudaFree(info));
  CALL("cudart", cudaFree(a));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("cusolver_calls: done\n");
  return 0;
}
