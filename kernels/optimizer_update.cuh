// Per-element AdamW and SGD updates, shared by the CPU and CUDA drivers.
// Hyper-parameters arrive pre-digested (bias corrections folded in) so the
// per-element work is the same on both.
#pragma once

#include <cmath>

#include "ht/core/macros.h"

namespace ht::kern {

struct AdamWCoeffs {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias_correction1;       // 1 - beta1^t
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

/// torch.optim.AdamW order of operations:
///   p *= 1 - lr * wd ; m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2
///   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
HT_HD void adamw_element(float& p, float g, float& m, float& v, const AdamWCoeffs& c) {
  g *= c.grad_scale;
  p *= 1.f - c.lr * c.weight_decay;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  const float denom = sqrtf(v) / c.bias_correction2_sqrt + c.eps;
  p -= (c.lr / c.bias_correction1) * (m / denom);
}

struct SgdCoeffs {
  float lr, momentum, weight_decay, grad_scale;
  bool nesterov, first_step;
};

/// torch.optim.SGD with dampening 0. `buf` is ignored when momentum is 0.
HT_HD void sgd_element(float& p, float g, float* buf, const SgdCoeffs& c) {
  g = g * c.grad_scale + c.weight_decay * p;
  if (c.momentum != 0.f) {
    const float b = c.first_step ? g : c.momentum * *buf + g;
    *buf = b;
    g = c.nesterov ? g + c.momentum * b : b;
  }
  p -= c.lr * g;
}

}  // namespace ht::kern
