// Mean-squared-error per-element math, shared by the CPU and CUDA drivers.
// The sum of the squared errors is each driver's own fixed-order reduction,
// in double on both.
#pragma once

#include "ht/core/macros.h"

namespace ht::kern {

/// One element's squared error, in double: the difference is exact there.
HT_HD double mse_term(float pred, float target) {
  const double d = double(pred) - double(target);
  return d * d;
}

/// dpred for one element, with coef = 2 * dloss / numel digested once on the host.
HT_HD float mse_grad(float pred, float target, float coef) { return coef * (pred - target); }

}  // namespace ht::kern
