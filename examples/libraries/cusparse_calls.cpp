// cuSPARSE: a handle on a stream, a CSR matrix (the n x n identity) and two dense vectors, the
// work area of y = A x asked for, allocated and used, then everything destroyed.
#include <cuda_runtime.h>
#include <cusparse.h>

#include <vector>

#include "library_calls.h"

int main() {
  constexpr int n = 1024;
  cudaStream_t stream = nullptr;
  cusparseHandle_t handle = nullptr;
  cusparseSpMatDescr_t matrix = nullptr;
  cusparseDnVecDescr_t x_desc = nullptr, y_desc = nullptr;
  int *offsets = nullptr, *columns = nullptr;
  float *values = nullptr, *x = nullptr, *y = nullptr;
  void* work = nullptr;
  std::size_t work_bytes = 0;
  std::vector<int> host_offsets(n + 1), host_columns(n);
  for (int i = 0; i <= n; ++i) host_offsets[i] = i;
  for (int i = 0; i < n; ++i) host_columns[i] = i;
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cusparse", cusparseCreate(&handle));
  CALL("cusparse", cusparseSetStream(handle, stream));
  CALL("cudart", cudaMalloc(&offsets, (n + 1) * sizeof(int)));
  CALL("cudart", cudaMalloc(&columns, n * sizeof(int)));
  CALL("cudart", cudaMalloc(&values, n * sizeof(float)));
  CALL("cudart", cudaMalloc(&x, n * sizeof(float)));
  CALL("cudart", cudaMalloc(&y, n * sizeof(float)));
  CALL("cudart", cudaMemcpy(offsets, host_offsets.data(), (n + 1) * sizeof(int), cudaMemcpyHostToDevice));
  CALL("cudart", cudaMemcpy(columns, host_columns.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CALL("cusparse", cusparseCreateCsr(&matrix, n, n, n, offsets, columns, values, CUSPARSE_INDEX_32I,
                                     CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CALL("cusparse", cusparseCreateDnVec(&x_desc, n, x, CUDA_R_32F));
  CALL("cusparse", cusparseCreateDnVec(&y_desc, n, y, CUDA_R_32F));
  const float one = 1.0f, zero = 0.0f;
  CALL("cusparse", cusparseSpMV_bufferSize(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, matrix, x_desc, &zero,
                                           y_desc, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &work_bytes));
  CALL("cudart", cudaMalloc(&work, work_bytes > 0 ? work_bytes : 1));
  CALL("cusparse", cusparseSpMV(handle, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, matrix, x_desc, &zero, y_desc,
                                CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, work));
  CALL("cudart", cudaStreamSynchronize(stream));
  CALL("cusparse", cusparseDestroyDnVec(y_desc));
  CALL("cusparse", cusparseDestroyDnVec(x_desc));
  CALL("cusparse", cusparseDestroySpMat(matrix));
  CALL("cusparse", cusparseDestroy(handle));
  for (void* p : {static_cast<void*>(offsets), static_cast<void*>(columns), static_cast<void*>(values),
                  static_cast<void*>(x), static_cast<void*>(y), work})
    CALL("cudart", cudaFree(p));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("cusparse_calls: done\n");
  return 0;
}
