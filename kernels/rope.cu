// CUDA RoPE: one thread per rotated pair, the math from rope.cuh.
#include "cuda_launch.cuh"
#include "launch.h"
#include "rope.cuh"

namespace ht::cuda {
namespace {

// Pair p of the (rows, n_head, half) pairs: i = p % half, head h, row r; row
// r is position r % t. A thread reads both elements of its pair before it
// writes them, so y may alias x.
__global__ void rope_kernel(const float* x, const float* table, float* y, std::int64_t pairs, std::int64_t t,
                            std::int64_t n_head, std::int64_t half, float sign) {
  for (std::int64_t p = global_thread(); p < pairs; p += grid_threads()) {
    const std::int64_t i = p % half, rh = p / half, r = rh / n_head;
    const std::int64_t at = rh * 2 * half + i;  // element i of head h of row r: (r * n_head + h) * d + i
    const float* cs = table + ((r % t) * half + i) * 2;
    float y1, y2;
    kern::rope_rotate(x[at], x[at + half], cs[0], sign * cs[1], y1, y2);
    y[at] = y1;
    y[at + half] = y2;
  }
}

}  // namespace

cudaError_t launch_rope(const float* x, const float* table, float* y, std::int64_t rows, std::int64_t t,
                        std::int64_t n_head, std::int64_t half, bool inverse, cudaStream_t stream) {
  const std::int64_t pairs = rows * n_head * half;
  if (pairs == 0) return cudaSuccess;
  rope_kernel<<<grid_for(pairs), kBlock, 0, stream>>>(x, table, y, pairs, t, n_head, half, inverse ? -1.f : 1.f);
  return cudaGetLastError();
}

}  // namespace ht::cuda
