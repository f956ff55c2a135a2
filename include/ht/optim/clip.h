// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <functional>
#include <vector>

#include "ht/core/tensor.h"

namespace ht::optim {

/// Sum of squares of all gradients, accumulated on their device in a fixed
/// order. `reduce`, if given, combines the (one-element, f32) partial sum across
/// ranks before the square root (a parallel wrapper passes an all-reduce).
float global_grad_norm(const std::vector<Tensor>& grads,
                       const std::function<void(Tensor&)>& reduce = nullptr);

/// Divides each of `grads` (every gradient this rank holds) by
/// `loss_scale`, fused with a check for Inf and NaN, then returns the
/// global norm of `counted` (each gradient element counted on exactly one
/// rank) with `reduce`. The sum of squares is accumulated on `device`, the
/// same on every rank whatever it counts (a DDP replica but the first
/// counts nothing), so that `reduce` takes the same path everywhere (NCCL
/// for device tensors, MPI for host ones). A rank that found a non-finite
/// gradient adds +Inf to its part of the sum of squares, so the one
/// reduction gives every rank a non-finite norm: an OR of the flags over
/// the ranks, and the step is skipped everywhere.
float unscale_and_global_norm(std::vector<Tensor> grads, const std::vector<Tensor>& counted, float loss_scale,
                              Device device, const std::function<void(Tensor&)>& reduce = nullptr);

/// The factor that clips a gradient of norm `norm` to at most `max_norm`:
/// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
float clip_coefficient(float norm, float max_norm);

}  // namespace ht::optim
