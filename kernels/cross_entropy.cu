// CUDA fused softmax cross-entropy: one block per row for the log-sum-exp,
// and an element-wise backward that recomputes the softmax from it
// (softmax.cuh's cross_entropy_grad), plus the per-shard forward of the
// vocabulary-parallel loss. Targets are range-checked by the driver before
// these run.
#include "cuda_launch.cuh"
#include "launch.h"
#include "softmax.cuh"

namespace ht::cuda {
namespace {

constexpr int kRowBlock = 512;  // a vocabulary row is long (tens of thousands): many threads per row

// Sum of one row of v values, for every thread of the block.
__device__ __forceinline__ float block_row_sum(const float* row, std::int64_t v, float* smem) {
  float sum = 0.f;
  for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += row[j];
  return block_sum(sum, smem);
}

// `ignore`: the ignored target id, or kNoIgnore; `eps`: label smoothing.
__global__ void cross_entropy_forward_kernel(const float* logits, const std::int32_t* targets, float* losses,
                                             float* lse, std::int64_t n, std::int64_t v, std::int64_t ignore,
                                             float eps) {
  __shared__ float smem[kWarp];
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* row = logits + i * v;
    const float l = block_row_lse(row, v, smem);
    const float mean = eps == 0.f ? 0.f : block_row_sum(row, v, smem) / float(v);
    if (threadIdx.x == 0) {
      lse[i] = l;
      // An out-of-range target reads nothing: the driver recorded it for
      // ops::raise_index_errors, which stops the step. An ignored one counts 0.
      const std::int32_t t = targets[i];
      losses[i] = t >= 0 && t < v && t != ignore ? l - (1.f - eps) * row[t] - eps * mean : 0.f;
    }
  }
}

// The forward over one vocabulary shard (columns [start, start + v)): the
// shard's lse and the target's logit where the shard holds it. Only the
// first `real` columns are token ids (the rest pad a padded vocabulary).
__global__ void cross_entropy_shard_forward_kernel(const float* logits, const std::int32_t* targets, float* lse,
                                                   float* target_logit, std::int64_t n, std::int64_t v,
                                                   std::int64_t real, std::int64_t start) {
  __shared__ float smem[kWarp];
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* row = logits + i * v;
    const float l = block_row_lse(row, real, smem);
    if (threadIdx.x == 0) {
      const std::int64_t col = std::int64_t(targets[i]) - start;
      lse[i] = l;
      target_logit[i] = col >= 0 && col < v ? row[col] : 0.f;
    }
  }
}

// One block per row, threads across the shard's columns (the whole
// vocabulary when start is 0). Every element is read and then written by the
// same thread, so dlogits may alias logits. A target outside the shard maps
// to a column no thread has, so no one-hot term is applied. Padding columns
// (from `real` on) get a zero gradient.
// An ignored row's gradient is all zeros; `uniform` is label smoothing's
// eps / V over the whole vocabulary.
__global__ void cross_entropy_backward_kernel(const float* logits, const std::int32_t* targets, const float* lse,
                                              float dloss, float* dlogits, std::int64_t n, std::int64_t v,
                                              std::int64_t real, std::int64_t start, std::int64_t ignore, float eps,
                                              float uniform) {
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* row = logits + i * v;
    float* out = dlogits + i * v;
    const float l = lse[i];
    const bool skip = targets[i] == ignore;
    const std::int64_t target = std::int64_t(targets[i]) - start;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x)
      out[j] = j < real && !skip ? kern::cross_entropy_grad(row[j], l, j == target, dloss, eps, uniform) : 0.f;
  }
}

}  // namespace

cudaError_t launch_cross_entropy_forward(const float* logits, const std::int32_t* targets, float* losses,
                                         float* lse, std::int64_t n, std::int64_t v, std::int64_t ignore, float eps,
                                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  cross_entropy_forward_kernel<<<grid_for(n, 1), kRowBlock, 0, stream>>>(logits, targets, losses, lse, n, v, ignore,
                                                                        eps);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_shard_forward(const float* logits, const std::int32_t* targets, float* lse,
                                               float* target_logit, std::int64_t n, std::int64_t v,
                                               std::int64_t real, std::int64_t start, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  cross_entropy_shard_forward_kernel<<<grid_for(n, 1), kRowBlock, 0, stream>>>(logits, targets, lse, target_logit, n,
                                                                              v, real, start);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* lse,
                                          float dloss, float* dlogits, std::int64_t n, std::int64_t v,
                                          std::int64_t real, std::int64_t start, std::int64_t ignore, float eps,
                                          float uniform, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  cross_entropy_backward_kernel<<<grid_for(n, 1), kBlock, 0, stream>>>(logits, targets, lse, dloss, dlogits, n, v,
                                                                       real, start, ignore, eps, uniform);
  return cudaGetLastError();
}

}  // namespace ht::cuda
