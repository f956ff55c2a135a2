// CUDA LayerNorm: one warp per row for the row statistics and dx, and a
// fixed-order column reduction for the weight and bias gradients. The
// per-element math is layernorm.cuh's, shared with the CPU driver.
#include "cuda_launch.cuh"
#include "launch.h"
#include "layernorm.cuh"

namespace ht::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarp;  // one warp per row

// The warp's row of a grid-stride loop over rows; every lane of a warp gets the
// same rows, so the full-mask shuffles in warp_sum are safe.
__device__ __forceinline__ std::int64_t first_warp_row() {
  return std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
}
__device__ __forceinline__ std::int64_t warp_row_stride() { return std::int64_t(gridDim.x) * kRowsPerBlock; }

// Two passes over the row (mean, then the sum of squared deviations) as the
// CPU driver does, rather than E[x^2] - E[x]^2, which cancels badly.
__global__ void layernorm_forward_kernel(const float* x, const float* w, const float* b, float* y, float* mean,
                                         float* rstd, std::int64_t n, std::int64_t c, float eps) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t i = first_warp_row(); i < n; i += warp_row_stride()) {
    const float* row = x + i * c;
    float sum = 0.f;
    for (std::int64_t j = lane; j < c; j += kWarp) sum += row[j];
    const float m = warp_sum(sum) / float(c);
    float var = 0.f;
    for (std::int64_t j = lane; j < c; j += kWarp) var += (row[j] - m) * (row[j] - m);
    const float rs = 1.f / sqrtf(warp_sum(var) / float(c) + eps);
    float* out = y + i * c;
    for (std::int64_t j = lane; j < c; j += kWarp) out[j] = kern::layernorm_out(row[j], m, rs, w[j], b[j]);
    if (lane == 0) {
      mean[i] = m;
      rstd[i] = rs;
    }
  }
}

// dw[j] += sum_i dy[i,j] * (x[i,j] - mean[i]) * rstd[i] and db[j] += sum_i dy[i,j],
// with the block layout and fixed-tree combination of bias_grad_kernel.
__global__ void layernorm_param_grad_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                            float* dw, float* db, std::int64_t n, std::int64_t c) {
  __shared__ float smem_w[kColTile * kRowLanes];
  __shared__ float smem_b[kColTile * kRowLanes];
  const std::int64_t j = std::int64_t(blockIdx.x) * kColTile + threadIdx.x;
  float acc_w = 0.f, acc_b = 0.f;
  if (j < c) {
    for (std::int64_t i = threadIdx.y; i < n; i += kRowLanes) {
      const float g = dy[i * c + j];
      acc_w += g * (x[i * c + j] - mean[i]) * rstd[i];
      acc_b += g;
    }
  }
  const float total_w = sum_over_row_lanes(acc_w, smem_w);
  const float total_b = sum_over_row_lanes(acc_b, smem_b);
  if (threadIdx.y == 0 && j < c) {
    dw[j] += total_w;
    db[j] += total_b;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w. Each lane
// reads its own elements for the two sums and writes only those elements
// after the warp has reduced them, so dx may alias dy.
__global__ void layernorm_input_grad_kernel(const float* dy, const float* x, const float* w, const float* mean,
                                            const float* rstd, float* dx, std::int64_t n, std::int64_t c) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t i = first_warp_row(); i < n; i += warp_row_stride()) {
    const float* xr = x + i * c;
    const float* gr = dy + i * c;
    const float m = mean[i], rs = rstd[i];
    float sum_g = 0.f, sum_gx = 0.f;
    for (std::int64_t j = lane; j < c; j += kWarp) {
      const float g = gr[j] * w[j];
      sum_g += g;
      sum_gx += g * (xr[j] - m) * rs;
    }
    const float mean_g = warp_sum(sum_g) / float(c), mean_gx = warp_sum(sum_gx) / float(c);
    float* out = dx + i * c;
    for (std::int64_t j = lane; j < c; j += kWarp)
      out[j] = kern::layernorm_dx(gr[j] * w[j], (xr[j] - m) * rs, mean_g, mean_gx, rs);
  }
}

}  // namespace

cudaError_t launch_layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                                     float* rstd, std::int64_t n, std::int64_t c, float eps, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  layernorm_forward_kernel<<<grid_for(n, kRowsPerBlock), kBlock, 0, stream>>>(x, w, b, y, mean, rstd, n, c, eps);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_param_grad(const float* dy, const float* x, const float* mean, const float* rstd,
                                        float* dw, float* db, std::int64_t n, std::int64_t c, cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  const dim3 block(kColTile, kRowLanes);
  layernorm_param_grad_kernel<<<unsigned((c + kColTile - 1) / kColTile), block, 0, stream>>>(dy, x, mean, rstd,
                                                                                              dw, db, n, c);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_input_grad(const float* dy, const float* x, const float* w, const float* mean,
                                        const float* rstd, float* dx, std::int64_t n, std::int64_t c,
                                        cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  layernorm_input_grad_kernel<<<grid_for(n, kRowsPerBlock), kBlock, 0, stream>>>(dy, x, w, mean, rstd, dx, n, c);
  return cudaGetLastError();
}

}  // namespace ht::cuda
