// CUDA masked mean pooling over masked_mean.cuh. Forward: one thread per
// output (b, c) walks t in order, summing the kept rows in double (the CPU
// driver's order: the same bits). Backward: one warp counts each batch row's
// kept positions, then one thread per element of dx.
#include "cuda_launch.cuh"
#include "launch.h"
#include "masked_mean.cuh"

namespace ht::cuda {
namespace {

constexpr int kCountRowsPerBlock = kBlock / kWarp;  // one warp per batch row

// Output i = row * c + j; the threads of a row read the same mask entries
// (one broadcast load) and adjacent columns of x.
__global__ void masked_mean_kernel(const float* x, const std::int32_t* mask, float* out, std::int64_t b,
                                   std::int64_t t, std::int64_t c) {
  const std::int64_t n = b * c;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t row = i / c, j = i - row * c;
    const std::int32_t* m = mask + row * t;
    double s = 0.0;
    long long count = 0;
    for (std::int64_t k = 0; k < t; ++k)
      if (kern::masked_mean_keeps(m[k])) {
        s += double(x[(row * t + k) * c + j]);
        ++count;
      }
    out[i] = kern::masked_mean_finish(s, count);
  }
}

// counts[row] = the kept positions of mask row `row`; an integer sum, exact
// in any order.
__global__ void masked_mean_count_kernel(const std::int32_t* mask, std::int32_t* counts, std::int64_t b,
                                         std::int64_t t) {
  const int lane = int(threadIdx.x) % kWarp;
  for (std::int64_t row = std::int64_t(blockIdx.x) * kCountRowsPerBlock + threadIdx.x / kWarp; row < b;
       row += std::int64_t(gridDim.x) * kCountRowsPerBlock) {
    int n = 0;
    for (std::int64_t k = lane; k < t; k += kWarp) n += kern::masked_mean_keeps(mask[row * t + k]) ? 1 : 0;
    n = warp_sum(n);
    if (lane == 0) counts[row] = n;
  }
}

// Element i of dx (b, t, c): position bt = i / c, batch row bt / t.
__global__ void masked_mean_backward_kernel(const float* dout, const std::int32_t* mask, const std::int32_t* counts,
                                            float* dx, std::int64_t n, std::int64_t t, std::int64_t c) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t bt = i / c, row = bt / t;
    dx[i] = kern::masked_mean_grad(dout[row * c + (i - bt * c)], counts[row], kern::masked_mean_keeps(mask[bt]));
  }
}

}  // namespace

cudaError_t launch_masked_mean(const float* x, const std::int32_t* mask, float* out, std::int64_t b, std::int64_t t,
                               std::int64_t c, cudaStream_t stream) {
  const std::int64_t n = b * c;
  if (n == 0) return cudaSuccess;  // t == 0 still writes the zeros of rows with nothing kept
  masked_mean_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, mask, out, b, t, c);
  return cudaGetLastError();
}

cudaError_t launch_masked_mean_backward(const float* dout, const std::int32_t* mask, float* dx, std::int64_t b,
                                        std::int64_t t, std::int64_t c, std::int32_t* counts, cudaStream_t stream) {
  const std::int64_t n = b * t * c;
  if (n == 0) return cudaSuccess;
  masked_mean_count_kernel<<<grid_for(b, kCountRowsPerBlock), kBlock, 0, stream>>>(mask, counts, b, t);
  masked_mean_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dout, mask, counts, dx, n, t, c);
  return cudaGetLastError();
}

}  // namespace ht::cuda
