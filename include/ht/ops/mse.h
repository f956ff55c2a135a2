// Mean-squared-error loss, forward and backward, for users' regression
// models. pred, target and dpred share one compute dtype, f32, f16 or bf16
// (ht/ops/compute_dtype.h); the loss is f32. Synchronous on CPU; on CUDA
// enqueued on the current stream (the loss stays on the device).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// loss (one f32 element, on pred's device) = mean over all elements of
/// (pred - target)^2; pred and target of one shape with at least one element
/// (an empty mean throws kInvalidArgument). Summed in double in a fixed
/// order: the same bits whatever the thread count.
void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss);
/// dpred = 2 (pred - target) / numel * dloss, overwritten; dloss is the
/// gradient of the total loss with respect to this one (1 when it is the
/// whole loss). `dpred` may alias `pred`.
void mse_backward(const Tensor& pred, const Tensor& target, float dloss, Tensor& dpred);

}  // namespace ht::ops
