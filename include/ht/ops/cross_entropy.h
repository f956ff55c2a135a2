// Fused softmax cross-entropy over the last dimension. The full softmax is
// never stored: forward keeps log-sum-exp per row, backward recomputes.
#pragma once

#include "ht/core/tensor.h"

namespace ht::ops {

/// logits (N, V) f32, targets (N) i32 in [0, V) -> losses (N) = lse - logit[target],
/// lse (N). A target outside [0, V) throws kOutOfRange.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse);
/// dlogits = (softmax(logits) - onehot(target)) * dloss, where dloss is the
/// gradient of the total loss with respect to each row's loss (1/N for a mean).
/// `dlogits` may alias `logits`.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits);

}  // namespace ht::ops
