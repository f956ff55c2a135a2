// ht::nn::CausalSelfAttention.
#include "ht/nn/attention.h"

#include "ht/ops/attention.h"

namespace ht::nn {

CausalSelfAttention::CausalSelfAttention(std::string name, std::int64_t dim, int n_head, Device device,
                                         TensorParallel tp)
    : Module(std::move(name)), n_head_(n_head / tp.size()) {
  HT_CHECK(n_head > 0 && dim % n_head == 0, ErrorKind::kConfig,
           "attention '{}': n_head={} must divide n_embd={}", this->name(), n_head, dim);
  HT_CHECK(n_head % tp.size() == 0, ErrorKind::kConfig,
           "attention '{}': n_head={} does not split over tensor-parallel size {}; choose --tp dividing n_head",
           this->name(), n_head, tp.size());
  c_attn_ = &add_module(std::make_unique<Linear>("c_attn", dim, 3 * dim, true, device, tp, LinearSplit::kColumn, 3));
  c_proj_ = &add_module(std::make_unique<Linear>("c_proj", dim, dim, true, device, tp, LinearSplit::kRow));
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
  ops::attention_forward(qkv, n_head_, att, lse);
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
    ops::attention_forward(qkv, n_head_, att, lse);
    ctx.save(c_proj_, {att});
  }
  Tensor datt = c_proj_->backward(ctx, dy);
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), dy.device());
  ops::attention_backward(datt, qkv, att, lse, n_head_, dqkv);
  return c_attn_->backward(ctx, dqkv);
}

}  // namespace ht::nn
