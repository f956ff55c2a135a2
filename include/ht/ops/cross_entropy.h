// Fused softmax cross-entropy over the last dimension. The full softmax is
// never stored: forward keeps log-sum-exp per row, backward recomputes. The
// vocabulary-parallel pieces (shard forward, sharded backward) let each
// tensor-parallel rank keep only its columns of the logits.
//
// logits and dlogits share one compute dtype, f32, f16 or bf16; losses, lse
// and target_logit are f32 in every case; targets are i32
// (ht/ops/compute_dtype.h).
#pragma once

#include <cstdint>
#include <optional>

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"
#include "ht/ops/vocab_shard.h"

namespace ht::ops {

/// As PyTorch's cross_entropy arguments of the same names.
struct CrossEntropyOptions {
  /// Rows whose target is this id count for nothing: loss 0 and a zero
  /// gradient (their lse is still written). Any other target outside
  /// [0, V) is an error, as without it.
  std::optional<std::int32_t> ignore_index;
  /// eps in [0, 1): the target distribution is (1 - eps) onehot + eps / V, so
  /// loss_i = lse - (1 - eps) logit[target] - eps mean_j logit_j, over the
  /// V real columns of the whole vocabulary.
  float label_smoothing = 0.f;
};

/// logits (N, V), targets (N) i32 in [0, V) -> losses (N) = lse - logit[target],
/// lse (N). A target outside [0, V) throws kOutOfRange (on CUDA: recorded,
/// see ops/index_errors.h).
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse,
                           const CrossEntropyOptions& options = {});
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
/// `dlogits` may alias `logits`. With options: ignored rows get zeros, and
/// label smoothing's target distribution replaces the one-hot (its eps / V
/// over the whole vocabulary's real columns, shard.size when sharded).
///
/// With a shard, logits (N, V_local) are columns [shard.start, shard.start +
/// V_local) of the full vocabulary, `lse` must be the GLOBAL log-sum-exp of
/// each row (over all shards), and the one-hot term applies only where the
/// target lies in the shard; the shards' dlogits, side by side, are the
/// unsharded dlogits. Targets are checked against [0, shard.size).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits, VocabShard shard = {}, const CrossEntropyOptions& options = {});

}  // namespace ht::ops
