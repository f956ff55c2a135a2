// Host softmax and log-softmax over the last dimension, one row per
// iteration in parallel, each row's reductions in a fixed order (results do
// not depend on the thread count).
#include <cmath>

#include "ops/backend_ops.h"

namespace ht::ops::cpu {

void softmax_forward(const Tensor& x, Tensor& y, bool log) {
  const std::int64_t v = x.size(-1), rows = v ? x.numel() / v : 0;
  const float* px = x.data<float>();
  float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (rows * v > (1 << 14))
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* in = px + r * v;
    float* out = py + r * v;
    float mx = -INFINITY;
    for (std::int64_t j = 0; j < v; ++j) mx = std::fmax(mx, in[j]);
    double sum = 0;
    for (std::int64_t j = 0; j < v; ++j) sum += std::exp(double(in[j]) - mx);
    if (log) {
      const float lse = float(double(mx) + std::log(sum));
      for (std::int64_t j = 0; j < v; ++j) out[j] = in[j] - lse;
    } else {
      for (std::int64_t j = 0; j < v; ++j) out[j] = float(std::exp(double(in[j]) - mx) / sum);
    }
  }
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  const std::int64_t v = y.size(-1), rows = v ? y.numel() / v : 0;
  const float* py = y.data<float>();
  const float* pd = dy.data<float>();
  float* pdx = dx.data<float>();
#pragma omp parallel for schedule(static) if (rows * v > (1 << 14))
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* yr = py + r * v;
    const float* g = pd + r * v;
    float* out = pdx + r * v;
    double dot = 0;  // softmax: sum(dy y); log-softmax: sum(dy)
    for (std::int64_t j = 0; j < v; ++j) dot += log ? double(g[j]) : double(g[j]) * yr[j];
    for (std::int64_t j = 0; j < v; ++j)
      out[j] = log ? float(g[j] - std::exp(double(yr[j])) * dot) : float(yr[j] * (g[j] - dot));
  }
}

}  // namespace ht::ops::cpu
