// RMSNorm over the last dimension (Llama's normalisation: no mean
// subtraction, no bias), with the saved per-row statistic. x, y, weight, dy,
// dx and dweight share one compute dtype, f32, f16 or bf16; rstd is f32 in
// every case (ht/ops/compute_dtype.h). Synchronous on CPU; on CUDA enqueued
// on the current stream.
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// x (N, C), C >= 1 -> y (N, C) = x * rstd * weight, with rstd (N) f32 =
/// 1 / sqrt(mean over the row of x^2 + eps), saved for backward. eps > 0.
/// `y` may alias `x`.
void rmsnorm_forward(const Tensor& x, const Tensor& weight, Tensor& y, Tensor& rstd, float eps = 1e-5f);
/// dx (N, C) overwritten (it may alias dy); dweight (C) accumulates the
/// column sums of dy * x * rstd, each column added in row order, so the
/// result does not depend on the thread count.
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight);

}  // namespace ht::ops
