// ht::nn::SelfAttention.
#include "ht/nn/self_attention.h"

#include "ht/ops/attention.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/rope.h"

namespace ht::nn {

SelfAttention::SelfAttention(std::string name, const AttentionConfig& config, Device device, TensorParallel tp,
                             ContextParallel cp)
    : Module(std::move(name)), config_(config), cp_(cp) {
  AttentionConfig& c = config_;
  if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
  HT_CHECK(c.n_head > 0 && c.dim > 0 && c.dim % c.n_head == 0, ErrorKind::kConfig,
           "attention '{}': n_head={} must divide the width {}", this->name(), c.n_head, c.dim);
  HT_CHECK(c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0, ErrorKind::kConfig,
           "attention '{}': n_kv_head={} must divide n_head={} (grouped-query attention)", this->name(), c.n_kv_head,
           c.n_head);
  HT_CHECK(c.n_kv_head % tp.size() == 0, ErrorKind::kConfig,
           "attention '{}': n_kv_head={} does not split over tensor-parallel size {}; choose --tp dividing the "
           "key/value heads",
           this->name(), c.n_kv_head, tp.size());
  const std::int64_t head_dim = c.dim / c.n_head;
  local_heads_ = c.n_head / tp.size();
  local_kv_heads_ = c.n_kv_head / tp.size();
  const std::int64_t kv_dim = head_dim * c.n_kv_head;
  const bool qkv_bias = c.bias || c.qkv_bias;
  q_ = &add_module(std::make_unique<Linear>("q_proj", c.dim, c.dim, qkv_bias, device, tp, LinearSplit::kColumn));
  k_ = &add_module(std::make_unique<Linear>("k_proj", c.dim, kv_dim, qkv_bias, device, tp, LinearSplit::kColumn));
  v_ = &add_module(std::make_unique<Linear>("v_proj", c.dim, kv_dim, qkv_bias, device, tp, LinearSplit::kColumn));
  o_ = &add_module(std::make_unique<Linear>("o_proj", c.dim, c.dim, c.bias, device, tp, LinearSplit::kRow));
  if (c.rope_theta > 0.f) {
    HT_CHECK(c.max_positions > 0 && head_dim % 2 == 0, ErrorKind::kConfig,
             "attention '{}': rotary embeddings need max_positions > 0 (got {}) and an even head size (got {})",
             this->name(), c.max_positions, head_dim);
    rope_table_ = ops::rope_table(c.max_positions, head_dim, c.rope_theta, c.rope_scaling, device);
  }
}

void SelfAttention::set_recompute(Recompute mode) {
  Module::set_recompute(mode);
  o_->set_input_saved_by_caller(mode == Recompute::kSelective);
}

Tensor SelfAttention::forward_impl(Context& ctx, const Tensor& x) {
  HT_CHECK(x.ndim() == 3, ErrorKind::kShapeMismatch, "attention '{}': input must be (B, T, C), got {}", name(),
           shape_str(x.shape()));
  const std::int64_t b = x.size(0), t = x.size(1);
  HT_CHECK(!rope_table_.defined() || t * cp_.size() <= config_.max_positions, ErrorKind::kShapeMismatch,
           "attention '{}': sequence length {} exceeds the {} positions of the rotary table", name(), t * cp_.size(),
           config_.max_positions);
  const Tensor* key_mask = side_input_without_cp(ctx, config_.key_mask, cp_, name(), "a key padding mask");
  const Tensor* docs = side_input_without_cp(ctx, config_.document_ids, cp_, name(), "document masking");
  Tensor q = q_->forward(ctx, x), k = k_->forward(ctx, x), v = v_->forward(ctx, x);
  if (rope_table_.defined()) {
    const Tensor rows = context_rows(rope_table_, cp_, t);
    ops::rope_forward(q, rows, local_heads_, q);
    ops::rope_forward(k, rows, local_kv_heads_, k);
  }
  const ops::AttentionOptions options{.n_head = local_heads_, .n_kv_head = local_kv_heads_, .causal = config_.causal};
  Tensor out = Tensor::empty(q.shape(), q.dtype(), x.device());
  Tensor lse = Tensor::empty({b, local_heads_, t}, DType::kF32, x.device());  // f32 whatever the compute dtype
  if (cp_.size() > 1)
    context_parallel_attention_forward(q, k, v, options, cp_, out, lse);
  else
    ops::attention_forward(q, k, v, options, key_mask, docs, out, lse);
  // Backward recomputes the probabilities from lse, so it needs this
  // micro-batch's key mask and document ids: saved with the rest (undefined
  // when absent; out is o_proj's saved input too, the same storage).
  // Selective recomputation keeps neither out nor lse: backward computes
  // them again.
  const bool selective = recompute() == Recompute::kSelective;
  ctx.save(this, {q, k, v, selective ? Tensor() : out, selective ? Tensor() : lse, key_mask ? *key_mask : Tensor(),
                  docs ? *docs : Tensor()});
  return o_->forward(ctx, out);
}

Tensor SelfAttention::backward_impl(Context& ctx, const Tensor& dy) {
  const std::vector<Tensor> s = ctx.saved(this);
  const Tensor &q = s.at(0), &k = s.at(1), &v = s.at(2);
  const ops::AttentionOptions options{.n_head = local_heads_, .n_kv_head = local_kv_heads_, .causal = config_.causal};
  const Tensor* key_mask = s.at(5).defined() ? &s.at(5) : nullptr;
  const Tensor* docs = s.at(6).defined() ? &s.at(6) : nullptr;
  Tensor out = s.at(3), lse = s.at(4);
  if (!out.defined()) {
    // Selective recomputation: the attention forward again (the same bits:
    // a deterministic op), and o_proj's input saved only now.
    out = Tensor::empty(q.shape(), q.dtype(), q.device());
    lse = Tensor::empty({q.size(0), local_heads_, q.size(1)}, DType::kF32, q.device());
    if (cp_.size() > 1)
      context_parallel_attention_forward(q, k, v, options, cp_, out, lse);
    else
      ops::attention_forward(q, k, v, options, key_mask, docs, out, lse);
    ctx.save(o_, {out});
  }
  Tensor dout = o_->backward(ctx, dy);
  Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
  if (cp_.size() > 1)
    context_parallel_attention_backward(dout, q, k, v, out, lse, options, cp_, dq, dk, dv);
  else
    ops::attention_backward(dout, q, k, v, out, lse, options, key_mask, docs, dq, dk, dv);
  if (rope_table_.defined()) {
    const Tensor rows = context_rows(rope_table_, cp_, q.size(1));
    ops::rope_backward(dq, rows, local_heads_, dq);
    ops::rope_backward(dk, rows, local_kv_heads_, dk);
  }
  // The input feeds all three projections: its gradient is the sum of theirs
  // (v's, k's, then q's, in backward order).
  Tensor dx = v_->backward(ctx, dv);
  ops::add(dx, k_->backward(ctx, dk), dx);
  ops::add(dx, q_->backward(ctx, dq), dx);
  return dx;
}

}  // namespace ht::nn
