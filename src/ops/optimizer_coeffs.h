// Private: hyper-parameters digested once on the host (bias corrections
// folded in) for the per-element updates in kernels/optimizer_update.cuh, so
// the CPU and CUDA drivers run the same arithmetic from the same inputs.
#pragma once

#include <cmath>

#include "ht/ops/optimizer_update.h"
#include "optimizer_update.cuh"

namespace ht::ops::detail {

inline kern::AdamWCoeffs adamw_coeffs(const AdamWHyper& h) {
  return {h.lr,
          h.beta1,
          h.beta2,
          h.eps,
          h.weight_decay,
          h.grad_scale,
          float(1.0 - std::pow(double(h.beta1), double(h.step))),
          float(std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step))))};
}

inline kern::SgdCoeffs sgd_coeffs(const SgdHyper& h) {
  return {h.lr, h.momentum, h.weight_decay, h.grad_scale, h.nesterov, h.first_step};
}

}  // namespace ht::ops::detail
