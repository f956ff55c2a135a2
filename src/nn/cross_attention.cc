// ht::nn::CrossAttention, forward only.
#include "ht/nn/cross_attention.h"

#include "ht/nn/functional.h"

namespace ht::nn {

CrossAttention::CrossAttention(std::string name, const CrossAttentionConfig& config, Device device, TensorParallel tp)
    : Module(std::move(name)), config_(config) {
  CrossAttentionConfig& c = config_;
  if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
  if (c.memory_dim == 0) c.memory_dim = c.dim;
  HT_CHECK(c.n_head > 0 && c.dim > 0 && c.dim % c.n_head == 0, ErrorKind::kConfig,
           "cross-attention '{}': n_head={} must divide the width {}", this->name(), c.n_head, c.dim);
  HT_CHECK(c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0, ErrorKind::kConfig,
           "cross-attention '{}': n_kv_head={} must divide n_head={} (grouped-query attention)", this->name(),
           c.n_kv_head, c.n_head);
  HT_CHECK(c.n_kv_head % tp.size() == 0, ErrorKind::kConfig,
           "cross-attention '{}': n_kv_head={} does not split over tensor-parallel size {}; choose --tp dividing the "
           "key/value heads",
           this->name(), c.n_kv_head, tp.size());
  const std::int64_t kv_dim = c.dim / c.n_head * c.n_kv_head;
  local_heads_ = c.n_head / tp.size();
  local_kv_heads_ = c.n_kv_head / tp.size();
  q_ = &add_module(std::make_unique<Linear>("q_proj", c.dim, c.dim, c.bias, device, tp, LinearSplit::kColumn));
  k_ = &add_module(std::make_unique<Linear>("k_proj", c.memory_dim, kv_dim, c.bias, device, tp, LinearSplit::kColumn));
  v_ = &add_module(std::make_unique<Linear>("v_proj", c.memory_dim, kv_dim, c.bias, device, tp, LinearSplit::kColumn));
  o_ = &add_module(std::make_unique<Linear>("o_proj", c.dim, c.dim, c.bias, device, tp, LinearSplit::kRow));
}

Var CrossAttention::compute_with(const Var& x, const std::vector<Var>& more) {
  HT_CHECK(more.size() == 1, ErrorKind::kInvalidArgument,
           "cross-attention '{}' takes one further input, the memory: call it as attn(x, {{memory}}), not with {}",
           name(), more.size());
  const Var& memory = more[0];
  HT_CHECK(x.ndim() == 3 && memory.ndim() == 3 && memory.size(0) == x.size(0), ErrorKind::kShapeMismatch,
           "cross-attention '{}': x must be (B, T, {}) and the memory (B, S, {}), got {} and {}", name(), config_.dim,
           config_.memory_dim, shape_str(x.shape()), shape_str(memory.shape()));
  const Tensor* mask = x.tape().context().side_input(config_.memory_mask);
  const Var q = (*q_)(x), k = (*k_)(memory), v = (*v_)(memory);
  const Var out = attention(q, k, v, {.n_head = local_heads_, .n_kv_head = local_kv_heads_, .causal = false},
                            mask ? x.tape().constant(*mask) : Var());
  return (*o_)(out);
}

}  // namespace ht::nn
