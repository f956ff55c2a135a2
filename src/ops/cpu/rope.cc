// Host RoPE: rows (batch entry, position) in parallel; within a row, each
// head's pairs as a vector loop over the half dimension.
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"
#include "rope.cuh"

namespace ht::ops::cpu {
namespace {

// One row of n_head heads: each head's pairs (x[i], x[i + half]) rotated by
// the position's table row cs ((cos, sin) per pair), sin multiplied by
// `sign`. y may alias x: iteration i of a head reads and writes its elements
// i and i + half only.
HT_CPU_MULTIVERSION void rotate_row(const float* x, const float* cs, float sign, float* y, std::int64_t n_head,
                                    std::int64_t half) {
  for (std::int64_t h = 0; h < n_head; ++h) {
    const float* xh = x + h * 2 * half;
    float* yh = y + h * 2 * half;
#pragma omp simd
    for (std::int64_t i = 0; i < half; ++i) {
      float y1, y2;
      kern::rope_rotate(xh[i], xh[i + half], cs[2 * i], sign * cs[2 * i + 1], y1, y2);
      yh[i] = y1;
      yh[i + half] = y2;
    }
  }
}

}  // namespace

void rope(const Tensor& x, const Tensor& table, int n_head, bool inverse, Tensor& y) {
  const std::int64_t t = x.size(1), rows = x.size(0) * t, c = x.size(2), d = c / n_head, half = d / 2;
  const float* px = x.data<float>();
  const float* pt = table.data<float>();
  float* py = y.data<float>();
  const float sign = inverse ? -1.f : 1.f;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* cs = pt + (r % t) * d;  // (half, 2) floats of position r % t
    rotate_row(px + r * c, cs, sign, py + r * c, n_head, half);
  }
}

}  // namespace ht::ops::cpu
