// ht::nn::GPT: the GPT-2 architecture (pre-LayerNorm blocks, learned
// positions, output head tied to the token embedding), with configurable size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/rng.h"
#include "ht/nn/block.h"
#include "ht/nn/embedding.h"
#include "ht/nn/layer_norm.h"

namespace ht::nn {

struct GPTConfig {
  std::int64_t vocab_size = 256;
  std::int64_t context = 256;  // maximum sequence length (positions)
  int n_layer = 6;
  int n_head = 6;
  std::int64_t n_embd = 384;

  /// Throws kConfig naming the bad value and what would be valid.
  void validate() const;
  /// Parameter count, tied head counted once.
  std::int64_t num_parameters() const;
  /// Matmul FLOPs of one forward+backward per token (6N plus attention's
  /// 12 L T C), for MFU.
  double flops_per_token(std::int64_t seq_len) const;
  /// "L6 H6 C384 V256 T256"
  std::string str() const;
  friend bool operator==(const GPTConfig&, const GPTConfig&) = default;
};

class GPT : public Module {
 public:
  GPT(const GPTConfig& config, Device device);

  const GPTConfig& config() const { return config_; }
  Device device() const { return device_; }

  /// GPT-2 initialisation: N(0, 0.02) for matrices and embeddings, residual
  /// projections (c_proj) scaled by 1/sqrt(2 n_layer), zero biases, unit norm
  /// gains. Each parameter draws from its own stream seeded by (seed, name),
  /// so values do not depend on the order or placement of parameters.
  void init_weights(std::uint64_t seed);

  /// Mean cross-entropy of next-token prediction: tokens, targets (B, T) i32
  /// on the model's device. Saves what backward_loss needs in ctx.
  float forward_loss(Context& ctx, const Tensor& tokens, const Tensor& targets);
  /// Backward from the loss of the last forward_loss in ctx; the gradient of the
  /// mean loss is multiplied by `loss_scale` (1/k for k accumulation steps,
  /// the loss scale for fp16). Accumulates into parameter gradients.
  void backward_loss(Context& ctx, float loss_scale = 1.f);

  /// Continues `prompt` (token ids) by `count` tokens sampled at `temperature`
  /// (0: greedy), using the last `context` tokens as the window.
  std::vector<std::int32_t> generate(const std::vector<std::int32_t>& prompt, int count, float temperature,
                                     Rng& rng);

  Embedding& embedding() { return *embedding_; }
  Block& block(int i) { return *blocks_.at(std::size_t(i)); }
  LayerNorm& ln_f() { return *ln_f_; }

 protected:
  /// tokens (B, T) -> logits (B, T, vocab).
  Tensor forward_impl(Context& ctx, const Tensor& tokens) override;
  /// dlogits (B, T, vocab) -> undefined (tokens have no gradient).
  Tensor backward_impl(Context& ctx, const Tensor& dlogits) override;

 private:
  GPTConfig config_;
  Device device_;
  Embedding* embedding_;
  std::vector<Block*> blocks_;
  LayerNorm* ln_f_;
};

}  // namespace ht::nn
