// CUDA gather and deterministic scatter-add along one dimension, over the
// (outer, size, inner) view (src/ops/axis.h). The scatter gives each thread
// one column (o, j) of dx: it zeroes the column, then adds dout's entries in
// index order, the order of the CPU driver, so repeated indices give the
// same bits on both and on every run, without atomics. Indices are checked
// by the driver before these run.
#include "cuda_launch.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

// Element (o, i, j) of out (outer, k, inner), at (o * k + i) * inner + j.
__global__ void index_select_kernel(const float* x, const std::int32_t* index, float* out, std::int64_t n,
                                    std::int64_t size, std::int64_t k, std::int64_t inner) {
  for (std::int64_t e = global_thread(); e < n; e += grid_threads()) {
    const std::int64_t j = e % inner, row = e / inner, o = row / k;
    out[e] = x[(o * size + index[row % k]) * inner + j];
  }
}

__global__ void index_select_backward_kernel(const float* dout, const std::int32_t* index, float* dx,
                                             std::int64_t outer, std::int64_t size, std::int64_t k,
                                             std::int64_t inner) {
  const std::int64_t columns = outer * inner;
  for (std::int64_t c = global_thread(); c < columns; c += grid_threads()) {
    const std::int64_t o = c / inner, j = c % inner;
    float* d = dx + o * size * inner + j;
    const float* g = dout + o * k * inner + j;
    for (std::int64_t m = 0; m < size; ++m) d[m * inner] = 0.f;
    for (std::int64_t i = 0; i < k; ++i) d[std::int64_t(index[i]) * inner] += g[i * inner];
  }
}

}  // namespace

cudaError_t launch_index_select(const float* x, const std::int32_t* index, float* out, std::int64_t outer,
                                std::int64_t size, std::int64_t k, std::int64_t inner, cudaStream_t stream) {
  const std::int64_t n = outer * k * inner;
  if (n == 0) return cudaSuccess;
  index_select_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, index, out, n, size, k, inner);
  return cudaGetLastError();
}

cudaError_t launch_index_select_backward(const float* dout, const std::int32_t* index, float* dx, std::int64_t outer,
                                         std::int64_t size, std::int64_t k, std::int64_t inner, cudaStream_t stream) {
  const std::int64_t columns = outer * inner;
  if (columns == 0 || size == 0) return cudaSuccess;
  index_select_backward_kernel<<<grid_for(columns), kBlock, 0, stream>>>(dout, index, dx, outer, size, k, inner);
  return cudaGetLastError();
}

}  // namespace ht::cuda
