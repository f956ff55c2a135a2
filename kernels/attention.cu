// CUDA attention softmax, forward and backward: one warp per score row, for
// both public forms of attention (packed causal, and general with an optional
// causal mask and key padding mask). The GEMMs around it are cuBLAS calls in
// attention_driver.cc.
#include "cuda_launch.cuh"
#include "launch.h"
#include "softmax.cuh"

namespace ht::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarp;  // one warp per row

__device__ __forceinline__ std::int64_t first_warp_row() {
  return std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
}
__device__ __forceinline__ std::int64_t warp_row_stride() { return std::int64_t(gridDim.x) * kRowsPerBlock; }

// Row r of the (batch, n_head, t, t) stack is query position i = r % t of
// batch entry b = r / (n_head * t); it sees keys [0, len) (all t, or [0, i]
// when causal) minus those key_mask[b] zeroes. Each lane exponentiates, and
// later rescales, only its own columns, so no synchronisation is needed
// besides the warp reductions. A row with no admissible key (the warp's max
// stays -inf, the same in every lane) becomes zeros.
__global__ void attention_softmax_kernel(float* scores, std::int64_t rows, std::int64_t t, std::int64_t n_head,
                                         bool causal, const std::int32_t* key_mask) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    float* row = scores + r * t;
    const std::int64_t i = r % t;
    const std::int32_t* keep = key_mask ? key_mask + (r / (n_head * t)) * t : nullptr;
    const std::int64_t len = kern::attention_visible_keys(i, t, causal);
    float mx = -INFINITY;
    for (std::int64_t j = lane; j < len; j += kWarp)
      if (!keep || keep[j]) mx = fmaxf(mx, row[j]);
    mx = warp_max(mx);
    if (mx == -INFINITY) {
      for (std::int64_t j = lane; j < t; j += kWarp) row[j] = 0.f;
      continue;
    }
    float sum = 0.f;
    for (std::int64_t j = lane; j < len; j += kWarp) {
      const float e = !keep || keep[j] ? expf(row[j] - mx) : 0.f;
      row[j] = e;
      sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (std::int64_t j = lane; j < len; j += kWarp) row[j] *= inv;
    for (std::int64_t j = len + lane; j < t; j += kWarp) row[j] = 0.f;
  }
}

// Rows r = b * t + i of dscores (batch, t, t) pair with row i of head `head`
// of batch b in probs (batch, n_head, t, t). Masked keys have P = 0, so dS = 0
// there without the mask.
__global__ void attention_softmax_backward_kernel(const float* probs, float* dscores, std::int64_t batch,
                                                  std::int64_t n_head, std::int64_t head, std::int64_t t,
                                                  bool causal, float scale) {
  const int lane = int(threadIdx.x) % kWarp;
  const std::int64_t rows = batch * t;
  for (std::int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const std::int64_t b = r / t, i = r % t;
    const std::int64_t len = kern::attention_visible_keys(i, t, causal);
    const float* p = probs + ((b * n_head + head) * t + i) * t;
    float* d = dscores + r * t;
    float dot = 0.f;
    for (std::int64_t j = lane; j < len; j += kWarp) dot += p[j] * d[j];
    dot = warp_sum(dot);
    for (std::int64_t j = lane; j < len; j += kWarp) d[j] = kern::softmax_grad(p[j], d[j], dot) * scale;
    for (std::int64_t j = len + lane; j < t; j += kWarp) d[j] = 0.f;
  }
}

}  // namespace

cudaError_t launch_attention_softmax(float* scores, std::int64_t rows, std::int64_t t, std::int64_t n_head,
                                     bool causal, const std::int32_t* key_mask, cudaStream_t stream) {
  if (rows == 0 || t == 0) return cudaSuccess;
  attention_softmax_kernel<<<grid_for(rows, kRowsPerBlock), kBlock, 0, stream>>>(scores, rows, t, n_head, causal,
                                                                                 key_mask);
  return cudaGetLastError();
}

cudaError_t launch_attention_softmax_backward(const float* probs, float* dscores, std::int64_t batch,
                                              std::int64_t n_head, std::int64_t head, std::int64_t t, bool causal,
                                              float scale, cudaStream_t stream) {
  if (batch == 0 || t == 0) return cudaSuccess;
  attention_softmax_backward_kernel<<<grid_for(batch * t, kRowsPerBlock), kBlock, 0, stream>>>(
      probs, dscores, batch, n_head, head, t, causal, scale);
  return cudaGetLastError();
}

}  // namespace ht::cuda
