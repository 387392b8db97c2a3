// cuBLASLt: a handle, a matmul description and three matrix layouts, the heuristic asked for an
// algorithm within a workspace, one matmul on a stream, then everything destroyed.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "library_calls.h"

int main() {
  constexpr int n = 256;
  constexpr std::size_t workspace_bytes = std::size_t{32} << 20;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  void* workspace = nullptr;
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cublasLt", cublasLtCreate(&handle));
  CALL("cudart", cudaMalloc(&a, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&b, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&c, n * n * sizeof(float)));
  CALL("cudart", cudaMalloc(&workspace, workspace_bytes));
  CALL("cublasLt", cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CALL("cublasLt", cublasLtMatrixLayoutCreate(&layout_a, CUDA_R_32F, n, n, n));
  CALL("cublasLt", cublasLtMatrixLayoutCreate(&layout_b, CUDA_R_32F, n, n, n));
  CALL("cublasLt", cublasLtMatrixLayoutCreate(&layout_c, CUDA_R_32F, n, n, n));
  CALL("cublasLt", cublasLtMatmulPreferenceCreate(&preference));
  CALL("cublasLt", cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &workspace_bytes, sizeof workspace_bytes));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CALL("cublasLt", cublasLtMatmulAlgoGetHeuristic(handle, op, layout_a, layout_b, layout_c, layout_c, preference, 1,
                                                  &heuristic, &found));
  std::printf("cublasLt: algorithms found: %d\n", found);
  const float one = 1.0f, zero = 0.0f;
  CALL("cublasLt", cublasLtMatmul(handle, op, &one, a, layout_a, b, layout_b, &zero, c, layout_c, c, layout_c,
                                  found > 0 ? &heuristic.algo : nullptr, workspace, workspace_bytes, stream));
  CALL("cudart", cudaStreamSynchronize(stream));
  CALL("cublasLt", cublasLtMatmulPreferenceDestroy(preference));
  CALL("cublasLt", cublasLtMatrixLayoutDestroy(layout_c));
  CALL("cublasLt", cublasLtMatrixLayoutDestroy(layout_b));
  CALL("cublasLt", cublasLtMatrixLayoutDestroy(layout_a));
  CALL("cublasLt", cublasLtMatmulDescDestroy(op));
  CALL("cublasLt", cublasLtDestroy(handle));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), workspace})
    CALL("cudart", cudaFree(p));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("cublaslt_calls: done\n");
  return 0;
}
