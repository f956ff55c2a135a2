// CUDA sum/mean along one dimension and its broadcast backward, over the
// (outer, size, inner) view (src/ops/axis.h) and reduce.cuh's finish and
// gradient. Sums are in double in a fixed order: with inner > 1 one thread
// per output walks the size rows in order (the CPU driver's order, so the
// results are the same bits); reducing the last dimension, one warp per
// output with a fixed butterfly tree.
#include "cuda_launch.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace ht::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarp;  // one warp per output row

__global__ void reduce_rows_kernel(const float* x, float* out, std::int64_t outer, std::int64_t size, bool mean) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t o = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; o < outer;
       o += std::int64_t(gridDim.x) * kRowsPerBlock) {
    const float* row = x + o * size;
    double s = 0.0;
    for (std::int64_t k = lane; k < size; k += kWarp) s += double(row[k]);
    s = warp_sum(s);
    if (lane == 0) out[o] = kern::reduce_finish(s, size, mean);
  }
}

// Output (o, j) = index o * inner + j; adjacent threads read adjacent columns.
__global__ void reduce_columns_kernel(const float* x, float* out, std::int64_t outer, std::int64_t size,
                                      std::int64_t inner, bool mean) {
  const std::int64_t n = outer * inner;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float* col = x + (i / inner) * size * inner + i % inner;
    double s = 0.0;
    for (std::int64_t k = 0; k < size; ++k) s += double(col[k * inner]);
    out[i] = kern::reduce_finish(s, size, mean);
  }
}

__global__ void reduce_backward_kernel(const float* dout, float* dx, std::int64_t n, std::int64_t size,
                                       std::int64_t inner, bool mean) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    dx[i] = kern::reduce_grad(dout[(i / (size * inner)) * inner + i % inner], size, mean);
}

}  // namespace

cudaError_t launch_reduce(const float* x, float* out, std::int64_t outer, std::int64_t size, std::int64_t inner,
                          bool mean, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  if (inner == 1)
    reduce_rows_kernel<<<grid_for(outer, kRowsPerBlock), kBlock, 0, stream>>>(x, out, outer, size, mean);
  else
    reduce_columns_kernel<<<grid_for(outer * inner), kBlock, 0, stream>>>(x, out, outer, size, inner, mean);
  return cudaGetLastError();
}

cudaError_t launch_reduce_backward(const float* dout, float* dx, std::int64_t outer, std::int64_t size,
                                   std::int64_t inner, bool mean, cudaStream_t stream) {
  const std::int64_t n = outer * size * inner;
  if (n == 0) return cudaSuccess;
  reduce_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dout, dx, n, size, inner, mean);
  return cudaGetLastError();
}

}  // namespace ht::cuda
