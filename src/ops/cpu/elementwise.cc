// Host element-wise ops: OpenMP loops over the shared bodies in kernels/.
#include <algorithm>

#include "gelu.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/column_blocks.h"

namespace ht::ops::cpu {

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void scale(Tensor& x, float s) {
  float* p = x.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) p[i] *= s;
}

void bias_add(Tensor& y, const Tensor& bias) {
  const std::int64_t c = bias.numel(), rows = c ? y.numel() / c : 0;
  float* py = y.data<float>();
  const float* pb = bias.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = py + r * c;
#pragma omp simd
    for (std::int64_t j = 0; j < c; ++j) row[j] += pb[j];
  }
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  const std::int64_t c = dbias.numel(), rows = c ? dy.numel() / c : 0;
  const float* pdy = dy.data<float>();
  float* pdb = dbias.data<float>();
  // Each thread owns a block of columns and walks every row in order: the sum
  // order is fixed, so the result does not depend on the thread count.
  for_column_blocks(c, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = pdy + r * c;
      for (std::int64_t j = j0; j < j1; ++j) pdb[j] += row[j];
    }
  });
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) py[i] = kern::gelu(px[i]);
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) pdx[i] = kern::gelu_grad(px[i], pdy[i]);
}

}  // namespace ht::ops::cpu
