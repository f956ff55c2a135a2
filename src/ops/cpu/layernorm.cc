// Host LayerNorm: rows in parallel; backward adds the weight/bias gradients
// by row chunks (column_sums_by_row_chunks) so their summation order is fixed.
//
// The row sums (mean and variance forward, the two sums backward) run in
// kLanes interleaved accumulators added in a fixed order at the end: a
// single float accumulator is a serial chain of dependent adds that GCC may
// not reorder (no -ffast-math), so those loops ran scalar, one add per 4
// cycles. The result depends only on the row, not on the thread count.
#include <cmath>

#include "layernorm.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/column_blocks.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace {

constexpr int kLanes = 16;

float add_lanes(const float* lane) {
  float s = 0.f;
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

// mean and rstd of one row of c values.
HT_CPU_MULTIVERSION void row_stats(const float* row, std::int64_t c, float eps, float& mean, float& rstd) {
  float lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= c; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += row[j + k];
  for (int k = 0; j < c; ++j, ++k) lane[k] += row[j];
  const float m = add_lanes(lane) / float(c);
  float sq[kLanes] = {};
  j = 0;
  for (; j + kLanes <= c; j += kLanes)
    for (int k = 0; k < kLanes; ++k) sq[k] += (row[j + k] - m) * (row[j + k] - m);
  for (int k = 0; j < c; ++j, ++k) sq[k] += (row[j] - m) * (row[j] - m);
  mean = m;
  rstd = 1.f / std::sqrt(add_lanes(sq) / float(c) + eps);
}

// The backward's two row sums over j of g_j = dy_j w_j and g_j xhat_j.
HT_CPU_MULTIVERSION void row_grad_sums(const float* gr, const float* xr, const float* w, float m, float rs,
                                       std::int64_t c, float& sum_g, float& sum_gx) {
  float lg[kLanes] = {}, lgx[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= c; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float g = gr[j + k] * w[j + k];
      lg[k] += g;
      lgx[k] += g * (xr[j + k] - m) * rs;
    }
  for (int k = 0; j < c; ++j, ++k) {
    const float g = gr[j] * w[j];
    lg[k] += g;
    lgx[k] += g * (xr[j] - m) * rs;
  }
  sum_g = add_lanes(lg);
  sum_gx = add_lanes(lgx);
}

// One row's terms of the weight and bias gradients: dw += dy xhat, db += dy.
HT_CPU_MULTIVERSION void row_param_grads(const float* gr, const float* xr, float m, float rs, std::int64_t c,
                                         float* dw, float* db) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) {
    dw[j] += gr[j] * (xr[j] - m) * rs;
    db[j] += gr[j];
  }
}

// One row of dx (may alias gr).
HT_CPU_MULTIVERSION void row_dx(const float* gr, const float* xr, const float* w, float m, float rs, float mean_g,
                                float mean_gx, std::int64_t c, float* out) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) out[j] = kern::layernorm_dx(gr[j] * w[j], (xr[j] - m) * rs, mean_g, mean_gx, rs);
}

}  // namespace

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
    float m = 0.f, rs = 0.f;
    row_stats(row, c, eps, m, rs);
    float* out = py + i * c;
#pragma omp simd
    for (std::int64_t j = 0; j < c; ++j) out[j] = kern::layernorm_out(row[j], m, rs, pw[j], pb[j]);
    pm[i] = m;
    pr[i] = rs;
  }
}

// One pass over dy and x: each row's dx, and its terms of the weight and
// bias gradients added into its row chunk's partial sums
// (column_sums_by_row_chunks: a fixed order whatever the thread count).
// It was two passes, the gradients by column blocks first (each thread
// reading 64 columns of every row) because dx may alias dy: each row's
// terms are now taken before its dx overwrites it.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        Tensor& dx, Tensor& dw, Tensor& db) {
  const std::int64_t n = x.size(0), c = x.size(1);
  const float* pdy = dy.data<float>();
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pm = mean.data<float>();
  const float* pr = rstd.data<float>();
  float* pdx = dx.data<float>();
  float* out[] = {dw.data<float>(), db.data<float>()};
  column_sums_by_row_chunks(n, c, 2, out, [&](std::int64_t i, float* acc) {
    const float* xr = px + i * c;
    const float* gr = pdy + i * c;
    const float m = pm[i], rs = pr[i];
    row_param_grads(gr, xr, m, rs, c, acc, acc + c);
    float sum_g = 0.f, sum_gx = 0.f;
    row_grad_sums(gr, xr, pw, m, rs, c, sum_g, sum_gx);
    row_dx(gr, xr, pw, m, rs, sum_g / float(c), sum_gx / float(c), c, pdx + i * c);
  });
}

}  // namespace ht::ops::cpu
