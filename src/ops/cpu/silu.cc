// Host SiLU and SwiGLU: vector loops over kern::*_from_sigmoid (silu.cuh)
// with the logistic from vsigmoid, compiled for AVX2 and the baseline
// (HT_CPU_MULTIVERSION). SiLU runs in blocks of elements, SwiGLU by rows;
// both in parallel.
#include <algorithm>

#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"
#include "silu.cuh"

namespace ht::ops::cpu {
namespace {

constexpr std::int64_t kBlock = 1 << 14;  // elements per task, as GELU's

HT_CPU_MULTIVERSION void silu_forward_block(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = kern::silu_from_sigmoid(x[i], vsigmoid(x[i]));
}

HT_CPU_MULTIVERSION void silu_backward_block(const float* x, const float* dy, float* dx, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) dx[i] = kern::silu_grad_from_sigmoid(x[i], vsigmoid(x[i]), dy[i]);
}

// One row: gate gu[0, f), up gu[f, 2f).
HT_CPU_MULTIVERSION void swiglu_forward_row(const float* gu, float* out, std::int64_t f) {
#pragma omp simd
  for (std::int64_t j = 0; j < f; ++j) out[j] = kern::silu_from_sigmoid(gu[j], vsigmoid(gu[j])) * gu[f + j];
}

// dgu may alias gu: iteration j reads gu[j] and gu[f + j] before writing
// dgu[j] and dgu[f + j], and touches nothing else.
HT_CPU_MULTIVERSION void swiglu_backward_row(const float* dout, const float* gu, float* dgu, std::int64_t f) {
#pragma omp simd
  for (std::int64_t j = 0; j < f; ++j) {
    const float g = gu[j], u = gu[f + j];
    float dg, du;
    kern::swiglu_grad(g, u, vsigmoid(g), dout[j], dg, du);
    dgu[j] = dg;
    dgu[f + j] = du;
  }
}

}  // namespace

void silu_forward(const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const std::int64_t n = x.numel(), blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kBlock;
    silu_forward_block(px + begin, py + begin, std::min(kBlock, n - begin));
  }
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const std::int64_t n = x.numel(), blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kBlock;
    silu_backward_block(px + begin, pdy + begin, pdx + begin, std::min(kBlock, n - begin));
  }
}

void swiglu_forward(const Tensor& gate_up, Tensor& out) {
  const std::int64_t f = out.ndim() > 0 ? out.size(-1) : 0, rows = f ? out.numel() / f : 0;
  const float* pgu = gate_up.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) swiglu_forward_row(pgu + r * 2 * f, po + r * f, f);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& dgate_up) {
  const std::int64_t f = dout.ndim() > 0 ? dout.size(-1) : 0, rows = f ? dout.numel() / f : 0;
  const float* pdo = dout.data<float>();
  const float* pgu = gate_up.data<float>();
  float* pdgu = dgate_up.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) swiglu_backward_row(pdo + r * f, pgu + r * 2 * f, pdgu + r * 2 * f, f);
}

}  // namespace ht::ops::cpu
