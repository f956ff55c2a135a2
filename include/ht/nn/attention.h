// ht::nn::CausalSelfAttention: GPT-2's attention (c_attn -> causal softmax
// attention over n_head heads -> c_proj).
#pragma once

#include "ht/nn/linear.h"

namespace ht::nn {

class CausalSelfAttention : public Module {
 public:
  /// Throws kConfig unless n_head divides dim and tp divides n_head. With
  /// tensor parallelism each rank computes n_head / tp whole heads.
  CausalSelfAttention(std::string name, std::int64_t dim, int n_head, Device device, TensorParallel tp = {});

  Linear& c_attn() { return *c_attn_; }
  Linear& c_proj() { return *c_proj_; }

 protected:
  /// x (B, T, C) -> (B, T, C); saves qkv and the attention probabilities.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  int n_head_;
  Linear* c_attn_;
  Linear* c_proj_;
};

}  // namespace ht::nn
