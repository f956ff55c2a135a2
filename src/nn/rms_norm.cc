// ht::nn::RMSNorm.
#include "ht/nn/rms_norm.h"

#include "ht/ops/rmsnorm.h"

namespace ht::nn {

RMSNorm::RMSNorm(std::string name, std::int64_t dim, Device device, float eps) : Module(std::move(name)), eps_(eps) {
  weight_ = &add_parameter("weight", {dim}, /*weight_decay=*/false, device, {}, Init::ones());
}

Tensor RMSNorm::forward_impl(Context& ctx, const Tensor& x) {
  const Tensor x2 = x.flatten_rows();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({x2.size(0)}, DType::kF32, x.device());
  Tensor y2 = y.flatten_rows();
  ops::rmsnorm_forward(x2, weight_->data(), y2, rstd, eps_);
  ctx.save(this, {x, rstd});
  return y;
}

Tensor RMSNorm::backward_impl(Context& ctx, const Tensor& dy) {
  const auto& s = ctx.saved(this);
  const Tensor& x = s.at(0);
  weight_->allocate_grad();
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor dx2 = dx.flatten_rows();
  ops::rmsnorm_backward(dy.flatten_rows(), x.flatten_rows(), weight_->data(), s.at(1), dx2, weight_->grad());
  weight_->mark_grad_ready();
  return dx;
}

}  // namespace ht::nn
