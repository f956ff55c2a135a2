// ht::nn::CausalSelfAttention.
#include "ht/nn/attention.h"

#include "ht/data/data_source.h"
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

std::vector<Tensor> CausalSelfAttention::attention_inputs(const Tensor& qkv) const {
  if (cp_.size() == 1) return {qkv};
  return {packed_part(qkv, 0), packed_part(qkv, 1), packed_part(qkv, 2)};
}

ops::AttentionOptions CausalSelfAttention::options() const {
  return {.n_head = n_head_, .n_kv_head = n_head_, .causal = true};
}

void CausalSelfAttention::attend(const std::vector<Tensor>& in, const Tensor& docs, Tensor& att, Tensor& lse) const {
  if (in.size() == 1) return ops::attention_forward(in[0], n_head_, docs.defined() ? &docs : nullptr, att, lse);
  context_parallel_attention_forward(in[0], in[1], in[2], options(), cp_, att, lse);
}

void CausalSelfAttention::attend_backward(const Tensor& datt, const std::vector<Tensor>& in, const Tensor& docs,
                                          const Tensor& att, const Tensor& lse, Tensor& dqkv) const {
  if (in.size() == 1)
    return ops::attention_backward(datt, in[0], att, lse, n_head_, docs.defined() ? &docs : nullptr, dqkv);
  const auto like = [](const Tensor& t) {
    return Tensor::empty(t.shape(), t.dtype(), t.device(), MemCategory::kActivations);
  };
  Tensor dq = like(in[0]), dk = like(in[1]), dv = like(in[2]);
  context_parallel_attention_backward(datt, in[0], in[1], in[2], att, lse, options(), cp_, dq, dk, dv);
  const std::int64_t c = in[0].size(2);
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
  const Tensor* docs =
      side_input_without_cp(ctx, std::string(data::kDocumentIdsSide), cp_, name(), "document masking");
  std::vector<Tensor> saved = attention_inputs(c_attn_->forward(ctx, x));
  const std::int64_t c = saved.size() == 1 ? saved[0].size(2) / 3 : saved[0].size(2);  // this rank's channels
  Tensor att = Tensor::empty({b, t, c}, saved[0].dtype(), x.device());
  Tensor lse = Tensor::empty({b, n_head_, t}, DType::kF32, x.device());  // f32 whatever the compute dtype
  attend(saved, docs ? *docs : Tensor(), att, lse);
  // att is c_proj's saved input too (the same storage); under selective
  // recomputation neither it nor lse is kept: backward computes them again.
  // The document ids (or an undefined tensor) come last: backward's
  // probabilities need them.
  const bool selective = recompute() == Recompute::kSelective;
  saved.push_back(selective ? Tensor() : att);
  saved.push_back(selective ? Tensor() : lse);
  saved.push_back(docs ? *docs : Tensor());
  ctx.save(this, std::move(saved));
  return c_proj_->forward(ctx, att);
}

Tensor CausalSelfAttention::backward_impl(Context& ctx, const Tensor& dy) {
  std::vector<Tensor> in = ctx.saved(this);  // qkv, or q, k and v; then att, lse and the document ids
  const Tensor docs = in.back();
  in.pop_back();
  Tensor lse = in.back();
  in.pop_back();
  Tensor att = in.back();
  in.pop_back();
  const Tensor& first = in.at(0);
  const std::int64_t c = in.size() == 1 ? first.size(2) / 3 : first.size(2);
  if (!att.defined()) {
    // Selective recomputation: the attention forward again, the same bits
    // (a deterministic op), and c_proj's input saved only now.
    att = Tensor::empty({first.size(0), first.size(1), c}, first.dtype(), first.device());
    lse = Tensor::empty({first.size(0), n_head_, first.size(1)}, DType::kF32, first.device());
    attend(in, docs, att, lse);
    ctx.save(c_proj_, {att});
  }
  Tensor datt = c_proj_->backward(ctx, dy);
  Tensor dqkv = Tensor::empty({first.size(0), first.size(1), 3 * c}, first.dtype(), dy.device());
  attend_backward(datt, in, docs, att, lse, dqkv);
  return c_attn_->backward(ctx, dqkv);
}

}  // namespace ht::nn
