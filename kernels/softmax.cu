// CUDA softmax and log-softmax over the last dimension: one block a row,
// the max and the sum reduced over the block in a fixed tree.
#include "cuda_launch.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

constexpr int kRowBlock = 256;

__global__ void softmax_forward_kernel(const float* x, float* y, std::int64_t rows, std::int64_t v, bool log) {
  __shared__ float smem[kWarp];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* in = x + r * v;
    float* out = y + r * v;
    const float lse = block_row_lse(in, v, smem);
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) out[j] = log ? in[j] - lse : expf(in[j] - lse);
  }
}

// Each thread reads its elements of dy before writing them, after the
// row's reduction, so dx may alias dy.
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, std::int64_t rows,
                                        std::int64_t v, bool log) {
  __shared__ float smem[kWarp];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * v;
    const float* g = dy + r * v;
    float* out = dx + r * v;
    float dot = 0.f;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) dot += log ? g[j] : g[j] * yr[j];
    dot = block_sum(dot, smem);
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x)
      out[j] = log ? g[j] - expf(yr[j]) * dot : yr[j] * (g[j] - dot);
  }
}

}  // namespace

cudaError_t launch_softmax_forward(const float* x, float* y, std::int64_t rows, std::int64_t v, bool log,
                                   cudaStream_t stream) {
  if (rows == 0 || v == 0) return cudaSuccess;
  softmax_forward_kernel<<<grid_for(rows, 1), kRowBlock, 0, stream>>>(x, y, rows, v, log);
  return cudaGetLastError();
}

cudaError_t launch_softmax_backward(const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t v,
                                    bool log, cudaStream_t stream) {
  if (rows == 0 || v == 0) return cudaSuccess;
  softmax_backward_kernel<<<grid_for(rows, 1), kRowBlock, 0, stream>>>(y, dy, dx, rows, v, log);
  return cudaGetLastError();
}

}  // namespace ht::cuda
