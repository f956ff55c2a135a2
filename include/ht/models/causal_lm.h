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
#pragma once

#include <cstdint>
#include <vector>

#include "ht/core/rng.h"
#include "ht/nn/model.h"

namespace ht::models {

class CausalLM : public nn::Model {
 public:
  /// `width`: the activations' last dimension between pipeline stages.
  CausalLM(std::string name, const nn::Placement& placement, std::int64_t vocab_size, std::int64_t context,
           std::int64_t width);

  std::int64_t vocab_size() const { return vocab_; }
  std::int64_t context() const { return context_; }

  /// Mean cross-entropy of next-token prediction over the full vocabulary:
  /// input as forward takes it, targets (B, T) i32 on the model's device.
  float forward_loss(nn::Context& ctx, const Tensor& input, const Tensor& targets) override;
  Tensor backward_loss(nn::Context& ctx, float grad_scale = 1.f) override;
  /// (B, T, width) for tokens (B, T).
  Shape stage_input_shape(const Shape& input_shape) const override;

  /// Continues `prompt` (token ids) by `count` tokens sampled at `temperature`
  /// (0: greedy), using the last `context` tokens as the window. Needs the
  /// whole model in one process (tp 1, one stage).
  std::vector<std::int32_t> generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                     Rng& rng);

 protected:
  /// The stage's modules, as the derived model built them: the embedding
  /// (first stage, else null), its blocks in order, the final norm and the
  /// head (last stage, else null). forward runs them in that order.
  void set_stage(nn::Module* embedding, std::vector<nn::Module*> blocks, nn::Module* norm, nn::Module* head);
  Tensor forward_impl(nn::Context& ctx, const Tensor& input) override;
  Tensor backward_impl(nn::Context& ctx, const Tensor& dy) override;

 private:
  /// Checks tokens (B, T) i32 within the context, or the previous stage's
  /// activations (B, T, width); names the model.
  void check_input(const Tensor& input) const;
  /// The full-vocabulary mean loss from this rank's vocabulary shard of the
  /// logits; leaves the global log-sum-exp per row in `lse`.
  float vocab_parallel_loss(const Tensor& logits2, const Tensor& targets1, Tensor& lse);

  std::int64_t vocab_, context_, width_;
  nn::Module* embedding_ = nullptr;
  std::vector<nn::Module*> blocks_;
  nn::Module* norm_ = nullptr;
  nn::Module* head_ = nullptr;
};

/// "{1,2,3,6}": the divisors of n, for messages that name the valid choices.
std::string divisors_list(std::int64_t n);

}  // namespace ht::models
