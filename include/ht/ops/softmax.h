// Softmax and log-softmax over the last dimension, with their backward.
// Every tensor of a call is f32, or all f16, or all bf16 (computed in f32;
// ht/ops/compute_dtype.h). Synchronous on CPU; on CUDA enqueued on the
// current stream.
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// y = softmax(x) over the last dimension, or log_softmax when `log`; y of
/// x's shape, may alias x. A row of -inf gives NaN, as PyTorch.
void softmax_forward(const Tensor& x, Tensor& y, bool log = false);
/// dx from y (the forward's output) and dy: softmax: y (dy - sum(dy y));
/// log-softmax: dy - exp(y) sum(dy). dx may alias dy.
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log = false);

}  // namespace ht::ops
