// Fused softmax cross-entropy over the last dimension. The full softmax is
// never stored: forward keeps log-sum-exp per row, backward recomputes. The
// vocabulary-parallel pieces (shard forward, sharded backward) let each
// tensor-parallel rank keep only its columns of the logits.
//
// logits and dlogits share one compute dtype, f32, f16 or bf16; losses, lse
// and target_logit are f32 in every case; targets are i32
// (ht/ops/compute_dtype.h).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"
#include "ht/ops/vocab_shard.h"

namespace ht::ops {

/// logits (N, V), targets (N) i32 in [0, V) -> losses (N) = lse - logit[target],
/// lse (N). A target outside [0, V) throws kOutOfRange.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse);
/// Per-row statistics of a vocabulary shard of the logits, for a cross-entropy whose full-vocabulary
/// logits are never gathered: lse (N) = log-sum-exp over this shard's columns; target_logit (N) =
/// logits[i, target_i - shard.start] when the target lies in the shard, else 0. Targets are validated
/// against the full vocabulary [0, shard.size).
///
/// logits (N, V_local) are columns [shard.start, shard.start + V_local);
/// the caller combines over shards: global lse = logsumexp_r(lse_r), loss_i =
/// global lse - sum_r target_logit_r. An empty shard (V_local 0) gives lse
/// -inf, the identity of that log-sum-exp. A target outside [0, shard.size)
/// throws kOutOfRange, a shard outside the vocabulary kInvalidArgument.
void cross_entropy_shard_forward(const Tensor& logits, const Tensor& targets, VocabShard shard, Tensor& lse,
                                 Tensor& target_logit);
/// dlogits = (softmax(logits) - onehot(target)) * dloss, where dloss is the
/// gradient of the total loss with respect to each row's loss (1/N for a mean).
/// `dlogits` may alias `logits`.
///
/// With a shard, logits (N, V_local) are columns [shard.start, shard.start +
/// V_local) of the full vocabulary, `lse` must be the GLOBAL log-sum-exp of
/// each row (over all shards), and the one-hot term applies only where the
/// target lies in the shard; the shards' dlogits, side by side, are the
/// unsharded dlogits. Targets are checked against [0, shard.size).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard = {});

}  // namespace ht::ops
