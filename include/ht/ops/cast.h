// Precision ops: dtype casts, gradient unscaling fused with a finite check,
// and the sum of squares used by global-norm clipping.
#pragma once

#include "ht/core/tensor.h"

namespace ht::ops {

/// dst = src converted element-wise; any pair of f32, f16, bf16 (round to nearest even).
void cast(const Tensor& src, Tensor& dst);
/// x *= scale, in place (f32, f16 or bf16); sets found_nonfinite (one f32 on
/// x's device) to 1 if any result is Inf or NaN; it is never reset to 0 here, so
/// one flag can collect many tensors.
void scale_and_check_finite(Tensor& x, float scale, Tensor& found_nonfinite);
/// acc (one f32 on x's device) += sum of x^2 (x f32, f16 or bf16), accumulated
/// in a fixed order so the result is reproducible.
void sum_squares(const Tensor& x, Tensor& acc);

}  // namespace ht::ops
