// ht::nn::MLP.
#include "ht/nn/mlp.h"

#include "ht/ops/elementwise.h"

namespace ht::nn {

MLP::MLP(std::string name, std::int64_t dim, std::int64_t hidden, Device device, TensorParallel tp)
    : Module(std::move(name)) {
  c_fc_ = &add_module(std::make_unique<Linear>("c_fc", dim, hidden, true, device, tp, LinearSplit::kColumn));
  c_proj_ = &add_module(std::make_unique<Linear>("c_proj", hidden, dim, true, device, tp, LinearSplit::kRow));
  c_fc_->set_bias_grad_by_caller(true);  // summed in GELU's backward
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
  // In place: da becomes dh, and c_fc's bias gradient is summed from it in the same pass.
  Parameter& bias = *c_fc_->bias();
  bias.allocate_grad();
  Tensor da2 = da.flatten_rows();
  ops::gelu_backward_bias_grad(ctx.saved(this).at(0).flatten_rows(), da2, da2, bias.grad());
  bias.mark_grad_ready();
  return c_fc_->backward(ctx, da);
}

}  // namespace ht::nn
