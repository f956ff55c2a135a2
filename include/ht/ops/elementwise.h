// Element-wise and broadcast ops: add, multiply (and its backward), scale,
// bias add (and the rows of a GEMM's C filled with the bias) and its
// gradient, GELU, and GELU's backward fused with the bias gradient of the
// layer before it.
// Outputs are overwritten, except gradients of parameters (bias_grad), which
// accumulate. Synchronous on CPU; on CUDA enqueued on the current stream.
// Every tensor of a call is f32, or all f16, or all bf16 (ht/ops/compute_dtype.h).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// out = a + b, all the same element count and dtype. `out` may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);
/// out = a * b element-wise, each product rounded once. `b` has a's shape, or
/// is 1-d with a's last dimension C and multiplies every row of a (..., C)
/// (broadcast over all leading dimensions, as bias_add adds). `out` has a's
/// shape; it may alias `a`, and `b` when b has a's shape. Any other shape of
/// b or out throws kShapeMismatch.
void mul(const Tensor& a, const Tensor& b, Tensor& out);
/// The gradients of out = mul(a, b) from dy (a's shape), overwritten (not
/// accumulated, unlike bias_grad); pass nullptr for one that is not needed
/// (both null: only the arguments are checked).
/// - *da (a's shape) = dy * b, b broadcast as in mul.
/// - *db (b's shape) = dy * a when b has a's shape. When b broadcasts, *db (C)
///   = the column sums over all rows of dy * a: each product exact in double,
///   summed in double in a fixed order (blocks of rows in order, then the
///   blocks in order: the same bits whatever the thread count, and the same
///   on CPU and CUDA), rounded once; 0 where a has no rows.
/// db is computed before da, so `da` may alias dy, a or b; `db` must not
/// overlap any other argument.
void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, Tensor* da, Tensor* db);
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
