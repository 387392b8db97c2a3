// cuDNN: a handle on a stream, the descriptors of a 3x3 convolution of a 32x64x56x56 float tensor
// to 128 channels, the output shape and the forward workspace asked for, then destroyed.
#include <cuda_runtime.h>
#include <cudnn.h>

#include "library_calls.h"

int main() {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t input = nullptr, output = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t convolution = nullptr;
  int n = 0, c = 0, h = 0, w = 0;
  std::size_t workspace_bytes = 0;
  std::printf("cudnn: version %zu\n", cudnnGetVersion());
  CALL("cudart", cudaStreamCreate(&stream));
  CALL("cudnn", cudnnCreate(&handle));
  CALL("cudnn", cudnnSetStream(handle, stream));
  CALL("cudnn", cudnnCreateTensorDescriptor(&input));
  CALL("cudnn", cudnnCreateTensorDescriptor(&output));
  CALL("cudnn", cudnnCreateFilterDescriptor(&filter));
  CALL("cudnn", cudnnCreateConvolutionDescriptor(&convolution));
  CALL("cudnn", cudnnSetTensor4dDescriptor(input, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 32, 64, 56, 56));
  CALL("cudnn", cudnnSetFilter4dDescriptor(filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 128, 64, 3, 3));
  CALL("cudnn", cudnnSetConvolution2dDescriptor(convolution, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
  CALL("cudnn", cudnnGetConvolution2dForwardOutputDim(convolution, input, filter, &n, &c, &h, &w));
  std::printf("cudnn: output %dx%dx%dx%d\n", n, c, h, w);
  CALL("cudnn", cudnnSetTensor4dDescriptor(output, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  CALL("cudnn", cudnnGetConvolutionForwardWorkspaceSize(handle, input, filter, convolution, output,
                                                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &workspace_bytes));
  std::printf("cudnn: workspace %zu bytes\n", workspace_bytes);
  CALL("cudnn", cudnnDestroyConvolutionDescriptor(convolution));
  CALL("cudnn", cudnnDestroyFilterDescriptor(filter));
  CALL("cudnn", cudnnDestroyTensorDescriptor(output));
  CALL("cudnn", cudnnDestroyTensorDescriptor(input));
  CALL("cudnn", cudnnDestroy(handle));
  CALL("cudart", cudaStreamDestroy(stream));
  std::printf("cudnn_calls: done\n");
  return 0;
}
