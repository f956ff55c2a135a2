// ht::nn::LMHead.
#include "ht/nn/lm_head.h"

#include "ht/ops/matmul.h"

namespace ht::nn {

LMHead::LMHead(Parameter& wte, TensorParallel tp) : Module(""), weight_(&wte), tp_(tp) {
  use_shared_parameter(wte);
}

LMHead::LMHead(std::string name, std::string weight_name, std::int64_t vocab_size, std::int64_t dim, Device device,
               TensorParallel tp)
    : Module(std::move(name)), tp_(tp) {
  ParamLayout layout;
  if (tp.size() > 1) layout = {.tp_split_dim = 0, .tp_rank = tp.rank(), .tp_size = tp.size()};
  // Initialised as Embedding's wte: the copy must start equal to the original.
  weight_ = &add_parameter(weight_name, {vocab_size, dim}, /*weight_decay=*/true, device, layout, Init::normal(1.f));
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
  weight_->allocate_grad();
  ops::matmul(dl, h.flatten_rows(), weight_->grad(), {.trans_a = true, .beta = 1.f});  // dwte += dlogits^T h
  weight_->mark_grad_ready();
  Tensor dh = Tensor::empty(h.shape(), h.dtype(), dlogits.device());
  Tensor dh2 = dh.flatten_rows();
  ops::matmul(dl, weight_->data(), dh2);
  tp_.all_reduce_sum(dh);  // each rank saw only its vocabulary rows
  return dh;
}

}  // namespace ht::nn
