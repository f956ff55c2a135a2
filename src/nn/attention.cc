// ht::nn::CausalSelfAttention.
#include "ht/nn/attention.h"

#include "ht/ops/attention.h"
#include "ht/ops/movement.h"

namespace ht::nn {

CausalSelfAttention::CausalSelfAttention(std::string name, std::int64_t dim, int n_head, Device device,
                                         TensorParallel tp, ContextParallel cp)
    : Module(std::move(name)), n_head_(n_head / tp.size()), cp_(cp) {
  HT_CHECK(n_head > 0 && dim % n_head == 0, ErrorKind::kConfig,
           "attention '{}': n_head={} must divide n_embd={}", this->name(), n_head, dim);
  HT_CHECK(n_head % tp.size() == 0, ErrorKind::kConfig,
           "attention '{}': n_head={} does not split over tensor-parallel size {}; choose --tp dividing n_head",
           this->name(), n_head, tp.size());
  c_attn_ = &add_module(std::make_unique<Linear>("c_attn", dim, 3 * dim, true, device, tp, LinearSplit::kColumn, 3));
  c_proj_ = &add_module(std::make_unique<Linear>("c_proj", dim, dim, true, device, tp, LinearSplit::kRow));
}

namespace {

/// Part `i` (q, k or v) of a packed (B, T, 3c) projection, copied.
Tensor packed_part(const Tensor& qkv, int i) {
  const std::int64_t c = qkv.size(2) / 3;
  return ops::narrow_copy(qkv, 2, i * c, c);
}

}  // namespace

void CausalSelfAttention::attend(const Tensor& qkv, Tensor& att, Tensor& lse) const {
  if (cp_.size() == 1) return ops::attention_forward(qkv, n_head_, att, lse);
  const ops::AttentionOptions options{.n_head = n_head_, .n_kv_head = n_head_, .causal = true};
  context_parallel_attention_forward(packed_part(qkv, 0), packed_part(qkv, 1), packed_part(qkv, 2), options, cp_,
                                     att, lse);
}

void CausalSelfAttention::attend_backward(const Tensor& datt, const Tensor& qkv, const Tensor& att, const Tensor& lse,
                                          Tensor& dqkv) const {
  if (cp_.size() == 1) return ops::attention_backward(datt, qkv, att, lse, n_head_, dqkv);
  const ops::AttentionOptions options{.n_head = n_head_, .n_kv_head = n_head_, .causal = true};
  const Tensor q = packed_part(qkv, 0), k = packed_part(qkv, 1), v = packed_part(qkv, 2);
  const auto like = [](const Tensor& t) {
    return Tensor::empty(t.shape(), t.dtype(), t.device(), MemCategory::kActivations);
  };
  Tensor dq = like(q), dk = like(k), dv = like(v);
  context_parallel_attention_backward(datt, q, k, v, att, lse, options, cp_, dq, dk, dv);
  const std::int64_t c = q.size(2);
  ops::narrow_into(dq, 2, 0, dqkv);
  ops::narrow_into(dk, 2, c, dqkv);
  ops::narrow_into(dv, 2, 2 * c, dqkv);
}

void CausalSelfAttention::set_recompute(Recompute mode) {
  Module::set_recompute(mode);
  c_proj_->set_input_saved_by_caller(mode == Recompute::kSelective);
}

Tensor CausalSelfAttention::forward_impl(Context& ctx, const Tensor& x) {
  HT_CHECK(x.ndim() == 3, ErrorKind::kShapeMismatch, "attention '{}': input must be (B, T, C), got {}", name(),
           shape_str(x.shape()));
  const std::int64_t b = x.size(0), t = x.size(1);
  Tensor qkv = c_attn_->forward(ctx, x);
  const std::int64_t c = qkv.size(2) / 3;  // this rank's channels (whole heads)
  Tensor att = Tensor::empty({b, t, c}, qkv.dtype(), x.device());
  Tensor lse = Tensor::empty({b, n_head_, t}, DType::kF32, x.device());  // f32 whatever the compute dtype
  attend(qkv, att, lse);
  if (recompute() == Recompute::kSelective)
    ctx.save(this, {qkv, Tensor(), Tensor()});  // att and lse: recomputed in backward
  else
    ctx.save(this, {qkv, att, lse});  // att is c_proj's saved input too: the same storage
  return c_proj_->forward(ctx, att);
}

Tensor CausalSelfAttention::backward_impl(Context& ctx, const Tensor& dy) {
  const std::vector<Tensor> s = ctx.saved(this);
  const Tensor& qkv = s.at(0);
  Tensor att = s.at(1), lse = s.at(2);
  if (!att.defined()) {
    // Selective recomputation: the attention forward again, the same bits
    // (a deterministic op), and c_proj's input saved only now.
    att = Tensor::empty({qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(), qkv.device());
    lse = Tensor::empty({qkv.size(0), n_head_, qkv.size(1)}, DType::kF32, qkv.device());
    attend(qkv, att, lse);
    ctx.save(c_proj_, {att});
  }
  Tensor datt = c_proj_->backward(ctx, dy);
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), dy.device());
  attend_backward(datt, qkv, att, lse, dqkv);
  return c_attn_->backward(ctx, dqkv);
}

}  // namespace ht::nn
