// ht::nn::Block: one pre-LayerNorm transformer block,
//   x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
// The unit ZeRO-3 gathers and frees as a whole.
#pragma once

#include "ht/nn/attention.h"
#include "ht/nn/layer_norm.h"
#include "ht/nn/mlp.h"

namespace ht::nn {

class Block : public Module {
 public:
  Block(std::string name, std::int64_t dim, int n_head, Device device, TensorParallel tp = {},
        ContextParallel cp = {});

  LayerNorm& ln_1() { return *ln_1_; }
  CausalSelfAttention& attn() { return *attn_; }
  LayerNorm& ln_2() { return *ln_2_; }
  MLP& mlp() { return *mlp_; }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  LayerNorm* ln_1_;
  CausalSelfAttention* attn_;
  LayerNorm* ln_2_;
  MLP* mlp_;
};

}  // namespace ht::nn
