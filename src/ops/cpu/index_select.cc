// Host gather and scatter-add along one dimension, over the (outer, size,
// inner) view of ops/axis.h. The indices are checked while they are read,
// before anything is written. The scatter-add owns blocks of dx by outer
// index and column block, and adds dout's rows in index order, so repeated
// indices accumulate in a fixed order without atomics.
#include <algorithm>
#include <cstring>

#include "ops/axis.h"
#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops::cpu {
namespace {

constexpr std::int64_t kScatterColumns = 256;  // columns per scatter task

void check_index(const char* op, const std::int32_t* idx, std::int64_t k, std::int64_t bound, int dim,
                 const char* name, const Shape& shape) {
  for (std::int64_t i = 0; i < k; ++i)
    if (idx[i] < 0 || idx[i] >= bound) detail::throw_bad_index(op, idx[i], i, bound, dim, name, shape);
}

}  // namespace

void index_select(const Tensor& x, int dim, const Tensor& index, Tensor& out) {
  const detail::AxisSplit s = detail::split_axis(x.shape(), dim);
  const std::int64_t k = index.numel();
  const std::int32_t* idx = index.data<std::int32_t>();
  check_index("index_select", idx, k, s.size, dim, "x", x.shape());
  const float* px = x.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < s.outer * k; ++row) {
    const std::int64_t o = row / k, src = idx[row % k];
    std::memcpy(po + row * s.inner, px + (o * s.size + src) * s.inner, std::size_t(s.inner) * sizeof(float));
  }
}

void index_select_backward(const Tensor& dout, int dim, const Tensor& index, Tensor& dx) {
  const detail::AxisSplit s = detail::split_axis(dx.shape(), dim);
  const std::int64_t k = index.numel();
  const std::int32_t* idx = index.data<std::int32_t>();
  check_index("index_select_backward", idx, k, s.size, dim, "dx", dx.shape());
  const float* pg = dout.data<float>();
  float* pdx = dx.data<float>();
  const std::int64_t blocks = std::max<std::int64_t>(1, (s.inner + kScatterColumns - 1) / kScatterColumns);
#pragma omp parallel for schedule(static)
  for (std::int64_t task = 0; task < s.outer * blocks; ++task) {
    const std::int64_t o = task / blocks, j0 = (task % blocks) * kScatterColumns, j1 = std::min(s.inner, j0 + kScatterColumns);
    float* d = pdx + o * s.size * s.inner;
    const float* g = pg + o * k * s.inner;
    for (std::int64_t m = 0; m < s.size; ++m) std::fill(d + m * s.inner + j0, d + m * s.inner + j1, 0.f);
    for (std::int64_t i = 0; i < k; ++i) {
      float* dst = d + std::int64_t(idx[i]) * s.inner;
      const float* src = g + i * s.inner;
#pragma omp simd
      for (std::int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace ht::ops::cpu
