// ht::nn::MLP.
#include "ht/nn/mlp.h"

#include "ht/ops/elementwise.h"

namespace ht::nn {

MLP::MLP(std::string name, std::int64_t dim, std::int64_t hidden, Device device, TensorParallel tp)
    : Module(std::move(name)) {
  c_fc_ = &add_module(std::make_unique<Linear>("c_fc", dim, hidden, true, device, tp, LinearSplit::kColumn));
  c_proj_ = &add_module(std::make_unique<Linear>("c_proj", hidden, dim, true, device, tp, LinearSplit::kRow));
}

Tensor MLP::forward_impl(Context& ctx, const Tensor& x) {
  Tensor h = c_fc_->forward(ctx, x);
  Tensor a = Tensor::empty(h.shape(), h.dtype(), h.device());
  ops::gelu_forward(h, a);
  ctx.save(this, {h});
  return c_proj_->forward(ctx, a);
}

Tensor MLP::backward_impl(Context& ctx, const Tensor& dy) {
  Tensor da = c_proj_->backward(ctx, dy);
  ops::gelu_backward(ctx.saved(this).at(0), da, da);  // in place: da becomes dh
  return c_fc_->backward(ctx, da);
}

}  // namespace ht::nn
