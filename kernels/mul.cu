// CUDA element-wise product (same shape, or a row vector broadcast over the
// rows) and the column sums of mul_backward's broadcast gradient, over
// mul.cuh's product and double term.
#include "cuda_launch.cuh"
#include "launch.h"
#include "mul.cuh"

namespace ht::cuda {
namespace {

// Element i of out (rows, c) takes b[i % c]; the same-shape case skips the
// division.
template <bool kBroadcast>
__global__ void mul_kernel(const float* a, const float* b, float* out, std::int64_t n, std::int64_t c) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    out[i] = kern::mul(a[i], b[kBroadcast ? i % c : i]);
}

// Thread (k, j) = index k * c + j sums rows [k * chunk, (k + 1) * chunk) of
// column j in order; adjacent threads read adjacent columns.
__global__ void mul_partial_sums_kernel(const float* dy, const float* a, double* partial, std::int64_t rows,
                                        std::int64_t c, std::int64_t chunks) {
  const std::int64_t n = chunks * c;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t k = i / c, j = i - k * c;
    const std::int64_t end = rows < (k + 1) * kern::kMulRowChunk ? rows : (k + 1) * kern::kMulRowChunk;
    double s = 0.0;
    for (std::int64_t r = k * kern::kMulRowChunk; r < end; ++r) s += kern::mul_term(dy[r * c + j], a[r * c + j]);
    partial[i] = s;
  }
}

// db[j] = partial[0, j] + partial[1, j] + ..., in that order.
__global__ void mul_sum_partials_kernel(const double* partial, float* db, std::int64_t c, std::int64_t chunks) {
  for (std::int64_t j = global_thread(); j < c; j += grid_threads()) {
    double s = 0.0;
    for (std::int64_t k = 0; k < chunks; ++k) s += partial[k * c + j];
    db[j] = float(s);
  }
}

std::int64_t mul_chunks(std::int64_t rows) { return (rows + kern::kMulRowChunk - 1) / kern::kMulRowChunk; }

}  // namespace

cudaError_t launch_mul(const float* a, const float* b, float* out, std::int64_t rows, std::int64_t c,
                       cudaStream_t stream) {
  const std::int64_t n = rows * c;
  if (n == 0) return cudaSuccess;
  if (rows == 1)
    mul_kernel<false><<<grid_for(n), kBlock, 0, stream>>>(a, b, out, n, c);
  else
    mul_kernel<true><<<grid_for(n), kBlock, 0, stream>>>(a, b, out, n, c);
  return cudaGetLastError();
}

std::int64_t mul_column_sums_scratch_count(std::int64_t rows, std::int64_t c) { return mul_chunks(rows) * c; }

cudaError_t launch_mul_column_sums(const float* dy, const float* a, float* db, std::int64_t rows, std::int64_t c,
                                   double* scratch, cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  const std::int64_t chunks = mul_chunks(rows);
  if (chunks > 0)
    mul_partial_sums_kernel<<<grid_for(chunks * c), kBlock, 0, stream>>>(dy, a, scratch, rows, c, chunks);
  mul_sum_partials_kernel<<<grid_for(c), kBlock, 0, stream>>>(scratch, db, c, chunks);
  return cudaGetLastError();
}

}  // namespace ht::cuda
