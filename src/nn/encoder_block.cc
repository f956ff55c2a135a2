// ht::nn::EncoderBlock, forward only.
#include "ht/nn/encoder_block.h"

#include "ht/nn/functional.h"

namespace ht::nn {

EncoderBlock::EncoderBlock(std::string name, const EncoderBlockConfig& c, Device device, TensorParallel tp)
    : Module(std::move(name)),
      ln_1_(add_module(std::make_unique<LayerNorm>("ln_1", c.dim, device))),
      attn_(add_module(std::make_unique<SelfAttention>(
          "attn", AttentionConfig{.dim = c.dim, .n_head = c.n_head, .causal = false, .bias = c.bias, .key_mask = c.key_mask}, device, tp))),
      ln_2_(add_module(std::make_unique<LayerNorm>("ln_2", c.dim, device))),
      mlp_(add_module(std::make_unique<MLP>("mlp", c.dim, c.hidden > 0 ? c.hidden : 4 * c.dim, device, tp))) {
  if (c.dropout > 0.f) {
    drop_1_ = &add_module(std::make_unique<Dropout>("drop_1", c.dropout));
    drop_2_ = &add_module(std::make_unique<Dropout>("drop_2", c.dropout));
  }
}

Var EncoderBlock::compute(const Var& x) {
  Var a = attn_(ln_1_(x));
  if (drop_1_) a = (*drop_1_)(a);
  const Var h = x + a;
  Var m = mlp_(ln_2_(h));
  if (drop_2_) m = (*drop_2_)(m);
  return h + m;
}

}  // namespace ht::nn
