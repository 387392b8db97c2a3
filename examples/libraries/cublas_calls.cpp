// cuBLAS: a handle on a stream with its own workspace, then single, double and mixed-precision
// GEMMs (C = A B on n x n matrices), the handle destroyed and the memory freed.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "library_calls.h"

int main() {
  constexpr int n = 256;
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  double *ad = nullptr, *bd = nullptr, *cd = nullptr;
  __half *ah = nullptr, *bh = nullptr, *ch = nullptr;
  constexpr std::size_t workspace_bytes = std::size_t{32} << 20;
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cublas", cublasCreate(&handle));
  CALL("cublas", cublasSetStream(handle, stream));
  CALL("cudart", cudaMalloc(&workspace, workspace_bytes));
  CALL("cublas", cublasSetWorkspace(handle, workspace, workspace_bytes));
  CALL("cudart", cudaMalloc(&a, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&b, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&c, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&ad, n * n * sizeof(double)));
  CALL("cudart", cudaMalloc(&bd, n * n * sizeof(double)));
  CALL("cudart", cudaMalloc(&cd, n * n * sizeof(double)));
  CALL("cudart", cudaMalloc(&ah, n * n * sizeof(__half)));
  CALL("cudart", cudaMalloc(&bh, n * n * sizeof(__half)));
  CALL("cudart", cudaMalloc(&ch, n * n * sizeof(__half)));
  const float one = 1.0f, zero = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  CALL("cublas", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
  CALL("cublas", cublasDgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, &one_d, ad, n, bd, n, &zero_d, cd, n));
  CALL("cublas", cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, ah, CUDA_R_16F, n, bh, CUDA_R_16F, n,
                              &zero, ch, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CALL("cublas", cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, n / 4, n / 4, n / 4, &one, a, n / 4,
                                           n * n / 16, b, n / 4, n * n / 16, &zero, c, n / 4, n * n / 16, 16));
  CALL("cudart", cudaStreamSynchronize(stream));
  CALL("cublas", cublasDestroy(handle));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), static_cast<void*>(ad),
                  static_cast<void*>(bd), static_cast<void*>(cd), static_cast<void*>(ah), static_cast<void*>(bh),
                  static_cast<void*>(ch), workspace})
    CALL("cudart", cudaFree(p));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("cublas_calls: done\n");
  return 0;
}
