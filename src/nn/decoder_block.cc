// ht::nn::DecoderBlock, forward only.
#include "ht/nn/decoder_block.h"

#include "ht/nn/functional.h"

namespace ht::nn {

DecoderBlock::DecoderBlock(std::string name, const DecoderBlockConfig& c, Device device, TensorParallel tp)
    : Module(std::move(name)),
      ln_1_(add_module(std::make_unique<LayerNorm>("ln_1", c.dim, device))),
      self_attn_(add_module(std::make_unique<SelfAttention>(
          "self_attn", AttentionConfig{.dim = c.dim, .n_head = c.n_head, .causal = true, .bias = c.bias,
                                       .key_mask = c.key_mask},
          device, tp))),
      ln_2_(add_module(std::make_unique<LayerNorm>("ln_2", c.dim, device))),
      cross_attn_(add_module(std::make_unique<CrossAttention>(
          "cross_attn", CrossAttentionConfig{.dim = c.dim, .memory_dim = c.memory_dim, .n_head = c.n_head,
                                             .bias = c.bias, .memory_mask = c.memory_mask},
          device, tp))),
      ln_3_(add_module(std::make_unique<LayerNorm>("ln_3", c.dim, device))),
      mlp_(add_module(std::make_unique<MLP>("mlp", c.dim, c.hidden > 0 ? c.hidden : 4 * c.dim, device, tp))) {
  if (c.dropout > 0.f)
    for (int i = 0; i < 3; ++i)
      drop_[i] = &add_module(std::make_unique<Dropout>("drop_" + std::to_string(i + 1), c.dropout));
}

Var DecoderBlock::compute_with(const Var& x, const std::vector<Var>& more) {
  HT_CHECK(more.size() == 1, ErrorKind::kInvalidArgument,
           "decoder block '{}' takes one further input, the encoder's memory: call it as block(x, {{memory}}), not "
           "with {}",
           name(), more.size());
  const auto dropped = [&](int i, const Var& v) { return drop_[i] ? (*drop_[i])(v) : v; };
  const Var h = x + dropped(0, self_attn_(ln_1_(x)));
  const Var g = h + dropped(1, cross_attn_(ln_2_(h), {more[0]}));
  return g + dropped(2, mlp_(ln_3_(g)));
}

}  // namespace ht::nn
