// SiLU and SwiGLU per-element math, shared by the CPU and CUDA drivers. The
// bodies take the logistic s = sigmoid(x) as an argument: the CPU driver
// computes it with its vectorisable exp (vsigmoid, src/ops/cpu/vec_math.h;
// a scalar expf call would keep the loop scalar), the CUDA kernels with
// kern::sigmoid below. The two agree to an ulp or two.
#pragma once

#include <cmath>

#include "ht/core/macros.h"

namespace ht::kern {

HT_HD float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

/// silu(x) = x * sigmoid(x), given s = sigmoid(x).
HT_HD float silu_from_sigmoid(float x, float s) { return x * s; }

/// d silu(x) / dx * dy = dy * (s + x s (1 - s)) = dy * s * (1 + x (1 - s)), given s = sigmoid(x).
HT_HD float silu_grad_from_sigmoid(float x, float s, float dy) { return dy * s * (1.f + x * (1.f - s)); }

/// SwiGLU backward for one (gate, up) pair of out = silu(gate) * up, given s = sigmoid(gate).
HT_HD void swiglu_grad(float gate, float up, float s, float dout, float& dgate, float& dup) {
  dgate = silu_grad_from_sigmoid(gate, s, dout * up);
  dup = dout * silu_from_sigmoid(gate, s);
}

}  // namespace ht::kern
