// GELU, tanh approximation (GPT-2's), forward and derivative: the one body
// used by the CPU loop (src/ops/cpu/gelu.cc) and the CUDA kernel (gelu.cu).
#pragma once

#include <cmath>

#include "ht/core/macros.h"

namespace ht::kern {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

HT_HD float gelu(float x) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.f + tanhf(inner));
}

/// d gelu(x) / dx * dy.
HT_HD float gelu_grad(float x, float dy) {
  const float x2 = x * x;
  const float inner = kGeluScale * (x + kGeluCubic * x2 * x);
  const float t = tanhf(inner);
  const float sech2 = 1.f - t * t;
  const float dinner = kGeluScale * (1.f + 3.f * kGeluCubic * x2);
  return dy * (0.5f * (1.f + t) + 0.5f * x * sech2 * dinner);
}

}  // namespace ht::kern
