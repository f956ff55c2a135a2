// Host LayerNorm: rows in parallel; the weight/bias gradients by column
// blocks so their summation order is fixed.
#include <cmath>

#include "layernorm.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/column_blocks.h"

namespace ht::ops::cpu {

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean, Tensor& rstd,
                       float eps) {
  const std::int64_t n = x.size(0), c = x.size(1);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  float* pm = mean.data<float>();
  float* pr = rstd.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = px + i * c;
    float sum = 0.f;
    for (std::int64_t j = 0; j < c; ++j) sum += row[j];
    const float m = sum / float(c);
    float var = 0.f;
    for (std::int64_t j = 0; j < c; ++j) var += (row[j] - m) * (row[j] - m);
    const float rs = 1.f / std::sqrt(var / float(c) + eps);
    float* out = py + i * c;
#pragma omp simd
    for (std::int64_t j = 0; j < c; ++j) out[j] = kern::layernorm_out(row[j], m, rs, pw[j], pb[j]);
    pm[i] = m;
    pr[i] = rs;
  }
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        Tensor& dx, Tensor& dw, Tensor& db) {
  const std::int64_t n = x.size(0), c = x.size(1);
  const float* pdy = dy.data<float>();
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pm = mean.data<float>();
  const float* pr = rstd.data<float>();
  float* pdx = dx.data<float>();
  float* pdw = dw.data<float>();
  float* pdb = db.data<float>();
  // Parameter gradients first: dx may alias dy.
  for_column_blocks(c, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* xr = px + i * c;
      const float* gr = pdy + i * c;
      for (std::int64_t j = j0; j < j1; ++j) {
        pdw[j] += gr[j] * (xr[j] - pm[i]) * pr[i];
        pdb[j] += gr[j];
      }
    }
  });
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* xr = px + i * c;
    const float* gr = pdy + i * c;
    const float m = pm[i], rs = pr[i];
    float sum_g = 0.f, sum_gx = 0.f;
    for (std::int64_t j = 0; j < c; ++j) {
      const float g = gr[j] * pw[j];
      sum_g += g;
      sum_gx += g * (xr[j] - m) * rs;
    }
    const float mean_g = sum_g / float(c), mean_gx = sum_gx / float(c);
    float* out = pdx + i * c;
    for (std::int64_t j = 0; j < c; ++j)
      out[j] = kern::layernorm_dx(gr[j] * pw[j], (xr[j] - m) * rs, mean_g, mean_gx, rs);
  }
}

}  // namespace ht::ops::cpu
