// ht::models::CausalLM: what every next-token language model shares — a
// stage's run through embedding, blocks, final norm and head, the loss and
// its backward, the activation shape between pipeline stages, and sampling —
// so GPT and Llama only build their layers.
//
// The last stage's forward returns logits (B, T, vocab / tp): under tensor
// parallelism each rank holds its vocabulary rows only (a vocab-parallel
// head), and the loss is computed without gathering logits: each rank
// reduces its columns to (log-sum-exp, target logit) per row and one
// all-gather of those 2N numbers gives every rank the full softmax.
//
// A padded vocabulary (padded_vocab_size() > vocab_size(), e.g. GPT-2's
// 50257 ids in 50304 rows, a multiple of 128, so that the head's GEMMs get
// aligned leading dimensions): the embedding and head matrices have
// padded_vocab_size() rows, the logits as many columns (per rank: padded /
// tp, so tp must divide the padded size), and the ids from vocab_size() on
// are padding: left out of the loss's softmax (their gradient is zero, so
// their rows stay at their initial zero), never sampled by generate().
#pragma once

#include <cstdint>
#include <vector>

#include "ht/core/rng.h"
#include "ht/nn/model.h"
#include "ht/ops/vocab_shard.h"

namespace ht::models {

class CausalLM : public nn::Model {
 public:
  /// `width`: the activations' last dimension between pipeline stages;
  /// `padded_vocab` the rows of the vocabulary matrices (0: vocab_size).
  CausalLM(std::string name, const nn::Placement& placement, std::int64_t vocab_size, std::int64_t context,
           std::int64_t width, std::int64_t padded_vocab = 0);

  /// The real vocabulary: token ids [0, vocab_size()).
  std::int64_t vocab_size() const { return vocab_; }
  /// The rows of the embedding and head matrices (vocab_size() unless padded).
  std::int64_t padded_vocab_size() const { return padded_vocab_; }
  std::int64_t context() const { return context_; }

  /// Mean cross-entropy of next-token prediction over the full vocabulary:
  /// input as forward takes it, targets (B, T) i32 on the model's device.
  nn::LossValue forward_loss(nn::Context& ctx, const Tensor& input, const Tensor& targets) override;
  Tensor backward_loss(nn::Context& ctx, float grad_scale = 1.f) override;
  /// (B, T, width) for tokens (B, T).
  Shape stage_input_shape(const Shape& input_shape) const override;
  /// Token ids of the input and the targets (i32 host tensors) must lie in
  /// [0, vocab_size()): a padding row is never a token. Tensors elsewhere
  /// than on the host are left to the ops.
  void check_batch(const Tensor& input, const Tensor& target) const override;

  /// kFull recomputes each of the stage's blocks (each keeps only its
  /// input; the embedding, final norm and head recompute nothing);
  /// kSelective and kNone go to every module (the blocks' attention acts on
  /// kSelective).
  void set_recompute(nn::Recompute mode) override;
  /// Positions (learned or rotary) by global index and attention across the
  /// group: the derived models build their layers with the placement's cp.
  bool supports_context_parallel() const override { return true; }

  /// Continues `prompt` (token ids) by `count` tokens sampled at `temperature`
  /// (0: greedy), using the last `context` tokens as the window; padding ids
  /// are never chosen. Needs the whole model in one process (tp 1, one stage).
  std::vector<std::int32_t> generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                     Rng& rng);

 protected:
  /// The stage's modules, as the derived model built them: the embedding
  /// (first stage, else null), its blocks in order, the final norm and the
  /// head (last stage, else null). forward runs them in that order.
  void set_stage(nn::Module* embedding, std::vector<nn::Module*> blocks, nn::Module* norm, nn::Module* head);
  /// The whole sequence's length of a batch whose rank-local shape is
  /// `input_shape` (every cp rank holds 1/cp of it; the context when the
  /// shape says nothing): attention's work per token grows with it.
  std::int64_t sequence_length(const Shape& input_shape) const;
  Tensor forward_impl(nn::Context& ctx, const Tensor& input) override;
  Tensor backward_impl(nn::Context& ctx, const Tensor& dy) override;

 private:
  /// Checks tokens (B, T) i32 within the context, or the previous stage's
  /// activations (B, T, width); names the model.
  void check_input(const Tensor& input) const;
  /// The full-vocabulary mean loss from this rank's vocabulary shard of the
  /// logits; leaves the global log-sum-exp per row in `lse`.
  float vocab_parallel_loss(const Tensor& logits2, const Tensor& targets1, Tensor& lse);
  /// This rank's columns of the logits as a vocabulary shard, padding
  /// included; unsharded ({}) with tp 1 and no padding.
  ops::VocabShard logits_shard() const;

  std::int64_t vocab_, padded_vocab_, context_, width_;
  nn::Module* embedding_ = nullptr;
  std::vector<nn::Module*> blocks_;
  nn::Module* norm_ = nullptr;
  nn::Module* head_ = nullptr;
};

/// "{1,2,3,6}": the divisors of n, for messages that name the valid choices.
std::string divisors_list(std::int64_t n);

}  // namespace ht::models
