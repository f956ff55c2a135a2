// ht::nn::EncoderBlock: one pre-LayerNorm transformer encoder block, the
// bidirectional twin of nn::Block,
//   h = x + dropout(attn(ln_1(x)));  y = h + dropout(mlp(ln_2(h))),
// with non-causal self-attention that skips padded keys (the micro-batch's
// side input EncoderBlockConfig::key_mask names, "key_mask" by default,
// (B, T) i32, 1 for a real token; none: every key)
// and GPT-2's GELU MLP. Written forward-only (compute(); nn/tape.h). With
// tensor parallelism the attention heads and the MLP's hidden units split
// over the group; the dropouts act on replicated activations. A unit ZeRO-3
// gathers and frees as a whole, and one full recomputation recomputes.
#pragma once

#include "ht/nn/dropout.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/mlp.h"
#include "ht/nn/self_attention.h"

namespace ht::nn {

struct EncoderBlockConfig {
  std::int64_t dim = 0;     // model width
  int n_head = 1;           // attention heads (dividing dim)
  std::int64_t hidden = 0;  // the MLP's hidden units (0: 4 dim)
  float dropout = 0.f;      // after the attention and after the MLP (0: none)
  bool bias = true;         // biases on the attention's projections
  std::string key_mask = "key_mask";  // the side input of the padding mask
};

class EncoderBlock : public Module {
 public:
  /// Throws kConfig naming the value when a size does not fit (as SelfAttention, MLP and Dropout do).
  EncoderBlock(std::string name, const EncoderBlockConfig& config, Device device, TensorParallel tp = {});

  LayerNorm& ln_1() { return ln_1_; }
  SelfAttention& attn() { return attn_; }
  LayerNorm& ln_2() { return ln_2_; }
  MLP& mlp() { return mlp_; }

 protected:
  Var compute(const Var& x) override;

 private:
  LayerNorm& ln_1_;
  SelfAttention& attn_;
  LayerNorm& ln_2_;
  MLP& mlp_;
  Dropout* drop_1_ = nullptr;  // null without dropout
  Dropout* drop_2_ = nullptr;
};

}  // namespace ht::nn
