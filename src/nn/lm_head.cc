// ht::nn::LMHead.
#include "ht/nn/lm_head.h"

#include "ht/ops/matmul.h"
#include "weight_grad.h"

namespace ht::nn {

LMHead::LMHead(Parameter& wte, TensorParallel tp) : Module(""), weight_(&wte), tp_(tp) {
  use_shared_parameter(wte);
}

LMHead::LMHead(std::string name, std::string weight_name, std::int64_t vocab_size, std::int64_t dim, Device device,
               TensorParallel tp, std::int64_t padded_vocab)
    : Module(std::move(name)), tp_(tp) {
  const std::int64_t rows = padded_vocab > 0 ? padded_vocab : vocab_size;
  HT_CHECK(rows >= vocab_size && rows % tp.size() == 0, ErrorKind::kConfig,
           "LMHead '{}': {} rows (vocab_size={}) must cover the vocabulary and split over tensor-parallel size {}",
           this->name(), rows, vocab_size, tp.size());
  ParamLayout layout;
  if (tp.size() > 1) layout = {.tp_split_dim = 0, .tp_rank = tp.rank(), .tp_size = tp.size()};
  // Initialised as Embedding's wte: the copy must start equal to the original.
  weight_ = &add_parameter(weight_name, {rows, dim}, /*weight_decay=*/true, device, layout, Init::normal(1.f));
  weight_->set_real_rows(vocab_size);
}

Tensor LMHead::forward_impl(Context& ctx, const Tensor& h) {
  const std::int64_t b = h.size(0), t = h.size(1);
  Tensor logits = Tensor::empty({b, t, weight_->shape()[0]}, h.dtype(), h.device());
  Tensor logits2 = logits.flatten_rows();
  ops::matmul(h.flatten_rows(), weight_->data(), logits2, {.trans_b = true});
  ctx.save(this, {h});
  return logits;
}

Tensor LMHead::backward_impl(Context& ctx, const Tensor& dlogits) {
  const Tensor& h = ctx.saved(this).at(0);
  const Tensor dl = dlogits.flatten_rows();
  // dwte += dlogits^T h, or = for the step's first contribution (the head's
  // backward runs before the tied embedding's, unless deferred).
  detail::matmul_weight_grad(ctx, *weight_, dl, h.flatten_rows());
  Tensor dh = Tensor::empty(h.shape(), h.dtype(), dlogits.device());
  Tensor dh2 = dh.flatten_rows();
  ops::matmul(dl, weight_->data(), dh2);
  tp_.all_reduce_sum(dh);  // each rank saw only its vocabulary rows
  return dh;
}

}  // namespace ht::nn
