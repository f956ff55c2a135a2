// RMSNorm's per-element math, shared by the CPU and CUDA drivers. The row
// reductions (the mean square, and backward's sum of g * xhat) are the
// drivers' own: a vector loop on CPU, warp reductions on CUDA.
#pragma once

#include "ht/core/macros.h"

namespace ht::kern {

/// The normalised input x * rstd, the "xhat" of the formulas below.
HT_HD float rmsnorm_xhat(float x, float rstd) { return x * rstd; }

HT_HD float rmsnorm_out(float x, float rstd, float w) { return rmsnorm_xhat(x, rstd) * w; }

/// dx for one element, given mean_g_xhat = (1/C) sum over j of g_j * xhat_j,
/// with g = dy * w:
///   y = x r w with r = (mean(x^2) + eps)^-1/2, dr/dx_k = -r^3 x_k / C, so
///   dx = r g - x r^3 mean(g x) = r (g - xhat mean(g xhat))
HT_HD float rmsnorm_dx(float g, float xhat, float mean_g_xhat, float rstd) {
  return rstd * (g - xhat * mean_g_xhat);
}

}  // namespace ht::kern
