// cuRAND: a default (XORWOW) and a Philox generator on a stream, seeded, generating uniform and
// normal floats into device memory, then destroyed.
#include <cuda_runtime.h>
#include <curand.h>

#include "library_calls.h"

int main() {
  constexpr std::size_t n = std::size_t{1} << 20;
  cudaStream_t stream = nullptr;
  curandGenerator_t xorwow = nullptr, philox = nullptr;
  float* values = nullptr;
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cudart", cudaMalloc(&values, n * sizeof(float)));
  CALL("curand", curandCreateGenerator(&xorwow, CURAND_RNG_PSEUDO_DEFAULT));
  CALL("curand", curandSetStream(xorwow, stream));
  CALL("curand", curandSetPseudoRandomGeneratorSeed(xorwow, 1234));
  CALL("curand", curandGenerateUniform(xorwow, values, n));
  CALL("curand", curandGenerateNormal(xorwow, values, n, 0.0f, 1.0f));
  CALL("curand", curandCreateGenerator(&philox, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CALL("curand", curandSetStream(philox, stream));
  CALL("curand", curandGenerateUniform(philox, values, n));
  CALL("cudart", cudaStreamSynchronize(stream));
  CALL("curand", curandDestroyGenerator(philox));
  CALL("curand", curandDestroyGenerator(xorwow));
  CALL("cudart", cudaFree(values));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("curand_calls: done\n");
  return 0;
}
