// Host RMSNorm: rows in parallel, each row's sums a vector loop (reduction in
// a fixed lane order); the weight gradient by column blocks, so its
// summation order is fixed whatever the thread count.
#include <cmath>

#include "ops/backend_ops.h"
#include "ops/cpu/column_blocks.h"
#include "ops/cpu/vec_math.h"
#include "rmsnorm.cuh"

namespace ht::ops::cpu {
namespace {

HT_CPU_MULTIVERSION float forward_row(const float* x, const float* w, float* y, std::int64_t c, float eps) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (std::int64_t j = 0; j < c; ++j) ss += x[j] * x[j];
  const float rs = 1.f / std::sqrt(ss / float(c) + eps);
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) y[j] = kern::rmsnorm_out(x[j], rs, w[j]);
  return rs;
}

HT_CPU_MULTIVERSION void input_grad_row(const float* dy, const float* x, const float* w, float rs, float* dx,
                                        std::int64_t c) {
  float sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_gx)
  for (std::int64_t j = 0; j < c; ++j) sum_gx += dy[j] * w[j] * kern::rmsnorm_xhat(x[j], rs);
  const float mean_gx = sum_gx / float(c);
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) dx[j] = kern::rmsnorm_dx(dy[j] * w[j], kern::rmsnorm_xhat(x[j], rs), mean_gx, rs);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps) {
  const std::int64_t n = x.size(0), c = x.size(1);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  float* py = y.data<float>();
  float* pr = rstd.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) pr[i] = forward_row(px + i * c, pw, py + i * c, c, eps);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
  const std::int64_t n = x.size(0), c = x.size(1);
  const float* pdy = dy.data<float>();
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pr = rstd.data<float>();
  float* pdx = dx.data<float>();
  float* pdw = dw.data<float>();
  // The weight gradient first: dx may alias dy.
  for_column_blocks(c, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* xr = px + i * c;
      const float* gr = pdy + i * c;
      const float rs = pr[i];
#pragma omp simd
      for (std::int64_t j = j0; j < j1; ++j) pdw[j] += gr[j] * kern::rmsnorm_xhat(xr[j], rs);
    }
  });
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) input_grad_row(pdy + i * c, px + i * c, pw, pr[i], pdx + i * c, c);
}

}  // namespace ht::ops::cpu
