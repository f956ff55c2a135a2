// ht::nn::DecoderBlock: one pre-LayerNorm transformer decoder block of an
// encoder-decoder (the original Transformer's, pre-norm as GPT-2's):
//   h = x + dropout(self_attn(ln_1(x)))                 causal self-attention
//   g = h + dropout(cross_attn(ln_2(h), memory))        over the encoder's memory
//   y = g + dropout(mlp(ln_3(g)))                       GELU MLP
// Forward-only, of two inputs: block(x, {memory}). The self-attention reads
// the target's padding mask and the cross-attention the memory's, each by
// the side-input name its config gives ("key_mask" and "memory_mask" by
// default), so the two coexist. With tensor parallelism the heads and the
// MLP's hidden units split over the group; a unit ZeRO-3 gathers and frees
// as a whole, and one full recomputation recomputes (memory included).
#pragma once

#include "ht/nn/cross_attention.h"
#include "ht/nn/dropout.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/mlp.h"
#include "ht/nn/self_attention.h"

namespace ht::nn {

struct DecoderBlockConfig {
  std::int64_t dim = 0;         // model width
  std::int64_t memory_dim = 0;  // the encoder memory's width (0: dim)
  int n_head = 1;               // attention heads (dividing dim)
  std::int64_t hidden = 0;      // the MLP's hidden units (0: 4 dim)
  float dropout = 0.f;          // after each of the three branches (0: none)
  bool bias = true;             // biases on the attentions' projections
  std::string key_mask = "key_mask";        // the target's padding mask (the self-attention's keys)
  std::string memory_mask = "memory_mask";  // the memory's padding mask (the cross-attention's keys)
};

class DecoderBlock : public Module {
 public:
  /// Throws kConfig naming the value when a size does not fit.
  DecoderBlock(std::string name, const DecoderBlockConfig& config, Device device, TensorParallel tp = {});

  SelfAttention& self_attn() { return self_attn_; }
  CrossAttention& cross_attn() { return cross_attn_; }

 protected:
  /// x (B, T, dim), more = {memory (B, S, memory_dim)} -> (B, T, dim).
  Var compute_with(const Var& x, const std::vector<Var>& more) override;

 private:
  LayerNorm& ln_1_;
  SelfAttention& self_attn_;
  LayerNorm& ln_2_;
  CrossAttention& cross_attn_;
  LayerNorm& ln_3_;
  MLP& mlp_;
  Dropout* drop_[3] = {nullptr, nullptr, nullptr};  // null without dropout
};

}  // namespace ht::nn
