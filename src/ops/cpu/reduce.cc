// Host sum/mean along one dimension, over the (outer, size, inner) view of
// ops/axis.h. Sums are in double. Reducing the last dimension (inner 1) is a
// vector reduction per output (a fixed lane order); otherwise each task owns
// a block of kColumns outputs of one outer index and adds the size rows in
// order into double accumulators, a vector loop over the block. Either way
// the order depends only on the shape, never on the thread count.
#include <algorithm>

#include "ops/axis.h"
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"
#include "reduce.cuh"

namespace ht::ops::cpu {
namespace {

constexpr std::int64_t kColumns = 256;  // outputs per task when inner > 1: 2 KiB of double accumulators

HT_CPU_MULTIVERSION double sum_row(const float* x, std::int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t k = 0; k < n; ++k) s += double(x[k]);
  return s;
}

// acc[0, width) += rows (size of them, stride `inner`) of x, in row order.
HT_CPU_MULTIVERSION void sum_rows(const float* x, std::int64_t size, std::int64_t inner, std::int64_t width,
                                  double* acc) {
  for (std::int64_t k = 0; k < size; ++k) {
    const float* row = x + k * inner;
#pragma omp simd
    for (std::int64_t j = 0; j < width; ++j) acc[j] += double(row[j]);
  }
}

}  // namespace

void reduce(const Tensor& x, int dim, Reduction r, Tensor& out) {
  const detail::AxisSplit s = detail::split_axis(x.shape(), dim);
  const bool mean = r == Reduction::kMean;
  const float* px = x.data<float>();
  float* po = out.data<float>();
  if (s.inner == 1) {
#pragma omp parallel for schedule(static)
    for (std::int64_t o = 0; o < s.outer; ++o) po[o] = kern::reduce_finish(sum_row(px + o * s.size, s.size), s.size, mean);
    return;
  }
  const std::int64_t blocks = (s.inner + kColumns - 1) / kColumns;
#pragma omp parallel for schedule(static)
  for (std::int64_t task = 0; task < s.outer * blocks; ++task) {
    const std::int64_t o = task / blocks, j0 = (task % blocks) * kColumns, width = std::min(kColumns, s.inner - j0);
    double acc[kColumns] = {};
    sum_rows(px + o * s.size * s.inner + j0, s.size, s.inner, width, acc);
    float* dst = po + o * s.inner + j0;
    for (std::int64_t j = 0; j < width; ++j) dst[j] = kern::reduce_finish(acc[j], s.size, mean);
  }
}

void reduce_backward(const Tensor& dout, int dim, Reduction r, Tensor& dx) {
  const detail::AxisSplit s = detail::split_axis(dx.shape(), dim);
  const bool mean = r == Reduction::kMean;
  const float* pg = dout.data<float>();
  float* pdx = dx.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < s.outer * s.size; ++row) {
    const float* g = pg + (row / s.size) * s.inner;
    float* d = pdx + row * s.inner;
#pragma omp simd
    for (std::int64_t j = 0; j < s.inner; ++j) d[j] = kern::reduce_grad(g[j], s.size, mean);
  }
}

}  // namespace ht::ops::cpu
