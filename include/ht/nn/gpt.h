// ht::nn::GPT: the GPT-2 architecture (pre-LayerNorm blocks, learned
// positions, output head tied to the token embedding), with configurable size.
//
// Built for one rank of a tp x pp layout: with a tensor-parallel group the
// layers are Megatron-split (attention heads, MLP, vocab-parallel embedding,
// head and cross-entropy); with a pipeline stage the model holds only that
// stage's contiguous blocks, the embedding on the first stage and the final
// norm, head and loss on the last (holding its own copy of the tied wte).
// Parameter names are the full model's on every layout ("h.5..." stays h.5
// on whichever stage holds it).
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
#include "ht/nn/tensor_parallel.h"

namespace ht::nn {

struct GPTConfig {
  std::int64_t vocab_size = 256;
  std::int64_t context = 256;  // maximum sequence length (positions)
  int n_layer = 6;
  int n_head = 6;
  std::int64_t n_embd = 384;

  /// Throws kConfig naming the bad value and what would be valid.
  void validate() const;
  /// Also checks that the model splits over `tp` tensor-parallel ranks
  /// (n_head and vocab_size divisible) and `pp` stages (a block per stage).
  void validate_parallel(int tp, int pp) const;
  /// Parameter count, tied head counted once.
  std::int64_t num_parameters() const;
  /// Matmul FLOPs of one forward+backward per token (6N plus attention's
  /// 12 L T C), for MFU.
  double flops_per_token(std::int64_t seq_len) const;
  /// "L6 H6 C384 V256 T256"
  std::string str() const;
  friend bool operator==(const GPTConfig&, const GPTConfig&) = default;
};

/// One stage of a pipeline of `size` stages.
struct PipelineStage {
  int rank = 0;
  int size = 1;
};

/// The blocks [first, second) of `stage` among `stages` for n_layer blocks:
/// contiguous, the first n_layer % stages stages holding one more.
std::pair<int, int> stage_blocks(int n_layer, int stage, int stages);

class GPT : public Module {
 public:
  /// With `defer_storage`, each module's parameters are released as soon as
  /// it is built, so the model never holds all its values at once: whoever
  /// shards it (ZeRO-3) fills them from initial_value(). Forward and backward
  /// need the values bound again.
  GPT(const GPTConfig& config, Device device, TensorParallel tp = {}, PipelineStage stage = {},
      bool defer_storage = false);

  const GPTConfig& config() const { return config_; }
  Device device() const { return device_; }

  /// GPT-2 initialisation: N(0, 0.02) for matrices and embeddings, residual
  /// projections (c_proj) scaled by 1/sqrt(2 n_layer), zero biases, unit norm
  /// gains. Each parameter draws from its own stream seeded by (seed, name),
  /// so values do not depend on the order or placement of parameters.
  void init_weights(std::uint64_t seed);
  /// The value init_weights gives `p` (this rank's tensor-parallel part), as
  /// a new host f32 tensor.
  Tensor initial_value(const Parameter& p, std::uint64_t seed) const;

  const PipelineStage& stage() const { return stage_; }
  bool first_stage() const { return stage_.rank == 0; }
  bool last_stage() const { return stage_.rank == stage_.size - 1; }
  const TensorParallel& tensor_parallel() const { return tp_; }

  /// forward(ctx, input) takes tokens (B, T) i32 on the first stage and the
  /// previous stage's activations (B, T, C) elsewhere; it returns logits
  /// (B, T, vocab / tp) on the last stage and activations (B, T, C) elsewhere.
  /// backward(ctx, d) is its inverse (undefined result on the first stage).

  /// Last stage only. Mean cross-entropy of next-token prediction over the
  /// full vocabulary: input as for forward, targets (B, T) i32 on the model's
  /// device. Saves what backward_loss needs in ctx.
  float forward_loss(Context& ctx, const Tensor& input, const Tensor& targets);
  /// Backward from the loss of the last forward_loss in ctx; the gradient of the
  /// mean loss is multiplied by `loss_scale` (1/k for k accumulation steps,
  /// the loss scale for fp16). Accumulates into parameter gradients and
  /// returns the gradient of the stage's input (undefined on the first stage).
  Tensor backward_loss(Context& ctx, float loss_scale = 1.f);

  /// Continues `prompt` (token ids) by `count` tokens sampled at `temperature`
  /// (0: greedy), using the last `context` tokens as the window.
  std::vector<std::int32_t> generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                     Rng& rng);

  /// The embedding (first stage), this stage's i-th block, final norm and head (last stage).
  Embedding& embedding();
  Block& block(int i) { return *blocks_.at(std::size_t(i)); }
  int num_blocks() const { return int(blocks_.size()); }
  LayerNorm& ln_f();
  LMHead& head();

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& input) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  /// The full-vocabulary mean loss from this rank's vocabulary shard of the
  /// logits; leaves the global log-sum-exp per row in `lse`.
  float vocab_parallel_loss(const Tensor& logits2, const Tensor& targets1, Tensor& lse);

  GPTConfig config_;
  Device device_;
  TensorParallel tp_;
  PipelineStage stage_;
  Embedding* embedding_ = nullptr;
  std::vector<Block*> blocks_;
  LayerNorm* ln_f_ = nullptr;
  LMHead* head_ = nullptr;
};

}  // namespace ht::nn
