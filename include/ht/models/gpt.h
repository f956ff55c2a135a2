// ht::models::GPT: the GPT-2 architecture (pre-LayerNorm blocks, learned
// positions, output head tied to the token embedding), with configurable size.
//
// Built for one rank of a tp x pp layout (an nn::Placement): with a
// tensor-parallel group the layers are Megatron-split (attention heads, MLP,
// vocab-parallel embedding, head and cross-entropy); with a pipeline stage
// the model holds only that stage's contiguous blocks, the embedding on the
// first stage and the final norm, head and loss on the last (holding its own
// copy of the tied wte, declared in tied_weights()). Parameter names are the
// full model's on every layout ("h.5..." stays h.5 on whichever stage holds
// it).
//
// GPT-2 initialisation: N(0, 0.02) for matrices and embeddings, residual
// projections (c_proj) scaled by 1/sqrt(2 n_layer), zero biases, unit norm
// gains (the parameters' Inits; see nn/init.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/rng.h"
#include "ht/nn/block.h"
#include "ht/nn/embedding.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/lm_head.h"
#include "ht/models/causal_lm.h"
#include "ht/nn/model_spec.h"

namespace ht::models {

struct GPTConfig {
  std::int64_t vocab_size = 256;
  std::int64_t context = 256;  // maximum sequence length (positions)
  int n_layer = 6;
  int n_head = 6;
  std::int64_t n_embd = 384;
  /// The token embedding (and tied head) holds vocab_size rounded up to a
  /// multiple of this many rows (GPT-2: 128 gives 50304 for 50257); the
  /// extra ids are padding (see CausalLM). 1: no padding.
  std::int64_t vocab_multiple = 1;

  /// Throws kConfig naming the bad value and what would be valid.
  void validate() const;
  /// Also checks that the model splits over `tp` tensor-parallel ranks
  /// (n_head and padded_vocab_size() divisible) and `pp` stages (a block per stage).
  void validate_parallel(int tp, int pp) const;
  /// vocab_size rounded up to a multiple of vocab_multiple.
  std::int64_t padded_vocab_size() const;
  /// Parameter count as stored (the padded vocabulary's rows included), tied head counted once.
  std::int64_t num_parameters() const;
  /// Matmul FLOPs of one forward+backward per token (6N plus attention's
  /// 12 L T C), for MFU; N counts the real vocabulary only (the padding's
  /// work is not useful work).
  double flops_per_token(std::int64_t seq_len) const;
  /// The model's layers for planning (nn::ModelSpec) at sequence length
  /// `seq_len`, counted from what this library's layers keep and compute
  /// (src/models/model_specs.cc).
  nn::ModelSpec spec(std::int64_t seq_len) const;
  /// "L6 H6 C384 V256 T256", with " Vp50304" when the vocabulary is padded
  /// (a checkpoint of a padded model does not resume an unpadded one).
  std::string str() const;
  friend bool operator==(const GPTConfig&, const GPTConfig&) = default;
};

class GPT : public CausalLM {
 public:
  /// With placement.defer_storage each module's parameters are released as
  /// soon as it is built, so the model never holds all its values at once:
  /// whoever shards it (ZeRO-3) fills them from their initial values.
  /// Forward and backward need the values bound again. Throws kConfig when
  /// the config does not split over the placement's tp and stages, or the
  /// stage boundaries do not fit n_layer.
  explicit GPT(const GPTConfig& config, const nn::Placement& placement = {});

  const GPTConfig& config() const { return config_; }

  /// forward(ctx, input) takes tokens (B, T) i32 on the first stage and the
  /// previous stage's activations (B, T, C) elsewhere; it returns logits
  /// (B, T, vocab / tp) on the last stage and activations (B, T, C) elsewhere.
  /// backward(ctx, d) is its inverse (undefined result on the first stage).
  /// The stage's run, the loss and sampling are CausalLM's. The blocks are
  /// split over the stages by parallel::stage_range: at the placement's
  /// stage boundaries (nn::PipelineStage::boundaries, from
  /// EngineOptions::layout.stage_layers / --stage-layers) when it has them, else by
  /// count (the first n_layer % pp stages one more).

  /// wte on the first and last stages, when they differ.
  std::vector<nn::TiedWeight> tied_weights() const override;
  int num_layers() const override { return config_.n_layer; }
  /// "GPT L6 H6 C384 V256 T256".
  std::string describe() const override { return "GPT " + config_.str(); }
  double flops_per_token(const Shape& input_shape) const override;

  /// The embedding (first stage), this stage's i-th block, final norm and head (last stage).
  nn::Embedding& embedding();
  nn::Block& block(int i) { return *blocks_.at(std::size_t(i)); }
  int num_blocks() const { return int(blocks_.size()); }
  nn::LayerNorm& ln_f();
  nn::LMHead& head();

 private:
  GPTConfig config_;
  nn::Embedding* embedding_ = nullptr;
  std::vector<nn::Block*> blocks_;
  nn::LayerNorm* ln_f_ = nullptr;
  nn::LMHead* head_ = nullptr;
};

}  // namespace ht::models
