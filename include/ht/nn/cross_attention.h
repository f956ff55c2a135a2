// ht::nn::CrossAttention: attention of one sequence's queries over another
// sequence's keys and values (an encoder-decoder's decoder reading the
// encoder's memory), forward-only (compute_with; nn/module.h):
//   y = o_proj(attention(q_proj(x), k_proj(memory), v_proj(memory)))
// with x (B, T, dim) and memory (B, S, memory_dim), S of its own; grouped-
// query heads; no causal mask; the memory's padding masked by the side input
// the config names ("memory_mask" by default, (B, S) i32, nonzero = a real
// position; none given: every position). Called as attn(x, {memory}); both
// inputs get their gradients.
//
// Tensor parallelism: q, k and v column-parallel and the output projection
// row-parallel, each rank computing n_head / tp query heads and n_kv_head /
// tp key/value heads, as nn::SelfAttention.
#pragma once

#include <string>

#include "ht/nn/linear.h"

namespace ht::nn {

struct CrossAttentionConfig {
  std::int64_t dim = 0;         // the queries' width, and the output's
  std::int64_t memory_dim = 0;  // the memory's width (0: dim)
  int n_head = 1;
  int n_kv_head = 0;  // 0: n_head
  bool bias = false;  // biases on the four projections
  std::string memory_mask = "memory_mask";  // the side input of the memory's padding mask
};

class CrossAttention : public Module {
 public:
  /// Throws kConfig naming the value when n_head does not divide dim,
  /// n_kv_head n_head, or tp n_kv_head.
  CrossAttention(std::string name, const CrossAttentionConfig& config, Device device, TensorParallel tp = {});

  const CrossAttentionConfig& config() const { return config_; }

 protected:
  /// x (B, T, dim) and more = {memory (B, S, memory_dim)} -> (B, T, dim).
  Var compute_with(const Var& x, const std::vector<Var>& more) override;

 private:
  CrossAttentionConfig config_;
  int local_heads_, local_kv_heads_;
  Linear *q_, *k_, *v_, *o_;
};

}  // namespace ht::nn
