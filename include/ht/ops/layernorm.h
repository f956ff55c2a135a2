// LayerNorm over the last dimension, with saved per-row statistics. x, y,
// weight, bias, dy, dx, dweight and dbias share one compute dtype, f32, f16
// or bf16; mean and rstd are f32 in every case (ht/ops/compute_dtype.h).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// x (N, C) -> y (N, C); mean and rstd (N) f32 are saved for backward.
void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps = 1e-5f);
/// dx (N, C) overwritten; dweight, dbias (C) accumulate.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias);

}  // namespace ht::ops
