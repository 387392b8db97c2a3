// cuFFT: a batched 1-D complex plan and a 2-D real-to-complex plan on a stream, their work areas
// asked for, both executed, then destroyed.
#include <cuda_runtime.h>
#include <cufft.h>

#include "library_calls.h"

int main() {
  constexpr int n = 1024, batch = 8, rows = 128, cols = 128;
  cudaStream_t stream = nullptr;
  cufftHandle plan_1d = 0, plan_2d = 0;
  cufftComplex* signal = nullptr;
  cufftReal* image = nullptr;
  cufftComplex* spectrum = nullptr;
  std::size_t work_1d = 0, work_2d = 0;
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cudart", cudaMalloc(&signal, sizeof(cufftComplex) * n * batch));
  CALL("cudart", cudaMalloc(&image, sizeof(cufftReal) * rows * cols));
  CALL("cudart", cudaMalloc(&spectrum, sizeof(cufftComplex) * rows * (cols / 2 + 1)));
  CALL("cufft", cufftPlan1d(&plan_1d, n, CUFFT_C2C, batch));
  CALL("cufft", cufftSetStream(plan_1d, stream));
  CALL("cufft", cufftGetSize(plan_1d, &work_1d));
  CALL("cufft", cufftExecC2C(plan_1d, signal, signal, CUFFT_FORWARD));
  CALL("cufft", cufftExecC2C(plan_1d, signal, signal, CUFFT_INVERSE));
  CALL("cufft", cufftPlan2d(&plan_2d, rows, cols, CUFFT_R2C));
  CALL("cufft", cufftSetStream(plan_2d, stream));
  CALL("cufft", cufftGetSize(plan_2d, &work_2d));
  CALL("cufft", cufftExecR2C(plan_2d, image, spectrum));
  CALL("cudart", cudaStreamSynchronize(stream));
  std::printf("cufft: work areas %zu and %zu bytes\n", work_1d, work_2d);
  CALL("cufft", cufftDestroy(plan_2d));
  CALL("cufft", cufftDestroy(plan_1d));
  CALL("cudart", cudaFree(spectrum));
  CALL("cudart", cudaFree(image));
  CALL("cudart", cudaFree(signal));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("cufft_calls: done\n");
  return 0;
}
