// LayerNorm's per-element math, shared by the CPU and CUDA drivers. The row
// reductions (mean, variance, and the two backward sums) are the drivers' own:
// a loop on CPU, warp reductions on CUDA.
#pragma once

#include "ht/core/macros.h"

namespace ht::kern {

HT_HD float layernorm_out(float x, float mean, float rstd, float w, float b) { return (x - mean) * rstd * w + b; }

/// dx for one element, given the row sums over j of g_j = dy_j * w_j and of
/// g_j * xhat_j, each divided by C:
///   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
HT_HD float layernorm_dx(float g, float xhat, float mean_g, float mean_g_xhat, float rstd) {
  return rstd * (g - mean_g - xhat * mean_g_xhat);
}

}  // namespace ht::kern
