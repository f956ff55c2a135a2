// CUDA fused softmax cross-entropy: one block per row for the log-sum-exp,
// and an element-wise backward that recomputes the softmax from it
// (softmax.cuh's cross_entropy_grad). Bad targets are reported through a
// device word for the driver to throw.
#include "cuda_launch.cuh"
#include "launch.h"
#include "softmax.cuh"

namespace ht::cuda {
namespace {

constexpr int kRowBlock = 512;  // a vocabulary row is long (tens of thousands): many threads per row

__device__ __forceinline__ bool target_ok(std::int32_t target, std::int64_t v) { return target >= 0 && target < v; }

// Max, then the sum of exp(x - max), each reduced over the block in a fixed
// tree: lse = max + log(sum). A row with a bad target records its index with
// atomicMin (order-independent) and is skipped.
__global__ void cross_entropy_forward_kernel(const float* logits, const std::int32_t* targets, float* losses,
                                             float* lse, std::int64_t n, std::int64_t v,
                                             unsigned long long* first_bad) {
  __shared__ float smem[kWarp];
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int32_t target = targets[i];
    if (!target_ok(target, v)) {  // uniform across the block: no thread reaches the barriers below
      if (threadIdx.x == 0) atomicMin(first_bad, static_cast<unsigned long long>(i));
      continue;
    }
    const float* row = logits + i * v;
    float mx = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, smem);
    float sum = 0.f;
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += expf(row[j] - mx);
    sum = block_sum(sum, smem);
    if (threadIdx.x == 0) {
      const float l = mx + logf(sum);
      lse[i] = l;
      losses[i] = l - row[target];
    }
  }
}

// One block per row, threads across the vocabulary. Every element is read
// and then written by the same thread, so dlogits may alias logits.
__global__ void cross_entropy_backward_kernel(const float* logits, const std::int32_t* targets, const float* lse,
                                              float dloss, float* dlogits, std::int64_t n, std::int64_t v,
                                              unsigned long long* first_bad) {
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int32_t target = targets[i];
    if (!target_ok(target, v)) {
      if (threadIdx.x == 0) atomicMin(first_bad, static_cast<unsigned long long>(i));
      continue;
    }
    const float* row = logits + i * v;
    float* out = dlogits + i * v;
    const float l = lse[i];
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x)
      out[j] = kern::cross_entropy_grad(row[j], l, j == target, dloss);
  }
}

}  // namespace

cudaError_t launch_cross_entropy_forward(const float* logits, const std::int32_t* targets, float* losses,
                                         float* lse, std::int64_t n, std::int64_t v,
                                         unsigned long long* first_bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  cross_entropy_forward_kernel<<<grid_for(n, 1), kRowBlock, 0, stream>>>(logits, targets, losses, lse, n, v,
                                                                         first_bad);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* lse,
                                          float dloss, float* dlogits, std::int64_t n, std::int64_t v,
                                          unsigned long long* first_bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  cross_entropy_backward_kernel<<<grid_for(n, 1), kBlock, 0, stream>>>(logits, targets, lse, dloss, dlogits, n, v,
                                                                       first_bad);
  return cudaGetLastError();
}

}  // namespace ht::cuda
