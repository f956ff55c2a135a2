// CUDA RMSNorm: one warp per row for the row statistic and dx, and a
// fixed-order column reduction for the weight gradient. The per-element math
// is rmsnorm.cuh's, shared with the CPU driver.
#include "cuda_launch.cuh"
#include "launch.h"
#include "rmsnorm.cuh"

namespace ht::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarp;  // one warp per row

__device__ __forceinline__ std::int64_t first_warp_row() {
  return std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
}
__device__ __forceinline__ std::int64_t warp_row_stride() { return std::int64_t(gridDim.x) * kRowsPerBlock; }

// Each lane reads its own elements for the sum and writes only those after
// the warp reduction, so y may alias x.
__global__ void rmsnorm_forward_kernel(const float* x, const float* w, float* y, float* rstd, std::int64_t n,
                                       std::int64_t c, float eps) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t i = first_warp_row(); i < n; i += warp_row_stride()) {
    const float* row = x + i * c;
    float ss = 0.f;
    for (std::int64_t j = lane; j < c; j += kWarp) ss += row[j] * row[j];
    const float rs = 1.f / sqrtf(warp_sum(ss) / float(c) + eps);
    float* out = y + i * c;
    for (std::int64_t j = lane; j < c; j += kWarp) out[j] = kern::rmsnorm_out(row[j], rs, w[j]);
    if (lane == 0) rstd[i] = rs;
  }
}

// dw[j] += sum_i dy[i,j] * x[i,j] * rstd[i], with the block layout and
// fixed-tree combination of bias_grad_kernel (elementwise.cu).
__global__ void rmsnorm_weight_grad_kernel(const float* dy, const float* x, const float* rstd, float* dw,
                                           std::int64_t n, std::int64_t c) {
  __shared__ float smem[kColTile * kRowLanes];
  const std::int64_t j = std::int64_t(blockIdx.x) * kColTile + threadIdx.x;
  float acc = 0.f;
  if (j < c)
    for (std::int64_t i = threadIdx.y; i < n; i += kRowLanes) acc += dy[i * c + j] * kern::rmsnorm_xhat(x[i * c + j], rstd[i]);
  const float total = sum_over_row_lanes(acc, smem);
  if (threadIdx.y == 0 && j < c) dw[j] += total;
}

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w; dx may alias dy
// (each lane writes only elements it has read, after the reduction).
__global__ void rmsnorm_input_grad_kernel(const float* dy, const float* x, const float* w, const float* rstd,
                                          float* dx, std::int64_t n, std::int64_t c) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t i = first_warp_row(); i < n; i += warp_row_stride()) {
    const float* xr = x + i * c;
    const float* gr = dy + i * c;
    const float rs = rstd[i];
    float sum_gx = 0.f;
    for (std::int64_t j = lane; j < c; j += kWarp) sum_gx += gr[j] * w[j] * kern::rmsnorm_xhat(xr[j], rs);
    const float mean_gx = warp_sum(sum_gx) / float(c);
    float* out = dx + i * c;
    for (std::int64_t j = lane; j < c; j += kWarp)
      out[j] = kern::rmsnorm_dx(gr[j] * w[j], kern::rmsnorm_xhat(xr[j], rs), mean_gx, rs);
  }
}

}  // namespace

cudaError_t launch_rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, std::int64_t n,
                                   std::int64_t c, float eps, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  rmsnorm_forward_kernel<<<grid_for(n, kRowsPerBlock), kBlock, 0, stream>>>(x, w, y, rstd, n, c, eps);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_weight_grad(const float* dy, const float* x, const float* rstd, float* dw, std::int64_t n,
                                       std::int64_t c, cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  const dim3 block(kColTile, kRowLanes);
  rmsnorm_weight_grad_kernel<<<unsigned((c + kColTile - 1) / kColTile), block, 0, stream>>>(dy, x, rstd, dw, n, c);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_input_grad(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                                      std::int64_t n, std::int64_t c, cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  rmsnorm_input_grad_kernel<<<grid_for(n, kRowsPerBlock), kBlock, 0, stream>>>(dy, x, w, rstd, dx, n, c);
  return cudaGetLastError();
}

}  // namespace ht::cuda
