// Element-wise and broadcast ops: add, scale, bias add (and the rows of a
// GEMM's C filled with the bias) and its gradient, GELU, and GELU's backward
// fused with the bias gradient of the layer before it.
// Outputs are overwritten, except gradients of parameters (bias_grad), which
// accumulate. Synchronous on CPU; on CUDA enqueued on the current stream.
// Every tensor of a call is f32, or all f16, or all bf16 (ht/ops/compute_dtype.h).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// out = a + b, all the same element count and dtype. `out` may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);
/// x *= s.
void scale(Tensor& x, float s);
/// y (rows, C) += bias (C), broadcast over rows.
void bias_add(Tensor& y, const Tensor& bias);
/// y (rows, C) = bias (C) in every row: a GEMM's C before it adds x W^T with
/// beta 1, which saves the GEMM's own pass zeroing C (OpenBLAS makes one for
/// beta 0) and the bias_add pass after it.
void bias_fill(Tensor& y, const Tensor& bias);
/// dbias (C) += column sums of dy (rows, C).
void bias_grad(const Tensor& dy, Tensor& dbias);
/// y = gelu(x), tanh approximation (GPT-2's). `y` may alias `x`.
void gelu_forward(const Tensor& x, Tensor& y);
/// dx = gelu'(x) * dy. `dx` may alias `dy`.
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

/// GELU's backward with the bias gradient of the layer before it folded in:
/// dx = gelu'(x) * dy (x, dy, dx (rows, C)), and dbias (C) += column sums of
/// dx, summed in the same order as bias_grad (same bits, whatever the thread
/// count). `dx` may alias `dy`.
void gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dbias);

}  // namespace ht::ops
