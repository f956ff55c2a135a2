// CUDA mean-squared error. Forward: the squared errors summed in double in
// two fixed-shape stages, as sum_squares does (cast.cu): block b sums what
// its grid-stride loop gives its threads, combined by a fixed tree, into
// partial[b]; one block adds the partials by a fixed tree and writes the
// mean. The grid depends only on n, so the bits are the same on every run
// (and differ from the CPU's chunked sum only by double rounding). Backward:
// element-wise, mse.cuh's gradient.
#include "cuda_launch.cuh"
#include "launch.h"
#include "mse.cuh"

namespace ht::cuda {
namespace {

constexpr int kSumBlock = 256;
constexpr std::int64_t kItemsPerThread = 16;
constexpr int kMaxPartials = 1024;  // stage 2 reduces them with one 1024-thread block

__global__ void mse_partial_kernel(const float* pred, const float* target, std::int64_t n, double* partial) {
  __shared__ double smem[kWarp];
  double s = 0.0;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) s += kern::mse_term(pred[i], target[i]);
  s = block_sum(s, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void mse_final_kernel(const double* partial, int count, std::int64_t n, float* loss) {
  __shared__ double smem[kWarp];
  const double s = block_sum(int(threadIdx.x) < count ? partial[threadIdx.x] : 0.0, smem);
  if (threadIdx.x == 0) *loss = float(s / double(n));
}

__global__ void mse_backward_kernel(const float* pred, const float* target, float coef, float* dpred,
                                    std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) dpred[i] = kern::mse_grad(pred[i], target[i], coef);
}

}  // namespace

std::int64_t mse_scratch_count(std::int64_t n) {
  const std::int64_t per_block = kSumBlock * kItemsPerThread;
  return std::clamp<std::int64_t>((n + per_block - 1) / per_block, 1, kMaxPartials);
}

cudaError_t launch_mse_forward(const float* pred, const float* target, std::int64_t n, double* scratch, float* loss,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int partials = int(mse_scratch_count(n));
  mse_partial_kernel<<<partials, kSumBlock, 0, stream>>>(pred, target, n, scratch);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  mse_final_kernel<<<1, kMaxPartials, 0, stream>>>(scratch, partials, n, loss);
  return cudaGetLastError();
}

cudaError_t launch_mse_backward(const float* pred, const float* target, float coef, float* dpred, std::int64_t n,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  mse_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(pred, target, coef, dpred, n);
  return cudaGetLastError();
}

}  // namespace ht::cuda
