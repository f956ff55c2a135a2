// CUDA dropout: one thread per element (grid-stride), the whole hash of
// dropout.cuh per element: the same integer arithmetic as the CPU driver, so
// the same decisions and bits.
#include "cuda_launch.cuh"
#include "dropout.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

// Element i of x (rows, len): row i / len, column i % len.
__global__ void dropout_kernel(const float* x, float* out, std::int64_t n, std::int64_t len, std::uint64_t seed,
                               std::uint64_t site, std::int64_t first_row, float p, float scale) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t r = i / len, j = i - r * len;
    const std::uint64_t h = kern::dropout_hash(seed, site, std::uint64_t(first_row + r), std::uint64_t(j));
    out[i] = kern::dropout_value(x[i], kern::dropout_keep(h, p), scale);
  }
}

}  // namespace

cudaError_t launch_dropout(const float* x, float* out, std::int64_t rows, std::int64_t len, std::uint64_t seed,
                           std::uint64_t site, std::int64_t first_row, float p, cudaStream_t stream) {
  const std::int64_t n = rows * len;
  if (n == 0) return cudaSuccess;
  dropout_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, out, n, len, seed, site, first_row, p,
                                                    kern::dropout_scale(p));
  return cudaGetLastError();
}

}  // namespace ht::cuda
